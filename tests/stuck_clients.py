"""Clients that misbehave at the HTTP/2 level, for the tests of what a server owes other clients:
a real grpc client with small flow-control windows (no BDP probing, 16 KiB of lookahead) that
writes and then neither reads nor writes."""

from __future__ import annotations

import asyncio
import contextlib

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client import open_message

SMALL_WINDOWS = (
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 16384),
    ("grpc.use_local_subchannel_pool", 1),  # a connection of its own: windows are per connection too
)
"""Channel options of a client that lets little of the server's replies in before it reads."""

LONG_TOKEN = 89180
"""A qwen3 token of 114 characters (``//---…``): its steps' replies are far larger than they are."""
STEP = pb.ParseRequest(steps=[pb.Step(token_ids=[LONG_TOKEN])] * 1024)
"""1,024 one-id steps (5 KiB): a reply of over 100 KiB, more than a small window lets out."""
BATCH_OPEN = pb.ParseBatchRequest(sessions=[pb.SessionInput(key="a", open=open_message("qwen3"))])
BATCH_STEP = pb.ParseBatchRequest(sessions=[pb.SessionInput(key="a", steps=STEP.steps)])
"""The same on a ``ParseBatch`` stream, for its one session ``a``."""


class StuckStream:
    """A ``Parse`` stream (``ParseBatch`` with ``batch``), on a connection of its own, whose client
    writes ``messages`` step messages (those flow control lets through) and then neither reads nor
    writes, until ``read_all`` or ``close``. The default, 10 (50 KiB), fits in what the server reads
    before its writes block plus its window, so no write is in flight when the status comes
    (grpc's asyncio client reports INTERNAL then instead of the status: grpc/grpc#36066)."""

    def __init__(self, target: str, messages: int = 10, batch: bool = False) -> None:
        self.channel = grpc.aio.insecure_channel(target, options=SMALL_WINDOWS)
        stub = pb_grpc.ParserServiceStub(self.channel)
        self.call = stub.ParseBatch() if batch else stub.Parse()
        parse_open = pb.ParseRequest(open=open_message("qwen3"))
        self.first, self.step = (BATCH_OPEN, BATCH_STEP) if batch else (parse_open, STEP)
        self.messages = messages
        self.written = 0
        self._writer: asyncio.Task | None = None

    async def start(self) -> StuckStream:
        await self.call.write(self.first)
        await self.call.initial_metadata()  # as the clients do: a refusal comes before any step
        self._writer = asyncio.create_task(self._write())
        return self

    async def _write(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            for _ in range(self.messages):
                await self.call.write(self.step)
                self.written += 1

    async def stalled(self, quiet: float = 0.5, timeout: float = 20.0) -> None:
        """Wait until the writes make no progress for ``quiet`` seconds (flow control holds them,
        or all are written)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = -1
        while self.written != last and loop.time() < deadline:
            last = self.written
            await asyncio.sleep(quiet)

    async def read_all(self) -> tuple[int, grpc.StatusCode, str]:
        """Read what the server sent: the replies, then the status and its message."""
        replies = 0
        try:
            async for _ in self.call:
                replies += 1
        except grpc.aio.AioRpcError as exc:
            return replies, exc.code(), exc.details() or ""
        return replies, await self.call.code(), await self.call.details()

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
        self.call.cancel()
        await self.channel.close()
