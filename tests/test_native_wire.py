"""The native wire renderers (``_core.WireRenderer``) against the Python ones (the reference,
``parsetier/engine/wire/``): every streamed dialect the core renders, fed a native session's output
over the native session's corpora (every family's round-trip messages with random splits, cut,
stopped or aborted; the hostile outputs; fuzzed model outputs over every preset; logprob steps,
returned token ids, stop strings), must give the same bytes, step by step and at the finish.

Each step's deltas reach the native renderer either as the very list the core's step built (the
per-token path: rendered from the core's own output) or as a copy (read from the Python values,
as annotated steps are), chosen at random, so both paths are compared.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given

import hostile_outputs
import test_roundtrip as rt
from native_diff import Step, native_session, random_groups
from parsetier.engine.session import SessionError
from parsetier.engine.wire import NATIVE_DIALECTS, WireRequest, native_renderer, python_renderer, renderer
from parsetier.messages import SessionOptions, StepLogprobs
from parsetier.models import Model
from property_settings import property_settings
from test_fuzz import hostile_output
from test_native_session import SEED, _family_outputs, family_options

EXAMPLES = int(os.environ.get("PARSETIER_NATIVE_EXAMPLES", "40"))


def _request(dialect: str, rng: random.Random) -> WireRequest:
    return WireRequest(
        dialect,  # type: ignore[arg-type]
        response_id=rng.choice(["resp_1", 'chatcmpl-\u6771\u4eac"\\', "msg_x"]),
        model=rng.choice(["served-model", "m\u2028\U0001f600"]),
        created=rng.choice([0, 1764633600]),
        stream=True,
        include_usage=rng.random() < 0.5,
        prompt_tokens=rng.randrange(100),
        choice_index=rng.choice([0, 0, 1, 3]),
    )


def wire_compare(
    model: Model,
    options: SessionOptions,
    steps: Sequence[Step],
    reason: str,
    rng: random.Random,
    matched_stop: int | str | None = None,
) -> None:
    """One native session per dialect; its outputs rendered by both renderers, compared."""
    if not options.request_id and not options.prompt_token_ids:
        options = dataclasses.replace(options, request_id="native-wire")
    for dialect in NATIVE_DIALECTS:
        try:
            session = native_session(model, options)
        except SessionError:
            return
        if session is None:
            return
        request = _request(dialect, rng)
        nat, ref = native_renderer(request, session.wire_core()), python_renderer(request)
        for i, step in enumerate(steps):
            try:
                if isinstance(step, tuple) and isinstance(step[0], str):
                    out = session.feed_text(step[0], step[1])  # type: ignore[arg-type]
                elif isinstance(step, tuple):
                    out = session.feed(step[0], step[1])  # type: ignore[arg-type]
                else:
                    out = session.feed(step)
            except SessionError:
                continue
            if not out.deltas:
                continue
            deltas = out.deltas if rng.random() < 0.8 else list(out.deltas)
            got, want = nat.step(deltas), ref.step(out.deltas)
            assert got == want, f"{model.name} {dialect}: step {i} ({step!r})"
        stop = matched_stop if isinstance(matched_stop, str) else None
        last = session.finish(reason, matched_stop)
        assert last.final is not None
        got_finish = nat.finish(last.deltas, last.final, stop)
        want_finish = ref.finish(last.deltas, last.final, stop)
        assert got_finish == want_finish, f"{model.name} {dialect}: finish {reason}"


@pytest.fixture(scope="module")
def registry():
    import marker_tokenizers

    return marker_tokenizers.registry()


def test_native_renderer_is_chosen_for_streamed_native_sessions(registry) -> None:
    """A streamed dialect on a native session renders natively; a body, the completions dialect
    or a reference session, in Python."""
    model = registry.get("qwen3")
    session = native_session(model, SessionOptions(request_id="r"))
    assert session is not None
    for dialect in NATIVE_DIALECTS:
        assert type(renderer(WireRequest(dialect), session)).__name__ == "WireRenderer"
        assert type(renderer(WireRequest(dialect, stream=False), session)).__module__.startswith(
            "parsetier.engine.wire"
        )
        assert type(renderer(WireRequest(dialect))).__module__.startswith("parsetier.engine.wire")
    completions = renderer(WireRequest("openai_completions"), session)
    assert type(completions).__module__ == "parsetier.engine.wire.completions"


@pytest.mark.parametrize("family", rt.FAMILIES, ids=lambda f: f.label)
def test_family_roundtrips(family: rt.Family, registry) -> None:
    model = registry.get(family.preset)
    rng = random.Random(f"{SEED}:{family.label}:wire")
    for k, (ids, prompt_ids, thinking) in enumerate(_family_outputs(family, model, 4)):
        options = family_options(k, prompt_ids, thinking)
        wire_compare(model, options, random_groups(rng, ids), "stop", rng)
        cut = rng.randrange(len(ids) + 1)
        wire_compare(model, options, random_groups(rng, ids[:cut]), "length", rng)
        wire_compare(model, options, [[i] for i in ids[:cut]], rng.choice(["stop", "abort"]), rng, "END")


@pytest.mark.parametrize("preset", sorted(hostile_outputs.samples()))
def test_hostile_outputs(preset: str) -> None:
    sample = hostile_outputs.samples()[preset]
    rng = random.Random(f"{SEED}:{preset}:hostile-wire")
    for ids in hostile_outputs.hostile_ids(sample):
        options = dataclasses.replace(sample.options, complete_tool_calls=rng.random() < 0.5)
        wire_compare(sample.model, options, random_groups(rng, ids), rng.choice(["stop", "length"]), rng)


@property_settings(EXAMPLES)
@given(case=hostile_output())
def test_fuzzed_model_outputs(case) -> None:
    sample, ids, seed, reason, complete = case
    options = dataclasses.replace(sample.options, complete_tool_calls=complete)
    rng = random.Random(seed)
    wire_compare(sample.model, options, random_groups(rng, ids), reason, rng)


@pytest.mark.parametrize("preset", ["qwen3", "gpt-oss", "mistral-7b-v0.3", "deepseek-v3.1", "glm-4.5"])
def test_logprobs_token_ids_and_stops(preset: str) -> None:
    """Annotated steps (logprobs, with reasoning shown and hidden; token ids returned), text
    steps and stop strings: the deltas the native renderer reads from Python values."""
    sample = hostile_outputs.samples()[preset]
    model = sample.model
    ids = hostile_outputs.ids(sample, '"x \u2028 \u6771\u4eac"')
    rng = random.Random(f"{SEED}:{preset}:wire-features")
    for hidden in (False, True):
        options = dataclasses.replace(sample.options, include_reasoning=not hidden, return_token_ids=hidden)
        steps: list[Any] = []
        for group in random_groups(rng, ids):
            k = rng.choice([0, 1, 2])
            logprobs = StepLogprobs(
                [rng.choice([-0.5, float("-inf"), -1e-05, -123.25])] * len(group),
                [rng.randrange(model.vocab_size) for _ in range(k * len(group))] if k else (),
                [-1.5] * (k * len(group)),
            )
            steps.append((group, logprobs) if rng.random() < 0.7 else group)
        for reason in ("stop", "length", "abort"):
            wire_compare(model, options, steps, reason, rng, "</stop>")
