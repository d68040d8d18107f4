"""The native parser (``parsetier._core.Parser``) against the reference engine, at the piece level.

A reference ``Session`` runs on a real tokenizer and a real corpus; every piece its ``Machine`` is
fed (text in sentinel form, token count) and every ``Assembler.add`` (one per session step) is
recorded. The same pieces go to the native parser, built from the same bound grammar
(``engine/describe.py``), and its events, deltas and final must be byte-identical: per piece,
per step, at the end. Corpora: every format family's round-trip messages (its own template or
renderer, random splits, both delivery modes, finished by ``stop`` or cut by ``length``), the
canitoolcall fixtures, and the hostile outputs.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, seed
from hypothesis import strategies as st

import hostile_outputs
import marker_tokenizers
import test_conservation as tc
import test_roundtrip as rt
from parsetier import _core
from parsetier.engine.describe import describe_config, describe_grammar
from parsetier.engine.session import Session, _tool_schemas
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model
from property_settings import property_settings

EXAMPLES = 24
SEED = 20261202


_GRAMMARS: dict[int, Any] = {}


def _grammar(model: Model) -> Any:
    key = id(model.grammar)
    if key not in _GRAMMARS:
        _GRAMMARS[key] = (model.grammar, _core.Grammar(describe_grammar(model.grammar)))
    return _GRAMMARS[key][1]


def _event(ev: Any) -> tuple:
    return (ev.kind.value, ev.text, ev.tool_index, ev.tokens, ev.call_id)


def _delta(d: Any) -> tuple:
    return (d.reasoning, d.content, [(c.index, c.arguments, c.id, c.name) for c in d.tool_calls])


class Recorder:
    """Wraps one reference session's machine and assembler: what they are fed, what they say."""

    def __init__(self, session: Session) -> None:
        self.ops: list[tuple] = []
        machine, assembler = session._machine, session._assembler
        feed, finish, add = machine.feed_piece, machine.finish, assembler.add

        def rec_feed(text: str, tokens: int = 0) -> list:
            events = feed(text, tokens)
            self.ops.append(("feed", text, tokens, [_event(e) for e in events]))
            return events

        def rec_finish(cut: bool = False) -> list:
            events = finish(cut)
            self.ops.append(("finish", cut, [_event(e) for e in events]))
            return events

        def rec_add(events: Sequence) -> list:
            deltas = add(events)
            self.ops.append(("add", [_delta(d) for d in deltas]))
            return deltas

        machine.feed_piece, machine.finish, assembler.add = rec_feed, rec_finish, rec_add


def run_both(
    model: Model, options: SessionOptions, groups: Sequence[Sequence[int]], reason: str = "stop"
) -> None:
    """Run the reference session over ``groups``, replay its pieces natively, compare all."""
    session = Session(model, options)
    start, echo = session._machine._state.name, session._machine._echo
    recorder = Recorder(session)
    for group in groups:
        session.feed(list(group))
    final = session.finish(reason).final
    config = describe_config(
        start,
        _tool_schemas(options),
        include_reasoning=options.include_reasoning,
        tool_choice=options.tool_choice,
        parallel_tool_calls=options.parallel_tool_calls,
        complete_tool_calls=options.complete_tool_calls,
        call_id_seed=session.call_id_seed,
        echo=echo,
    )
    native = _core.Parser(_grammar(model), config)
    pending_events: list = []
    for i, op in enumerate(recorder.ops):
        where = f"op {i} of {len(recorder.ops)}: {op[:3]!r}"
        if op[0] == "feed":
            got = native.feed(op[1], op[2])
            assert [tuple(e) for e in got] == op[3], where
            pending_events += got
        elif op[0] == "add":
            assert [_norm(d) for d in native.deliver()] == op[1], where
        else:
            events, deltas, last = native.finish(reason)
            assert [tuple(e) for e in events] == op[2], where
            add = recorder.ops[i + 1]
            assert add[0] == "add"
            assert [_norm(d) for d in deltas] == add[1], where
            assert final is not None
            message = final.message
            calls = [(c.id, c.name, c.arguments) for c in message.tool_calls]
            assert last[0] == final.finish_reason
            assert last[2] == final.usage.reasoning_tokens
            assert (last[3], last[4], [tuple(c) for c in last[5]]) == (
                message.content,
                message.reasoning,
                calls,
            )
            assert last[1] == final.usage.completion_tokens
            return
    raise AssertionError("the reference session never finished its machine")


