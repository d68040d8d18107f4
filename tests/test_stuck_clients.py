"""A client that stops reading (and sending) holds no slot past the idle timeout (issue 37)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from parsetier.service import Limits
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client import AsyncClient
from stuck_clients import SMALL_WINDOWS, StuckStream

Code = grpc.StatusCode
LIMITS = Limits(max_sessions=2, idle_timeout=1.0)


async def _admitted_within(target: str, seconds: float) -> float:
    """Seconds until a new one-token session is served (RESOURCE_EXHAUSTED meanwhile)."""
    started = time.monotonic()
    async with AsyncClient(target, timeout=10) as client:
        while True:
            try:
                result = await client.parse_stream("qwen3", [[9707]])
                assert result.final.usage.completion_tokens == 1
                return time.monotonic() - started
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == Code.RESOURCE_EXHAUSTED, exc
                assert time.monotonic() - started < seconds, "the stuck streams still hold the slots"
                await asyncio.sleep(0.2)


@pytest.mark.parametrize("batch", [False, True], ids=["Parse", "ParseBatch"])
def test_a_stream_that_stops_reading_frees_its_slot(small_server, batch):
    """Two streams whose clients write, then neither read nor write, hold both slots; after the
    idle timeout (1 s) they end with DEADLINE_EXCEEDED and a third session is served. Before,
    the write blocked on flow control was not watched and they held their slots for good."""

    async def run():
        async with grpc.aio.insecure_channel(small_server.target, options=SMALL_WINDOWS) as channel:
            stub = pb_grpc.ParserServiceStub(channel)
            stuck = [await StuckStream(stub, batch=batch).start() for _ in range(2)]
            try:
                for stream in stuck:
                    await stream.stalled()
                waited = await _admitted_within(small_server.target, 15.0)
                outcomes = [await stream.read_all() for stream in stuck]
            finally:
                for stream in stuck:
                    stream.cancel()
            return waited, outcomes

    waited, outcomes = asyncio.run(run())
    assert waited < 15.0
    for replies, code, details in outcomes:
        assert code == Code.DEADLINE_EXCEEDED, (code, details)
        assert "read no reply for 1 s" in details
        assert replies >= 1  # the replies the client's window let out came first


def test_a_reading_client_is_not_cut(small_server):
    """A client that reads slowly but steadily (a reply taken every half second) keeps its stream
    past the idle timeout: progress, not the whole stream, is what the timeout bounds."""

    async def run():
        async with grpc.aio.insecure_channel(small_server.target, options=SMALL_WINDOWS) as channel:
            stream = await StuckStream(pb_grpc.ParserServiceStub(channel), messages=8).start()
            await stream.stalled(quiet=0.3)
            replies = 0
            started = time.monotonic()
            async for _ in stream.call:
                replies += 1
                if replies == 8:
                    break
                await asyncio.sleep(0.4)
            lived = time.monotonic() - started
            stream.cancel()
            return replies, lived

    replies, lived = asyncio.run(run())
    assert replies == 8 and lived > 2.0
