"""The native session (``parsetier.native.NativeSession``) against the reference ``Session`` at
the ids level, over every corpus: every format family's round-trip messages (random splits, both
delivery modes, finished, cut or aborted), the canitoolcall fixtures in both delivery modes, the
hostile outputs, fuzzed model outputs over every preset (test_fuzz's strategy), text steps,
logprob steps and stop texts. Deltas, events and finals must be byte-identical, step by step
(tests/native_diff.py). ``PARSETIER_NATIVE_EXAMPLES`` sets the fuzz count (``make fuzz``: 100,000).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import weakref
from collections.abc import Iterator

import pytest
from hypothesis import given

import canitoolcall_support as cs
import hostile_outputs
import test_roundtrip as rt
from native_diff import compare, random_groups
from parsetier import native
from parsetier.engine.session import Session, StepOutput
from parsetier.messages import Message, SessionOptions, StepLogprobs
from parsetier.models import Model
from property_settings import property_settings
from test_fuzz import hostile_output

SEED = 20261202
EXAMPLES = int(os.environ.get("PARSETIER_NATIVE_EXAMPLES", "60"))
ROUNDTRIPS = int(os.environ.get("PARSETIER_NATIVE_ROUNDTRIPS", "12"))


@pytest.fixture(scope="module")
def registry():
    import marker_tokenizers

    return marker_tokenizers.registry()


def test_engine_selection(registry):
    """Every preset opens a session on the selected engine: natively, or on the reference engine
    with the reason recorded (and logged once) when the core cannot serve its grammar; with
    ``--engine reference`` always the reference engine."""
    before = native.engine()
    native.set_engine("native")
    natives = 0
    for name in registry.names():
        model = registry.get(name)
        session = native.open_session(model, SessionOptions())
        if isinstance(session, native.NativeSession):
            natives += 1
        else:
            assert type(session) is Session and native.fallback_reason(name), name
    assert natives > len(registry.names()) // 2
    native.set_engine("reference")
    try:
        assert type(native.open_session(registry.get("qwen3"), SessionOptions())) is Session
    finally:
        native.set_engine(before)
    with pytest.raises(ValueError):
        native.set_engine("fast")


def _family_outputs(family: rt.Family, model: Model, n: int):
    tok = model.tokenizer
    rng = random.Random(f"{SEED}:{family.label}")
    for _ in range(n):
        msg, thinking = rt.message(rng, family)
        ids, prompt_ids = family.render_ids(tok, msg, thinking)
        yield ids, prompt_ids, thinking if family.thinking_switch else None


def family_options(k: int, prompt_ids: list[int], thinking: bool | None) -> SessionOptions:
    """The k-th family output's options: the round-trip tools and prompt, and call delivery,
    reasoning and request id varied from one output to the next."""
    return SessionOptions(
        tools=rt.SESSION_TOOLS,
        prompt_token_ids=tuple(prompt_ids),
        thinking=thinking,
        complete_tool_calls=k % 2 == 1,
        include_reasoning=k % 3 != 2,
        request_id=f"req-{k}",
    )


@pytest.mark.parametrize("family", rt.FAMILIES, ids=lambda f: f.label)
def test_family_roundtrips(family: rt.Family, registry) -> None:
    model = registry.get(family.preset)
    rng = random.Random(f"{SEED}:{family.label}:splits")
    for k, (ids, prompt_ids, thinking) in enumerate(_family_outputs(family, model, ROUNDTRIPS)):
        options = family_options(k, prompt_ids, thinking)
        compare(model, options, random_groups(rng, ids))
        compare(model, options, [ids])
        cut = rng.randrange(len(ids) + 1)
        compare(model, options, random_groups(rng, ids[:cut]), reason="length")
        compare(model, options, [[i] for i in ids[:cut]], reason=rng.choice(["stop", "abort"]))


@pytest.mark.parametrize("complete", [False, True], ids=["deltas", "complete_calls"])
def test_canitoolcall_fixtures(complete: bool) -> None:
    rng = random.Random(f"{SEED}:canitoolcall:{complete}")
    cases = [c for f in cs.fixtures() if (c := cs.case_for(f, complete)) is not None]
    assert cases
    for case in cases:
        model = cs.registry().get(case.preset)
        ids = list(case.units)
        compare(model, case.options, random_groups(rng, ids), case.finish_reason)
        compare(model, case.options, [[i] for i in ids], case.finish_reason)


@pytest.mark.parametrize("preset", sorted(hostile_outputs.samples()))
def test_hostile_outputs(preset: str) -> None:
    sample = hostile_outputs.samples()[preset]
    rng = random.Random(f"{SEED}:{preset}:hostile")
    for ids in hostile_outputs.hostile_ids(sample):
        for complete in (False, True):
            options = dataclasses.replace(sample.options, complete_tool_calls=complete)
            compare(sample.model, options, random_groups(rng, ids), rng.choice(["stop", "length"]))


@property_settings(EXAMPLES)
@given(case=hostile_output())
def test_fuzzed_model_outputs(case) -> None:
    sample, ids, seed, reason, complete = case
    options = dataclasses.replace(sample.options, complete_tool_calls=complete)
    compare(sample.model, options, random_groups(random.Random(seed), ids), reason)


@pytest.mark.parametrize("preset", ["qwen3", "gpt-oss", "mistral-7b-v0.3", "deepseek-v3.1", "glm-4.5"])
def test_text_steps_logprobs_and_stop_text(preset: str) -> None:
    """The session features around the parse: text steps (literal markers before any id), logprob
    steps with reasoning shown and hidden, token ids returned, stop texts, bad ids refused."""
    sample = hostile_outputs.samples()[preset]
    model = sample.model
    ids = hostile_outputs.ids(sample, '"x"')
    text = model.tokenizer.decode(ids, skip_special_tokens=False)
    rng = random.Random(f"{SEED}:{preset}:features")
    for hidden in (False, True):
        options = dataclasses.replace(
            sample.options, include_reasoning=not hidden, return_token_ids=hidden, include_stop_text=True
        )
        steps: list = []
        for group in random_groups(rng, ids):
            k = rng.choice([0, 1, 2])
            logprobs = StepLogprobs(
                [-0.5] * len(group),
                [rng.randrange(model.vocab_size) for _ in range(k * len(group))] if k else (),
                [-1.5] * (k * len(group)),
            )
            steps.append((group, logprobs) if rng.random() < 0.7 else group)
        eos = sorted(model.eos_token_ids)[:1] or [None]
        compare(model, options, steps, "stop", matched_stop=eos[0])
        compare(model, options, steps, "stop", matched_stop="</stop>")
        cuts = sorted(rng.sample(range(len(text) + 1), 3))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        compare(model, options, [(p, 1) for p in pieces])
    compare(model, SessionOptions(), [[0], [model.vocab_size], [-1, 5]])
    compare(model, SessionOptions(tools=sample.options.tools, tool_choice="nope"), [[0]])


def test_feed_is_one_core_call_and_events_are_optional() -> None:
    """A session that returns no token ids has the core's ``step`` as its ``feed``: whatever the
    core does not take (an empty step, a bad id, logprobs, a finished session) reaches the checked
    feed, with the reference's errors. ``SessionOptions.events`` off: the same deltas and final,
    no events."""
    sample = hostile_outputs.samples()["qwen3"]
    model = sample.model
    ids = hostile_outputs.ids(sample, '"x"')
    options = dataclasses.replace(sample.options, request_id="events")
    steps = [ids[i : i + 3] for i in range(0, len(ids), 3)]
    compare(model, options, [[], *[tuple(s) for s in steps], [model.vocab_size]])
    ref = Session(model, options)
    quiet_options = dataclasses.replace(options, events=False)
    quiet = native.NativeSession(model, quiet_options, native.native_parts(model))
    assert quiet.feed == quiet._core.step
    for step in steps:
        want, got = ref.feed(step), quiet.feed(step)
        assert got.deltas == want.deltas and got.events == []
    assert quiet.finish("stop").final == ref.finish("stop").final
    for session in (ref, quiet):
        with pytest.raises(native.WrongState):
            session.feed(ids[:1])


@pytest.mark.parametrize("events", [True, False], ids=["events", "no_events"])
def test_recycled_values_are_never_seen_changing(events: bool) -> None:
    """A caller that drops each step's output once it has read it (the service, peer-bench) is
    handed values the core recycles (``values.rs``): every step still equals the reference's;
    whatever a caller keeps (an output, its list, one delta, one call, one event) never changes; an
    output a caller changed and dropped (a list appended to, ``final`` set) is not handed out
    with those changes; nothing a dropped output held is kept for long."""
    sample = hostile_outputs.samples()["qwen3"]
    model = sample.model
    ids = hostile_outputs.ids(sample, '"x"')
    options = dataclasses.replace(sample.options, request_id="recycle", events=events)
    ref = Session(model, options)
    nat = native.NativeSession(model, options, native.native_parts(model))
    kept: list[tuple[object, str]] = []
    calls = 0

    def seen(out: StepOutput) -> str:  # the reference's events, when the native session makes them
        return repr((out.deltas, out.events if events else [], out.final))

    for i, tid in enumerate(ids):
        want = seen(ref.feed([tid]))
        got = nat.feed([tid])
        assert repr((got.deltas, got.events, got.final)) == want, f"step {i}"
        calls += sum(len(d.tool_calls) for d in got.deltas)
        if i % 7 == 0:
            kept.append((got, repr(got)))
        elif i % 11 == 0:
            kept.append((got.deltas, repr(got.deltas)))
        elif i % 5 == 0 and got.deltas:
            delta = got.deltas[-1]
            kept.append((delta, repr(delta)))
            if delta.tool_calls:
                kept.append((delta.tool_calls[0], repr(delta.tool_calls[0])))
        elif i % 3 == 0 and got.events:
            kept.append((got.events[-1], repr(got.events[-1])))
        elif i % 13 == 0:
            got.deltas.append(got.deltas[0] if got.deltas else None)  # type: ignore[arg-type]
            got.events.append("not an event")  # type: ignore[arg-type]
            got.final = "not a final"  # type: ignore[assignment]
        del got
    assert calls > 10
    assert all(repr(value) == seen for value, seen in kept)
    assert seen(nat.finish("stop")) == seen(ref.finish("stop"))
    # An output handed out and dropped holding the session itself (in a list, as its final): the
    # core's pools let go of it within a few steps of any session.
    for hold in ("list", "final"):
        nat = native.NativeSession(model, options, native.native_parts(model))
        out = nat.feed(ids[:1])
        if hold == "list":
            out.events.append(nat)  # type: ignore[arg-type]
        else:
            out.final = nat  # type: ignore[assignment]
        gone = weakref.ref(nat)
        del out, nat
        other = native.NativeSession(model, options, native.native_parts(model))
        for tid in ids[1:5]:
            other.feed([tid])
        gc.collect()
        assert gone() is None, hold


def _surrogate_name(sample_text: str) -> str:
    return sample_text.replace('"get_current_weather"', '"a\\ud800\\ud83d\\ude00\\udc00"').replace(
        hostile_outputs.VALUE, "1"
    )


def _double_encoded(sample_text: str) -> str:
    call = '{"city": ' + hostile_outputs.VALUE + ', "unit": "c"}'
    return sample_text.replace(call, '"{\\"city\\": \\"\\ud800\\"}"')


_FOUND_BY_THE_LONG_RUN = [
    # A JSON escape of a lone surrogate (no protobuf string can carry one) is U+FFFD in a name, in
    # a typed value and in a double-encoded argument string; an escaped pair stays one character.
    (
        "mistral-7b-v0.3",
        _surrogate_name,
        "tool_calls",
        ("a\ufffd\U0001f600\ufffd", '{"city": 1, "state": "CA", "unit": "celsius"}'),
    ),
    ("muse-glimmer", '"\\ud800"', "tool_calls", ("f", '{"a": "\ufffd"}')),
    ("qwen3", _double_encoded, "tool_calls", ("get_weather", '{"city": "\ufffd"}')),
    # A Python literal with a lone surrogate escape is not read: the value stays its text.
    ("seed-oss", "['\\ud800']", "tool_calls", ("f", '{"a": "[\'\\\\ud800\']"}')),
    # Python's word characters (``re``'s \\b in the header rules): a combining mark is none, so
    # "to=self" after one is still the recipient; "²" is one, so "²to=self" names no recipient.
    ("muse-glimmer", lambda t: "\u0301" + t.replace(hostile_outputs.VALUE, "[1]"), "reasoning", "r"),
    ("muse-glimmer", lambda t: "\u00b2" + t.replace(hostile_outputs.VALUE, "[1]").lstrip(), "reasoning", ""),
]


@pytest.mark.parametrize(("preset", "payload", "field", "expected"), _FOUND_BY_THE_LONG_RUN)
def test_differences_found_by_the_long_run(preset: str, payload, field: str, expected) -> None:
    """The outputs on which the long differential run once found the engines apart: both engines
    equal under any split, and the output the policy (docs/engine.md) says."""
    _same_in_both_and_as_the_policy_says(preset, payload, field, expected)


_ODD_TEXT = [
    # Pythonic numbers are ASCII digits (Python's literal syntax; int() also reads "٣"): the call
    # is broken, its text content.
    ("llama4", "\u0663", "content", "[f(a=\u0663)]"),
    ("llama4", "1_\uff13", "content", "[f(a=1_\uff13)]"),
    ("lfm2", "[\u0663]", "content", "<|tool_call_start|>[f(a=[\u0663])]"),
    # A Python literal naming a character (\\N{…}) stays its text; a raw string's \\N is text.
    ("seed-oss", "['\\N{BULLET}']", "tool_calls", ("f", '{"a": "[\'\\\\N{BULLET}\']"}')),
    ("seed-oss", "[r'\\N{BULLET}']", "tool_calls", ("f", '{"a": ["\\\\N{BULLET}"]}')),
    # A Python literal whose number overflows to infinity stays its text: JSON has no Infinity.
    ("seed-oss", "[1e999]", "tool_calls", ("f", '{"a": "[1e999]"}')),
    ("seed-oss", "{'b': -1e999}", "tool_calls", ("f", '{"a": "{\'b\': -1e999}"}')),
    ("minimax-m3", "[1e999]", "tool_calls", ("f", '{"a": "[1e999]"}')),
]


@pytest.mark.parametrize(("preset", "payload", "field", "expected"), _ODD_TEXT)
def test_odd_text_reads_the_same_in_both_engines(preset: str, payload, field: str, expected) -> None:
    """What Python's own functions do with odd text (``int()``, ``\\N{…}``,
    ``Infinity``), where the engines once differed: both equal under any split, and the output
    the policy (docs/engine.md, "Odd text") says, with ``complete_tool_calls`` (a broken call is
    its text)."""
    _same_in_both_and_as_the_policy_says(preset, payload, field, expected, complete=True)


def _same_in_both_and_as_the_policy_says(
    preset: str, payload, field: str, expected, complete: bool = False
) -> None:
    sample = hostile_outputs.samples()[preset]
    model = sample.model
    text = payload(sample.text) if callable(payload) else sample.text.replace(hostile_outputs.VALUE, payload)
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    rng = random.Random(f"{SEED}:{preset}:{text}")
    for complete in (False, True):
        options = dataclasses.replace(sample.options, complete_tool_calls=complete)
        compare(model, options, [[i] for i in ids])
        compare(model, options, random_groups(rng, ids))
    session = Session(
        model, dataclasses.replace(sample.options, request_id="found", complete_tool_calls=complete)
    )
    session.feed(ids)
    message = session.finish("stop").final.message
    got = getattr(message, field)
    if field == "tool_calls":
        got = [(c.name, c.arguments) for c in got]
        assert got == [expected]
    else:
        assert got == expected


def _compared_message(model: Model, options: SessionOptions, ids: list[int], rng: random.Random):
    """``ids`` on both engines (one id per step, then in random groups: ``compare``), and the
    final message the reference session gives them."""
    compare(model, options, [[i] for i in ids])
    compare(model, options, random_groups(rng, ids))
    session = Session(model, options)
    session.feed(ids)
    return session.finish("stop").final.message


def _both_modes(
    sample, value: str, rng: random.Random, request_id: str
) -> Iterator[tuple[SessionOptions, list[int], Message]]:
    """``value`` written into the sample's call and compared on both engines (``_compared_message``)
    with streamed, then with complete tool calls: each mode's options, the ids and the message."""
    ids = hostile_outputs.ids(sample, value)
    for complete in (False, True):
        options = dataclasses.replace(sample.options, complete_tool_calls=complete, request_id=request_id)
        yield options, ids, _compared_message(sample.model, options, ids, rng)