def _norm(d: tuple) -> tuple:
    return (d[0], d[1], [tuple(c) for c in d[2]])


def random_groups(rng: random.Random, ids: list[int]) -> list[list[int]]:
    groups, pos = [], 0
    while pos < len(ids):
        n = rng.choice([1, 1, 1, 2, 3, 5, 8, 40])
        groups.append(ids[pos : pos + n])
        pos += n
    return groups


@pytest.fixture(scope="module")
def registry():
    return marker_tokenizers.registry()


def _family_outputs(
    family: rt.Family, model: Model, n: int
) -> list[tuple[list[int], list[int], bool | None]]:
    tok = model.tokenizer
    rng = random.Random(f"{SEED}:{family.label}")
    out = []
    for _ in range(n):
        msg, thinking = rt.message(rng, family)
        ids, prompt_ids = family.render_ids(tok, msg, thinking)
        out.append((ids, prompt_ids, thinking if family.thinking_switch else None))
    return out


@pytest.mark.parametrize("family", rt.FAMILIES, ids=lambda f: f.label)
def test_family_outputs_parse_identically(family: rt.Family, registry) -> None:
    model = registry.get(family.preset)
    rng = random.Random(f"{SEED}:{family.label}:splits")
    for k, (ids, prompt_ids, thinking) in enumerate(_family_outputs(family, model, EXAMPLES)):
        complete = k % 2 == 1
        options = SessionOptions(
            tools=rt.SESSION_TOOLS,
            prompt_token_ids=tuple(prompt_ids),
            thinking=thinking,
            complete_tool_calls=complete,
            request_id=f"req-{k}",
        )
        run_both(model, options, random_groups(rng, ids))
        cut = rng.randrange(len(ids) + 1)
        run_both(model, options, random_groups(rng, ids[:cut]), reason="length")
        run_both(model, options, [[i] for i in ids[:cut]], reason=rng.choice(["stop", "abort"]))


@pytest.mark.parametrize(
    ("preset", "text"),
    [
        ("seed-oss", "<seed:tool_call>\n<function=f>\n<parameter=q>\nsunny П"),
        ("gigachat-3.5", '<｜GCML｜tool_calls><｜GCML｜invoke name="f"><｜GCML｜parameter name="q">sunny П'),
        ("kimi-vl-thinking", "◁think▷sunny П"),
    ],
)
def test_a_cut_inside_a_character_finishes_in_one_delivery(preset: str, text: str, registry) -> None:
    """Output cut one byte into a character (byte-level vocabularies): the session's finish feeds
    the held byte's replacement character and ends the machine, and both reach the client in one
    delivery; the native parser's finish delivers them together too (one merged delta per call)."""
    model = registry.get(preset)
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids[:-1]
    tools = (Tool("f", {"type": "object", "properties": {"q": {"type": "string"}}}),)
    for groups in ([ids], [[i] for i in ids]):
        run_both(model, SessionOptions(tools=tools), groups, reason="length")


@pytest.mark.slow  # every preset x payload; the quick lane has test_native_session's hostile outputs
@pytest.mark.parametrize("preset", sorted(hostile_outputs.samples()))
@pytest.mark.parametrize("payload", sorted(hostile_outputs.PAYLOADS))
def test_hostile_outputs_parse_identically(preset: str, payload: str) -> None:
    sample = hostile_outputs.samples()[preset]
    ids = hostile_outputs.ids(sample, hostile_outputs.PAYLOADS[payload])
    rng = random.Random(f"{SEED}:{preset}:{payload}")
    for complete in (False, True):
        options = _with(sample.options, complete_tool_calls=complete)
        run_both(sample.model, options, random_groups(rng, ids))


def _with(options: SessionOptions, **changes: Any) -> SessionOptions:
    import dataclasses

    return dataclasses.replace(options, **changes)


