"""A feed's cost grows with its size, not with its square: one client message must never be able to
freeze the server. Measured as a ratio between two sizes in the same run (no absolute timings)."""

from __future__ import annotations

import time
from collections.abc import Callable

from engine_helpers import QWEN3
from parsetier.assembler import Assembler
from parsetier.engine.events import Event, EventKind
from parsetier.messages import SessionOptions
from parsetier.session import Session

SMALL, LARGE = 8_000, 128_000
"""16x more work: linear cost gives a ratio near 16, quadratic cost near 256."""
MAX_RATIO = 48


def _best(run: Callable[[int], None], n: int, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run(n)
        times.append(time.perf_counter() - started)
    return min(times)


def _ratio(run: Callable[[int], None], small: int = SMALL, large: int = LARGE) -> float:
    return _best(run, large, repeats=1) / _best(run, small)


def _events(n: int) -> list[Event]:
    """Content, then reasoning, then one call's arguments, each in n/3 small pieces."""
    third = n // 3
    return (
        [Event(EventKind.CONTENT, "ab")] * third
        + [Event(EventKind.REASONING, "cd")] * third
        + [Event(EventKind.TOOL_CALL_START, "f", tool_index=0)]
        + [Event(EventKind.TOOL_ARGUMENTS, '"x"', tool_index=0)] * third
    )


def test_assembling_one_feed_is_linear_in_its_events() -> None:
    def run(n: int) -> None:
        deltas = Assembler(SessionOptions()).add(_events(n))
        assert len(deltas) == 3  # content, reasoning, the call's start with its arguments

    assert _ratio(run) < MAX_RATIO


def test_one_large_message_of_ids_costs_linear_time() -> None:
    """The attack from the issue: one message of 256k ids of one ordinary token."""

    def run(n: int) -> None:
        session = Session(QWEN3)
        session.feed([3409] * n)
        session.finish()

    assert _ratio(run, 16_000, 256_000) < MAX_RATIO


def test_runs_merge_as_before() -> None:
    out = Assembler(SessionOptions()).add(
        [
            Event(EventKind.CONTENT, "a"),
            Event(EventKind.CONTENT, "b"),
            Event(EventKind.REASONING, "r"),
            Event(EventKind.TOOL_CALL_START, "f", tool_index=0),
            Event(EventKind.TOOL_ARGUMENTS, "{", tool_index=0),
            Event(EventKind.TOOL_ARGUMENTS, "}", tool_index=0),
            Event(EventKind.TOOL_CALL_END, tool_index=0),
            Event(EventKind.TOOL_CALL_START, "g", tool_index=1),
            Event(EventKind.TOOL_ARGUMENTS, "{}", tool_index=1),
            Event(EventKind.CONTENT, "c"),
        ]
    )
    shape = [(d.content, d.reasoning, [(t.index, t.name, t.arguments) for t in d.tool_calls]) for d in out]
    assert shape == [
        ("ab", "", []),
        ("", "r", []),
        ("", "", [(0, "f", "{}")]),
        ("", "", [(1, "g", "{}")]),
        ("c", "", []),
    ]
    assert out[2].tool_calls[0].id and out[3].tool_calls[0].id
