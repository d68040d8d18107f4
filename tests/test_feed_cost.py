"""A feed's cost grows with its size, not with its square: one client message must never be able to
freeze the server. Measured as a ratio between two sizes in the same run (no absolute timings)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from engine_helpers import QWEN3
from parsetier.engine.assembler import Assembler
from parsetier.engine.events import Event, EventKind
from parsetier.engine.session import Session
from parsetier.messages import SessionOptions, StepLogprobs

MAX_RATIO = 48
"""For 16x more work: linear cost gives a ratio near 16, quadratic cost near 256."""


def _best(run: Callable[[int], None], n: int, repeats: int = 3) -> float:
    """The best of a few runs, with the cyclic GC off (its full passes grow with the heap)."""
    times = []
    gc.disable()
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            run(n)
            times.append(time.perf_counter() - started)
    finally:
        gc.enable()
    return min(times)


def _ratio(run: Callable[[int], None], small: int, large: int) -> float:
    return _best(run, large, repeats=2) / _best(run, small, repeats=5)


def test_one_large_message_of_ids_costs_linear_time() -> None:
    """The attack from the issue: one message of 256k ids of one ordinary token."""

    def run(n: int) -> None:
        session = Session(QWEN3)
        session.feed([3409] * n)
        session.finish()

    assert _ratio(run, 16_000, 256_000) < MAX_RATIO


def test_logprob_steps_cost_linear_time() -> None:
    """Logprob resolution is O(step): one token per step with 5 alternatives each, through a CJK
    and emoji output (byte pieces carried across steps), costs in proportion to the steps."""
    ids = QWEN3.tokenizer.encode("你好 🎉 world, 東京 👍🏽 ", add_special_tokens=False).ids
    alternatives = (ids[0], ids[1], ids[2], 3409, 151667)

    def run(n: int) -> None:
        session = Session(QWEN3)
        step = StepLogprobs((-0.5,), alternatives, (-1.0, -2.0, -3.0, -4.0, -5.0))
        for i in range(n):
            session.feed([ids[i % len(ids)]], step)
        session.finish()

    assert _ratio(run, 1_000, 16_000) < MAX_RATIO


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