def test_every_format_file_loads_natively(registry) -> None:
    """Every preset's bound grammar (so every format file) is interpreted by the native parser:
    no capture rule needs the reference engine."""
    formats = set()
    for spec in registry.specs():
        model = registry.get(spec.name)
        data = json.loads(describe_grammar(model.grammar))
        assert _core.Grammar(describe_grammar(model.grammar)).name == data["name"]
        formats.add(data["name"])
    assert len(formats) >= 29


def test_canitoolcall_fixtures_parse_identically() -> None:
    """Every canitoolcall fixture a preset serves, in both delivery modes, at random splits."""
    import canitoolcall_support as support

    rng = random.Random(f"{SEED}:fixtures")
    count = 0
    for fixture in support.fixtures():
        for complete in (False, True):
            case = support.case_for(fixture, complete_tool_calls=complete)
            if case is None:
                continue
            model = support.registry().get(case.preset)
            ids = list(case.units)
            run_both(model, case.options, random_groups(rng, ids), reason=case.finish_reason)
            count += 1
    assert count > 100


FUZZ_TEXT = "ab {}[]\"':,=()<>/\\\n\t 1.5 -2 true None é😀"


def _fuzz_output(rng: random.Random, model: Model) -> list[int]:
    """Marker soup: the format's own terminal texts (as marker tokens where bound) shuffled with
    JSON/XML/Python punctuation, so every state and reader sees odd input."""
    grammar = model.grammar.grammar
    terminals = list(grammar.terminals.values())
    pieces = []
    for _ in range(rng.randint(1, 40)):
        if rng.random() < 0.35:
            pieces.append(rng.choice(terminals))
        else:
            pieces.append("".join(rng.choice(FUZZ_TEXT) for _ in range(rng.randint(1, 8))))
    return model.tokenizer.encode("".join(pieces), add_special_tokens=False).ids


FUZZ_TOOLS = (
    *rt.SESSION_TOOLS,
    Tool(
        "f",
        {
            "type": "object",
            "properties": {
                "a": {"type": "array"},
                "b": {"type": ["string", "null"]},
                "n": {"type": "integer"},
                "o": {"type": "object"},
            },
        },
    ),
)


@pytest.mark.parametrize("family", rt.FAMILIES, ids=lambda f: f.label)
def test_fuzzed_outputs_parse_identically(family: rt.Family, registry) -> None:
    model = registry.get(family.preset)
    rng = random.Random(f"{SEED}:{family.label}:fuzz")
    for k in range(60):
        ids = _fuzz_output(rng, model)
        options = SessionOptions(
            tools=FUZZ_TOOLS,
            thinking=rng.choice([None, True, False]),
            complete_tool_calls=k % 2 == 1,
            parallel_tool_calls=k % 5 != 0,
            tool_choice=rng.choice(["auto", "auto", "none", "required", "f"]),
            include_reasoning=k % 7 != 0,
            request_id=f"fuzz-{k}",
        )
        run_both(
            model, options, random_groups(rng, ids), reason=rng.choice(["stop", "stop", "length", "abort"])
        )


@pytest.mark.slow  # a property over every format file, like test_conservation itself
@pytest.mark.parametrize("fmt", tc.FORMATS)
@seed(21)
@property_settings(40)
@given(data=st.data())
def test_conservation_outputs_parse_identically(fmt: str, data: st.DataObject) -> None:
    """The conservation property's random outputs of every format file (terminals whole and cut,
    words, JSON and pythonic fragments), as tests/test_conservation.py draws them."""
    model = tc._model(fmt)
    text = data.draw(tc.outputs(model), label="output")
    thinking = data.draw(st.sampled_from([None, True, False]), label="thinking")
    reason = data.draw(st.sampled_from(["stop", "length", "abort"]), label="finish")
    complete = data.draw(st.booleans(), label="complete_tool_calls")
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    options = SessionOptions(
        tools=FUZZ_TOOLS, thinking=thinking, complete_tool_calls=complete, request_id="conservation"
    )
    run_both(model, options, random_groups(random.Random(len(text)), ids), reason=reason)
