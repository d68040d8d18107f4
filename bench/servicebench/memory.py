"""What an open session costs a server: the growth of its resident set per open ``Parse`` stream
and per ``ParseBatch`` session (qwen3, two tools), idle (opened) and mid-tool-call (the workload's
ids up to 8 into the first call's arguments fed). One measurement, shared by
``bench/service_bench.py`` (*Memory per open session*) and ``bench/engine_memory.py`` (the two
engines side by side).

RSS growth only counts memory the allocator had to ask the kernel for. A server that has just
loaded its models holds freed memory (pymalloc pools, malloc chunks) that new sessions reuse
without growing the resident set, and how much differs by engine and by load (one run of the
reference engine measured a negative growth). So each measurement opens and feeds ``count``
sessions first, unmeasured, that soak up that free memory, then measures the growth of the next
``count``: the marginal cost of a session.

The sessions are left open: a caller that measures both RPCs in one server measures the second on
top of the first's live sessions, so the allocator has no freed memory to hand back and blur the
growth (closing them first would let the second RPC reuse the first's pages)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
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


async def _marginal(
    server: ProcessServer,
    count: int,
    open_some: Callable[[int], Awaitable[None]],
    feed_all: Callable[[], Awaitable[None]],
) -> tuple[float, float]:
    """Bytes per session of the second ``count`` sessions opened, (idle, after ``feed_all``)."""
    await open_some(count)
    await feed_all()
    await asyncio.sleep(1)
    before = rss(server)
    await open_some(count)
    await asyncio.sleep(1)
    idle = rss(server)
    await feed_all()
    await asyncio.sleep(1)
    busy = rss(server)
    return (idle - before) / count, (busy - before) / count


async def parse_sessions(server: ProcessServer, ids: list[int], count: int) -> tuple[float, float, Held]:
    """Bytes of RSS per open Parse stream: (idle, mid-tool-call, close)."""
    step = pb.ParseRequest(steps=[pb.Step(token_ids=ids[: ids.index(TOOL_CALL) + 8])])
    channels = [open_channel(server.target) for _ in range(4)]
    calls: list[Any] = []
    fed = 0

    async def open_some(n: int) -> None:
        new = [pb_grpc.ParserServiceStub(channels[i % 4]).Parse() for i in range(n)]
        for call in new:
            await call.write(pb.ParseRequest(open=pb.Open(model="qwen3", tools_json=TOOLS)))
        for call in new:
            await call.initial_metadata()
        calls.extend(new)

    async def feed_all() -> None:
        nonlocal fed
        for call in calls[fed:]:
            await call.write(step)
            await call.read()
        fed = len(calls)

    idle, busy = await _marginal(server, count, open_some, feed_all)

    async def close() -> None:
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()

    return idle, busy, close


async def batch_sessions(server: ProcessServer, ids: list[int], count: int) -> tuple[float, float, Held]:
    """Bytes of RSS per ParseBatch session (one stream): (idle, mid-tool-call, close)."""
    mid = ids[: ids.index(TOOL_CALL) + 8]
    channel = open_channel(server.target)
    call = pb_grpc.ParserServiceStub(channel).ParseBatch()
    keys: list[str] = []
    fed = 0

    async def open_some(n: int) -> None:
        new = [f"m{len(keys) + i}" for i in range(n)]
        await call.write(opens(new))
        await call.read()
        keys.extend(new)

    async def feed_all() -> None:
        nonlocal fed
        steps = [pb.SessionInput(key=k, steps=[pb.Step(token_ids=mid)]) for k in keys[fed:]]
        await call.write(pb.ParseBatchRequest(sessions=steps))
        await call.read()
        fed = len(keys)

    idle, busy = await _marginal(server, count, open_some, feed_all)

    async def close() -> None:
        call.cancel()
        await channel.close()

    return idle, busy, close


SESSIONS = {"Parse": parse_sessions, "ParseBatch": batch_sessions}


async def per_session(rpc: str, server: ProcessServer, ids: list[int], count: int) -> tuple[float, float]:
    """``rpc``'s (idle, mid-tool-call) bytes per session, its sessions closed afterwards."""
    idle, busy, close = await SESSIONS[rpc](server, ids, count)
    await close()
    return idle, busy
