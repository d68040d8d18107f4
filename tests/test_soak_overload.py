"""Soak and overload against a real server process on loopback, sized for a small shared machine.

* Soak: 2,000 sessions over 60 s, within capacity. A probe session's per-message latency under
  that load is compared with the same probe on the idle server, measured in the same test.
* Overload: far more work than the server can do at once. Every session either completes exactly
  or is refused quickly with UNAVAILABLE ("overloaded", nothing processed); none is cut, timed
  out or left to grpc's silent 30 s cancel, and the server's memory returns to its baseline.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier.service.servicer import OFF_LOOP_BYTES
from parsetier_client import AsyncClient

pytestmark = pytest.mark.slow  # a soak under overload

HELLO = 9707  # "Hello" in Qwen3: every id is content, so every message gets a reply
CHANNELS = 4

SOAK_SESSIONS = 2000
SOAK_SECONDS = 60.0
SOAK_MESSAGES = 8
SOAK_CONCURRENCY = 64
PROBE_MESSAGES = 60
PROBE_RATIO = 8.0
"""Loaded median probe latency may be this many times the idle one (plus a small floor: the
test's own client shares the two cores with the server and with other developers' jobs)."""
PROBE_FLOOR = 0.02

OVERLOAD_SESSIONS = 400
OVERLOAD_MESSAGES = 3
OVERLOAD_IDS = (OFF_LOOP_BYTES - 256) // 2
"""Ids per overload message: as many as stay under the size that goes to a worker thread (2 bytes
each), so each is parsed on the event loop."""
OVERLOAD_LAG_SHARE = 1 / 4
"""The test server's lag limit is this share of one overload message's reply time on an idle
server, measured first on this machine: while the loop works through such messages one after
another a timer is late by up to that time (half of it at the median: twice the limit), so the
burst lags past the limit on a fast machine as on a slow one (about 3 ms per message on the
development machine). With a fixed 5 ms limit, a CI machine kept up with all 400 sessions and
nothing was refused."""
OVERLOAD_LAG_MS = (0.5, 5.0)
"""Bounds of that limit: above the idle loop's own jitter, below what a loaded machine passed."""
OVERLOAD_SECOND_WAVE = 0.3
OVERLOAD_SPREAD = 2.0
"""The overload's sessions come in two waves: half at once, which are admitted (an idle loop
takes their opens in before their parsing makes it lag) and make the burst whose memory must be
returned, and the other half from this many seconds later, spread over ``OVERLOAD_SPREAD``
seconds, into a loop behind, which are refused: spread, some arrive while the burst lasts
however fast the machine works through it. (All 400 at once, every open could be admitted before
the loop lagged, and then nothing was refused.)"""
REFUSAL_SECONDS = 30.0
"""grpc's silent-cancel horizon. The server takes a waiting burst in within a few loop iterations
while it refuses (service/accepts.py, counted in tests/test_admission.py), but this test's one
client process is saturated too and sees its refusals 4-5 s late, its own loop lag included."""
MEMORY_SLACK = 1.6
"""Resident memory after the overload may be this many times the baseline. The sessions' own data
(a few hundred KB each here: over 100 MB for the 400, past this bound) is freed, and the server hands the
freed heap back once the burst is over (service/heap.py): measured 0.9-1.15x the baseline in most
runs, up to 1.47x when all 400 were admitted at once (pages that still hold a live chunk stay);
it does not grow from burst to burst as a leak would."""


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def _probe(client: AsyncClient, messages: int, gap: float = 0.02) -> list[float]:
    """One session sending one id per message; the latency of each message's reply."""
    stream = await client.open("qwen3", request_id="probe")
    replies = stream.__aiter__()
    latencies = []
    for _ in range(messages):
        started = time.perf_counter()
        await stream.send([HELLO])
        await replies.__anext__()
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(gap)
    await stream.finish("stop")
    async for _ in replies:
        pass
    assert stream.final.message.content == "Hello" * messages
    return latencies


async def _probe_after_backoff(client: AsyncClient, messages: int, attempts: int = 10) -> int:
    """``_probe`` as the refusal tells a client to: retried after a backoff while the loop still
    runs behind from the overload just ended (bounded: the server must recover within seconds).
    The number of refusals before it was served."""
    for refused in range(attempts - 1):
        try:
            await _probe(client, messages)
            return refused
        except grpc.aio.AioRpcError as error:
            if error.code() is not grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(0.5)
    await _probe(client, messages)
    return attempts - 1


async def _session(
    client: AsyncClient, messages: int, ids: int, outcomes: Counter, refusals: list[float]
) -> None:
    started = time.monotonic()
    try:
        result = await client.parse_stream("qwen3", [[HELLO] * ids] * messages)
    except grpc.aio.AioRpcError as exc:
        outcomes[exc.code().name] += 1
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            assert "overloaded" in exc.details(), exc.details()
            refusals.append(time.monotonic() - started)
        return
    assert result.message.content == "Hello" * (messages * ids)
    outcomes["OK"] += 1


