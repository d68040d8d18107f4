"""What an open session costs a server: the growth of its resident set per open ``Parse`` stream
and per ``ParseBatch`` session (qwen3, two tools), idle (opened) and mid-tool-call (the workload's
ids up to 8 into the first call's arguments fed). One measurement, shared by
``bench/service_bench.py`` (*Memory per open session*) and ``bench/engine_memory.py`` (the two
engines side by side).

The sessions are left open: a caller that measures both RPCs in one server measures the second on
top of the first's live sessions, so the allocator has no freed memory to hand back and blur the
growth (closing them first would let the second RPC reuse the first's pages)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from tests.testkit.servers import ProcessServer

from .loads import TOOLS, open_channel, opens

TOOL_CALL = 151657
"""qwen3's ``<tool_call>`` id: mid-tool-call is 8 ids past it."""

Held = Callable[[], Coroutine[Any, Any, None]]
"""Closes what a measurement left open."""


def rss(server: ProcessServer) -> int:
    """The server's (first process's) resident set in bytes."""
    return server.memory()[0][0]


async def parse_sessions(server: ProcessServer, ids: list[int], count: int) -> tuple[float, float, Held]:
    """Bytes of RSS per open Parse stream: (idle, mid-tool-call, close)."""
    mid = ids.index(TOOL_CALL) + 8
    channels = [open_channel(server.target) for _ in range(4)]
    calls = []
    before = rss(server)
    for i in range(count):
        call = pb_grpc.ParserServiceStub(channels[i % 4]).Parse()
        await call.write(pb.ParseRequest(open=pb.Open(model="qwen3", tools_json=TOOLS)))
        calls.append(call)
    for call in calls:
        await call.initial_metadata()
    await asyncio.sleep(1)
    idle = rss(server)
    for call in calls:
        await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=ids[:mid])]))
        await call.read()
    await asyncio.sleep(1)
    busy = rss(server)

    async def close() -> None:
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()

    return (idle - before) / count, (busy - before) / count, close


async def batch_sessions(server: ProcessServer, ids: list[int], count: int) -> tuple[float, float, Held]:
    """Bytes of RSS per ParseBatch session (one stream): (idle, mid-tool-call, close)."""
    mid = ids.index(TOOL_CALL) + 8
    channel = open_channel(server.target)
    call = pb_grpc.ParserServiceStub(channel).ParseBatch()
    before = rss(server)
    keys = [f"m{i}" for i in range(count)]
    await call.write(opens(keys))
    await call.read()
    await asyncio.sleep(1)
    idle = rss(server)
    steps = [pb.SessionInput(key=k, steps=[pb.Step(token_ids=ids[:mid])]) for k in keys]
    await call.write(pb.ParseBatchRequest(sessions=steps))
    await call.read()
    await asyncio.sleep(1)
    busy = rss(server)

    async def close() -> None:
        call.cancel()
        await channel.close()

    return (idle - before) / count, (busy - before) / count, close


SESSIONS = {"Parse": parse_sessions, "ParseBatch": batch_sessions}


async def per_session(rpc: str, server: ProcessServer, ids: list[int], count: int) -> tuple[float, float]:
    """``rpc``'s (idle, mid-tool-call) bytes per session, its sessions closed afterwards."""
    idle, busy, close = await SESSIONS[rpc](server, ids, count)
    await close()
    return idle, busy
