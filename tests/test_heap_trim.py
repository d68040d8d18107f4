"""The heap trimmer (service/heap.py) on a real session gate and the real C library: it trims once
a burst of sessions is over, and leaves a server alone while its sessions stay open."""

from __future__ import annotations

import asyncio

from parsetier.service.heap import HeapTrimmer
from parsetier.service.limits import SessionGate

PERIOD = 0.02


async def _looks(count: int) -> None:
    await asyncio.sleep(PERIOD * (count + 0.5))


async def _opened(gate: SessionGate, sessions: int) -> None:
    """A burst: ``sessions`` open at once, seen by the trimmer twice."""
    for _ in range(sessions):
        gate.enter()
    await _looks(2)


def _run(scenario) -> int:
    async def main() -> int:
        gate = SessionGate(max_sessions=1000)
        trimmer = HeapTrimmer(gate, period=PERIOD, min_ended=64)
        trimmer.start()
        try:
            await scenario(gate, trimmer)
        finally:
            await trimmer.stop()
        return trimmer.trims

    return asyncio.run(main())


def test_a_burst_that_ends_is_trimmed_once():
    async def burst(gate: SessionGate, trimmer: HeapTrimmer) -> None:
        await _opened(gate, 100)
        for _ in range(100):
            gate.leave()
        await _looks(5)

    assert _run(burst) == 1


def test_open_sessions_and_a_steady_trickle_are_left_alone():
    async def steady(gate: SessionGate, trimmer: HeapTrimmer) -> None:
        await _opened(gate, 100)
        for _ in range(40):  # fewer than min_ended end, and most stay open
            gate.leave()
            gate.enter()
        await _looks(5)

    assert _run(steady) == 0


def test_a_shrinking_burst_is_trimmed_before_it_is_over():
    async def shrinking(gate: SessionGate, trimmer: HeapTrimmer) -> None:
        await _opened(gate, 200)
        for _ in range(120):  # 120 ended, 80 of a peak of 200 still open
            gate.leave()
        await _looks(5)

    assert _run(shrinking) == 1