def test_soak_probe_keeps_its_latency():
    with ProcessServer("--preload", "qwen3") as server:
        server.wait_for_log("models loaded", timeout=120)

        async def run():
            clients = [AsyncClient(server.target, timeout=120, resume=False) for _ in range(CHANNELS)]
            try:
                await _probe(clients[0], 10)  # warm up the channel and the model's first use
                idle = await _probe(clients[0], PROBE_MESSAGES)
                outcomes: Counter = Counter()
                refusals: list[float] = []
                gate = asyncio.Semaphore(SOAK_CONCURRENCY)
                begin = time.monotonic()

                async def paced(i: int) -> None:
                    await asyncio.sleep(max(0.0, begin + i * SOAK_SECONDS / SOAK_SESSIONS - time.monotonic()))
                    async with gate:
                        await _session(clients[i % CHANNELS], SOAK_MESSAGES, 4, outcomes, refusals)

                load = asyncio.gather(*(paced(i) for i in range(SOAK_SESSIONS)))
                await asyncio.sleep(SOAK_SECONDS / 3)
                loaded = await _probe(clients[1], PROBE_MESSAGES)
                await load
                return idle, loaded, outcomes, time.monotonic() - begin
            finally:
                for client in clients:
                    await client.close()

        idle, loaded, outcomes, elapsed = asyncio.run(run())
    assert sum(outcomes.values()) == SOAK_SESSIONS
    assert outcomes["OK"] == SOAK_SESSIONS, outcomes  # within capacity: nothing is shed
    assert elapsed < SOAK_SECONDS * 2
    idle_median, loaded_median = statistics.median(idle), statistics.median(loaded)
    print(
        f"soak: {outcomes}, {elapsed:.1f} s; probe median idle {idle_median * 1000:.2f} ms, loaded "
        f"{loaded_median * 1000:.2f} ms"
    )
    assert loaded_median < idle_median * PROBE_RATIO + PROBE_FLOOR, (idle_median, loaded_median)


def _overload_message_seconds() -> float:
    """One overload message's reply time on an idle server (the fastest of a few)."""
    with ProcessServer("--preload", "qwen3", "--max-loop-lag-ms", "0") as server:
        server.wait_for_log("models loaded", timeout=120)

        async def run() -> float:
            async with AsyncClient(server.target, timeout=120, resume=False) as client:
                stream = await client.open("qwen3")
                replies = stream.__aiter__()
                times = []
                for _ in range(5):
                    started = time.perf_counter()
                    await stream.send([HELLO] * OVERLOAD_IDS)
                    await replies.__anext__()
                    times.append(time.perf_counter() - started)
                await stream.finish("stop")
                async for _ in replies:
                    pass
                return min(times)

        return asyncio.run(run())


def test_overload_refuses_quickly_and_clearly_and_memory_returns():
    # A lag limit below one overload message's parsing: however grpc hands the streams' messages
    # to the loop (all at once or one per iteration, which varies from run to run), every tick
    # during the burst is later than the limit (at 50 ms, a run now and then kept up with all 400).
    low, high = OVERLOAD_LAG_MS
    lag = f"{min(high, max(low, _overload_message_seconds() * 1000 * OVERLOAD_LAG_SHARE)):.2f}"
    with ProcessServer("--preload", "qwen3", "--max-sessions", "4096", "--max-loop-lag-ms", lag) as server:
        server.wait_for_log("models loaded", timeout=120)
        assert server.proc is not None
        pid = server.proc.pid

        async def run():
            clients = [AsyncClient(server.target, timeout=120, resume=False) for _ in range(CHANNELS)]
            try:
                warm: Counter = Counter()
                await asyncio.gather(*(_session(c, 2, 8, warm, []) for c in clients))
                assert warm["OK"] == CHANNELS, warm
                baseline = _rss(pid)
                outcomes: Counter = Counter()
                refusals: list[float] = []
                begin = time.monotonic()

                half = OVERLOAD_SESSIONS // 2

                async def arriving(i: int) -> None:
                    if i >= half:
                        await asyncio.sleep(OVERLOAD_SECOND_WAVE + OVERLOAD_SPREAD * (i - half) / half)
                    await _session(clients[i % CHANNELS], OVERLOAD_MESSAGES, OVERLOAD_IDS, outcomes, refusals)

                await asyncio.gather(*(arriving(i) for i in range(OVERLOAD_SESSIONS)))
                elapsed = time.monotonic() - begin
                after = await _probe_after_backoff(clients[0], 5)  # the server serves normally again
                return baseline, outcomes, refusals, elapsed, after
            finally:
                for client in clients:
                    await client.close()

        baseline, outcomes, refusals, elapsed, probe_refusals = asyncio.run(run())
        time.sleep(1.0)
        settled = _rss(pid)
        ends = [r for r in server.logs if r.get("msg") == "session_end"]
        overloaded = [r for r in server.logs if r.get("msg") == "overloaded: refusing new sessions"]
    print(
        f"overload (lag limit {lag} ms): {dict(outcomes)} in {elapsed:.1f} s; refusal latency max "
        f"{max(refusals, default=0):.3f} s; rss {baseline / 2**20:.0f} -> {settled / 2**20:.0f} MiB"
    )
    assert set(outcomes) <= {"OK", "UNAVAILABLE"}, outcomes  # nothing cut, timed out or INTERNAL
    assert sum(outcomes.values()) == OVERLOAD_SESSIONS
    assert outcomes["UNAVAILABLE"] > 0, "the load never exceeded capacity: nothing to test"
    assert outcomes["OK"] > 0
    assert max(refusals) < REFUSAL_SECONDS
    assert overloaded, "refusals were not logged"
    logged = sum(r["outcome"] == "UNAVAILABLE" for r in ends)
    assert logged == outcomes["UNAVAILABLE"] + probe_refusals
    assert settled < baseline * MEMORY_SLACK, (baseline, settled)
