"""The differential harness of the native engine: the same session run on the reference engine
(``Session``) and on the native one (``NativeSession``), step by step. Every step's deltas and
events, the final, and any refusal (its type and message) must be identical.

Test scaffolding shared by tests/test_native_session.py and the long run of ``make fuzz``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

from parsetier import native
from parsetier.engine.session import Session, SessionError
from parsetier.messages import SessionOptions, StepLogprobs
from parsetier.models import Model

Step = Sequence[int] | tuple[str, int] | tuple[Sequence[int], StepLogprobs]
"""Ids; (text, tokens) for a text step; (ids, logprobs) for a step with logprobs."""


def native_session(model: Model, options: SessionOptions) -> native.NativeSession | None:
    """The native session, or None for a model the core does not serve (its sessions are then
    the reference engine's own: nothing to compare)."""
    parts = native.native_parts(model)
    if parts is None:
        assert native.fallback_reason(model.name), model.name
        return None
    return native.NativeSession(model, options, parts)


def _apply(session: Any, step: Step) -> Any:
    try:
        if isinstance(step, tuple) and len(step) == 2 and isinstance(step[0], str):
            out = session.feed_text(step[0], step[1])
        elif isinstance(step, tuple) and len(step) == 2 and isinstance(step[1], StepLogprobs):
            out = session.feed(step[0], step[1])
        else:
            out = session.feed(step)
    except SessionError as exc:
        return (type(exc).__name__, str(exc))
    return (out.deltas, out.events)


def compare(
    model: Model,
    options: SessionOptions,
    steps: Sequence[Step],
    reason: str = "stop",
    matched_stop: int | str | None = None,
) -> int:
    """Run both engines over ``steps`` then ``finish``; assert every output equal. Returns the
    number of steps compared."""
    if native.native_parts(model) is None:
        return 0
    if not options.request_id and not options.prompt_token_ids:
        # An unseeded session draws random call ids (call_ids.call_id_seed): compared sessions
        # need the same seed, as any cross-engine comparison does.
        options = dataclasses.replace(options, request_id="native-diff")
    try:
        ref: Any = Session(model, options)
    except SessionError as exc:
        try:
            native_session(model, options)
        except SessionError as nexc:
            assert (type(nexc), str(nexc)) == (type(exc), str(exc))
            return 0
        raise AssertionError(f"the native session opened where the reference refused: {exc}") from None
    nat = native_session(model, options)
    assert nat is not None
    return _steps(model, ref, nat, steps, reason, matched_stop)


def _steps(model: Model, ref: Any, nat: Any, steps: Sequence[Step], reason: str, matched_stop) -> int:
    for i, step in enumerate(steps):
        want, got = _apply(ref, step), _apply(nat, step)
        assert got == want, f"{model.name}: step {i} of {len(steps)} ({step!r}): {want!r} != {got!r}"
    try:
        want = ref.finish(reason, matched_stop)
    except SessionError as exc:
        want = (type(exc).__name__, str(exc))
    try:
        got = nat.finish(reason, matched_stop)
    except SessionError as exc:
        got = (type(exc).__name__, str(exc))
    assert got == want, f"{model.name}: finish({reason!r}, {matched_stop!r})"
    return len(steps) + 1


def random_groups(rng: random.Random, ids: Sequence[int]) -> list[list[int]]:
    """A random split: mostly single ids (a decode step), some runs (speculative steps, batches)."""
    groups, pos = [], 0
    while pos < len(ids):
        n = rng.choice([1, 1, 1, 2, 3, 5, 8, 40])
        groups.append(list(ids[pos : pos + n]))
        pos += n
    return groups


def compare_splits(model: Model, options: SessionOptions, ids: Sequence[int], reason: str = "stop") -> None:
    """``compare`` one id per step and in seeded random groups, streamed and with
    ``complete_tool_calls``: what a family test asserts of both engines besides its exact output."""
    rng = random.Random(f"{model.name}:{len(ids)}:{reason}")
    for complete in (False, True):
        opts = dataclasses.replace(options, complete_tool_calls=complete)
        compare(model, opts, [[i] for i in ids], reason)
        compare(model, opts, random_groups(rng, ids), reason)
