"""A client that stops reading (and sending) holds no slot past the idle timeout, and what such
clients make the server hold is bounded by its buffer budget (issue 37)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier.service.budget import STREAM_WINDOW
from parsetier.service.servicer import NOT_READING
from parsetier_client import AsyncClient
from stuck_clients import StuckStream

Code = grpc.StatusCode


@pytest.fixture(scope="module")
def small_server():
    """A server process with two slots and a 1 s idle timeout. A process, not a thread of the test
    (whose own grpc client shares the library): there the small client windows did not always hold
    the server's writes."""
    with ProcessServer("--preload", "qwen3", "--max-sessions", "2", "--idle-timeout", "1") as server:
        yield server


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


def test_a_stream_that_stops_reading_is_logged_at_once(small_server):
    """Its ``session_end`` line is written when the stream is ended, not when (if ever) the client
    reads the status that waits behind its unread replies."""

    async def run():
        stream = await StuckStream(small_server.target).start()
        try:
            await stream.stalled()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                lines = [
                    r
                    for r in list(small_server.logs)
                    if r.get("msg") == "session_end" and NOT_READING in str(r.get("error", ""))
                ]
                if lines:
                    return lines[-1]
                await asyncio.sleep(0.2)
            return None
        finally:
            await stream.close()

    line = asyncio.run(run())
    assert line is not None, "no session_end line while the client still holds the stream"
    assert line["outcome"] == "DEADLINE_EXCEEDED" and line["rpc"] == "Parse"


@pytest.mark.parametrize("batch", [False, True], ids=["Parse", "ParseBatch"])
def test_a_stream_that_stops_reading_frees_its_slot(small_server, batch):
    """Two streams whose clients write, then neither read nor write, hold both slots; after the
    idle timeout (1 s) they end with DEADLINE_EXCEEDED and a third session is served. Before,
    the write blocked on flow control was not watched and they held their slots for good."""

    async def run():
        stuck = [await StuckStream(small_server.target, batch=batch).start() for _ in range(2)]
        try:
            for stream in stuck:
                await stream.stalled()
            await asyncio.sleep(2.5)  # the idle timeout and a sweep, for the later of the two
            waited = await _admitted_within(small_server.target, 15.0)
            outcomes = [await stream.read_all() for stream in stuck]
        finally:
            for stream in stuck:
                await stream.close()
        return waited, outcomes

    waited, outcomes = asyncio.run(run())
    assert waited < 15.0
    for replies, code, details in outcomes:
        assert code == Code.DEADLINE_EXCEEDED, (code, details)
        assert "read no reply for 1 s" in details, (replies, details)
        assert replies >= 1  # the replies the client's window let out came first


def test_a_reading_client_is_not_cut(small_server):
    """A client that reads slowly but steadily (a reply taken every half second) keeps its stream
    past the idle timeout: progress, not the whole stream, is what the timeout bounds."""

    async def run():
        stream = await StuckStream(small_server.target, messages=8).start()
        await stream.stalled(quiet=0.3)
        replies = 0
        started = time.monotonic()
        async for _ in stream.call:
            replies += 1
            if replies == 8:
                break
            await asyncio.sleep(0.4)
        lived = time.monotonic() - started
        await stream.close()
        return replies, lived

    replies, lived = asyncio.run(run())
    assert replies == 8 and lived > 2.0


def test_the_buffer_budget_bounds_stuck_streams():
    """Streams that write and stop reading each hold their window, their last message and a
    reply in the server's buffer budget: past the budget the next stream is refused with
    RESOURCE_EXHAUSTED naming --max-buffered-bytes, whatever the session limit, and the server
    holds no more than the budget. Before, nothing counted them (200 took ~800 MB)."""
    budget = 6 * STREAM_WINDOW

    async def run(target: str):
        stuck: list[StuckStream] = []
        try:
            for _ in range(12):
                stream = await StuckStream(target).start()
                stuck.append(stream)
                await stream.stalled(quiet=0.3)
                if stream.call.done():
                    break
            refused = stuck[-1]
            return len(stuck), await refused.call.code(), await refused.call.details()
        finally:
            for stream in stuck:
                await stream.close()

    with ProcessServer("--preload", "qwen3", "--max-buffered-bytes", str(budget)) as server:
        opened, code, details = asyncio.run(run(server.target))
        assert code == Code.RESOURCE_EXHAUSTED, (code, details)
        assert "--max-buffered-bytes" in details and str(budget) in details
        assert 2 <= opened <= 6  # each holds at least its window, so at most 5 fit
        # Every stream's share is given back once it ended: as many fit again.
        again, code, _ = asyncio.run(run(server.target))
        assert again == opened and code == Code.RESOURCE_EXHAUSTED


def test_the_default_budget_is_a_share_of_memory():
    """A quarter of the memory the process may use, split between the workers, never under the
    floor; a charge past the budget names the flag."""
    from parsetier.service.budget import MIN_BUDGET, BufferBudget, default_budget, memory_bytes

    assert default_budget(1) == max(MIN_BUDGET, memory_bytes() // 4)
    assert default_budget(2) == max(MIN_BUDGET, memory_bytes() // 8)
    assert default_budget(10**9) == MIN_BUDGET
    budget = BufferBudget(100)
    share = budget.share()
    share.take(60)
    with pytest.raises(
        Exception, match=r"60 bytes .* 41 more would pass its budget of 100 \(--max-buffered-bytes\)"
    ):
        budget.share().take(41)
    share.close()
    assert budget.used == 0 and budget.peak == 60 and budget.refused == 1