def _in_order(shown: str, text: str) -> bool:
    """Whether ``shown`` is ``text`` with characters left out (markup), none moved."""
    rest = iter(text)
    return all(c in rest for c in shown)


@pytest.mark.parametrize(
    "value", ["xyz{b:1}", "xyz{b:1", "1,xyz<tool_call|>", "xyz [1", 'xyz{b:<|"|>x<|"|>} q', "1,xyz"]
)
def test_gemma_held_text_is_shown_once_in_order(value: str) -> None:
    """Gemma 4's reader shows a bare word (``{a:xyz{…``: the notation has no place for it) as
    content, in both engines: at once with streamed calls; with ``complete_tool_calls`` the call's
    text holds it in place, so an invalid call's text shows it once, where the model wrote it,
    and a delivered call shows it with the call."""
    sample = hostile_outputs.samples()["gemma-4"]
    rng = random.Random(f"{SEED}:gemma:{value}")
    for options, ids, message in _both_modes(sample, value, rng, "gemma"):
        compare(sample.model, options, random_groups(rng, ids[:-1]), reason="length")  # the call cut off
        assert message.content.count("xyz") + sum(c.arguments.count("xyz") for c in message.tool_calls) == 1
        written = sample.text.replace(hostile_outputs.VALUE, value)
        assert _in_order(message.content, written), (options.complete_tool_calls, message.content)


@pytest.mark.parametrize("preset", ["llama4", "lfm2"])
@pytest.mark.parametrize(
    "value", ["xyz", "[1, xyz]", "{xyz: 1}", "1, xyz!", "1), xyz!", "1), xyz(b!", "\u0663xyz"]
)
def test_a_broken_pythonic_call_shows_what_no_argument_holds(preset: str, value: str) -> None:
    """A pythonic list that breaks after its first call began (a bare name as a value, a keyword
    or the next call's name cut off by what cannot follow it): what the reader read since it last
    wrote is content, in both engines and both delivery modes; nothing the model wrote is lost."""
    sample = hostile_outputs.samples()[preset]
    rng = random.Random(f"{SEED}:pythonic:{preset}:{value}")
    for options, _ids, message in _both_modes(sample, value, rng, "py"):
        shown = message.content + "".join(c.arguments for c in message.tool_calls)
        assert shown.count("xyz") == 1, (options.complete_tool_calls, message)
        assert _in_order(message.content, sample.text.replace(hostile_outputs.VALUE, value))
