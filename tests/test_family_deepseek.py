"""DeepSeek family (V3/R1, V3.1, V3.2/V4/V4.1 DSML), driven with the real DeepSeek vocabularies.

Token ids are built the way the model emits them: ``enc`` turns every added-token text (the
``<｜tool▁…｜>`` markers, ``<think>``, the ``｜DSML｜`` token inside DSML tags) into its id;
``plain`` spells those texts as ordinary tokens (look-alikes that must stay text). Every test
asserts exact outputs; split invariance compares every chunking with the one-call ``parse``.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

import marker_tokenizers
from engine_helpers import accumulate, check_consistent, parse_shape, parsed, run, run_text, shape, tools
from family_support import enc, plain, prompted, split_check
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model
from testkit.format_renderers import deepseek_v3_call, deepseek_v3_calls, deepseek_v31_calls

_REGISTRY = marker_tokenizers.registry()
PRESETS = ("deepseek-v3", "deepseek-r1", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1")
V3, R1, V31, V32, V4, V41 = (_REGISTRY.get(name) for name in PRESETS)
EOS = 1  # <｜end▁of▁sentence｜>, a special token no DeepSeek format uses: never shown


def model(name: str) -> Model:
    return _REGISTRY.get(name)


# ============================================================================ rendering the formats
@dataclass(frozen=True)
class Dsml:
    """The DSML dialect of one model version: the calls wrapper and whether tags are spaced."""

    wrapper: str
    spaced: bool

    def tag(self, name: str) -> str:
        return ("｜DSML｜ " if self.spaced else "｜DSML｜") + name

    def param(self, key: str, value: str, string: bool | None = True) -> str:
        attr = "" if string is None else f' string="{"true" if string else "false"}"'
        return f'<{self.tag("parameter")} name="{key}"{attr}>{value}</{self.tag("parameter")}>'

    def invoke(self, name: str, *params: str) -> str:
        body = "".join(p + "\n" for p in params) or "\n"
        return f'<{self.tag("invoke")} name="{name}">\n{body}</{self.tag("invoke")}>'

    def calls(self, *invokes: str) -> str:
        inner = "".join(i + "\n" for i in invokes)
        return f"\n\n<{self.tag(self.wrapper)}>\n{inner}</{self.tag(self.wrapper)}>"


DSML = {
    "deepseek-v3.2": Dsml("function_calls", False),
    "deepseek-v4": Dsml("tool_calls", False),
    "deepseek-v4.1": Dsml("calls", True),
}
# V4.1 spells its wrapper "<｜DSML｜ calls>": with ``spaced`` the tag function adds the space.


def dsml_two_calls(d: Dsml) -> str:
    return d.calls(
        d.invoke("get_weather", d.param("city", "Zürich"), d.param("days", "3", string=False)),
        d.invoke(
            "search", d.param("query", 'café "best"'), d.param("filters", '{"tags": ["a"], "max": 3}', False)
        ),
    )


TWO_CALLS_SHAPE = (
    ("get_weather", '{"city": "Zürich", "days": 3}'),
    ("search", '{"query": "café \\"best\\"", "filters": {"tags": ["a"], "max": 3}}'),
)

SAMPLES: dict[str, list[tuple[str, tuple[str, str, tuple[tuple[str, str], ...]]]]] = {
    "deepseek-v3": [
        (
            "Checking."
            + deepseek_v3_calls(
                ("get_weather", '{"city": "Zürich", "days": 3}'), ("search", TWO_CALLS_SHAPE[1][1])
            ),
            ("Checking.", "", TWO_CALLS_SHAPE),
        ),
        ("Hello! 👋 How can I help?", ("Hello! 👋 How can I help?", "", ())),
    ],
    "deepseek-r1": [
        (
            "<think>\nTwo lookups.\n</think>\n\nOn it." + deepseek_v3_calls(("get_time", "{}")),
            ("On it.", "Two lookups.", (("get_time", "{}"),)),
        ),
    ],
    "deepseek-v3.1": [
        (
            "Let me look."
            + deepseek_v31_calls(
                ("get_weather", '{"city": "Zürich", "days": 3}'), ("search", TWO_CALLS_SHAPE[1][1])
            ),
            ("Let me look.", "", TWO_CALLS_SHAPE),
        ),
    ],
    **{
        preset: [
            ("I'll look both up." + dsml_two_calls(d), ("I'll look both up.", "", TWO_CALLS_SHAPE)),
            (dsml_two_calls(d) + "\n\nDone.", ("Done.", "", TWO_CALLS_SHAPE)),
        ]
        for preset, d in DSML.items()
    },
}
CASES = [(preset, text, want) for preset, samples in SAMPLES.items() for text, want in samples]


# ============================================================================ split invariance
@pytest.mark.parametrize(("name", "text", "want"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_samples_exact_under_any_split(name: str, text: str, want: tuple) -> None:
    m = model(name)
    assert split_check(m, [*enc(m, text), EOS]) == want


@pytest.mark.parametrize(("name", "text", "want"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_text_steps_cut_anywhere_match_token_ids(name: str, text: str, want: tuple) -> None:
    """``feed_text`` with the decoded text cut at random characters (mid-marker too)."""
    for seed in range(6):
        rng = random.Random(seed)
        bounds = sorted({0, len(text), *(rng.randrange(len(text) + 1) for _ in range(12))})
        streamed = run_text(model(name), [text[a:b] for a, b in itertools.pairwise(bounds)])
        check_consistent(streamed)
        assert shape(streamed.message) == want


def test_complete_tool_calls_deliver_each_call_whole() -> None:
    d = DSML["deepseek-v4"]
    ids = enc(V4, dsml_two_calls(d))
    streamed = run(V4, [[i] for i in ids], SessionOptions(complete_tool_calls=True))
    fragments = [t for delta in streamed.deltas for t in delta.tool_calls]
    assert [(t.index, t.name, t.arguments) for t in fragments] == [
        (i, n, a) for i, (n, a) in enumerate(TWO_CALLS_SHAPE)
    ]


# ============================================================================ markers inside arguments
def test_v3_marker_tokens_and_fences_inside_json_strings() -> None:
    args = '{"text": "use ```json\\n{}\\n``` or <｜tool▁call▁end｜><｜tool▁calls▁end｜> tokens"}'
    ids = enc(V3, deepseek_v3_calls(("echo", args)))
    assert 128809 in ids[:-3]  # the marker really is its token inside the string
    assert split_check(V3, ids) == ("", "", (("echo", args),))


def test_v31_marker_tokens_inside_json_strings() -> None:
    args = '{"text": "Tokens like <｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜> are markup."}'
    ids = enc(V31, deepseek_v31_calls(("echo", args)))
    assert split_check(V31, ids) == ("", "", (("echo", args),))


@pytest.mark.parametrize("name", list(DSML))
def test_dsml_tags_as_tokens_inside_a_value_are_value_text(name: str) -> None:
    """Only the value's own closing tag ends it: other tags (real ``｜DSML｜`` token) are text."""
    m, d = model(name), DSML[name]
    inner = f'Write <{d.tag("invoke")} name="x"> inside <{d.tag(d.wrapper)}> then </{d.tag("invoke")}>.'
    ids = enc(m, d.calls(d.invoke("echo", d.param("text", inner))))
    assert ids.count(m.tokenizer.token_to_id("｜DSML｜")) == 6 + 3  # 3 inside the value
    got = split_check(m, ids)
    assert got == ("", "", (("echo", json.dumps({"text": inner}, ensure_ascii=False)),))


@pytest.mark.parametrize("name", list(DSML))
def test_dsml_lookalikes_written_as_text_stay_text(name: str) -> None:
    """Tags spelled with ordinary tokens: in content they are content, in a value they are value."""
    m, d = model(name), DSML[name]
    prose = f"Use <{d.tag(d.wrapper)}> to call."
    value = f"a</{d.tag('parameter')}>b</{d.tag('invoke')}>"
    head, tail = d.calls(d.invoke("echo", d.param("text", "\x00"))).split("\x00")
    ids = plain(m, prose) + enc(m, head) + plain(m, value) + enc(m, tail)
    got = split_check(m, ids)
    assert got == (prose, "", (("echo", json.dumps({"text": value}, ensure_ascii=False)),))


def test_v3_lookalike_markers_in_prose_stay_content() -> None:
    text = "Write <｜tool▁calls▁begin｜> and <think> yourself."
    assert split_check(V3, plain(V3, text)) == (text, "", ())


# ============================================================================ parallel calls
@pytest.mark.parametrize("name", list(DSML))
def test_dsml_parallel_calls_indices_and_parallel_off(name: str) -> None:
    m, d = model(name), DSML[name]
    text = d.calls(*(d.invoke(f"f{i}", d.param("i", str(i), False)) for i in range(3)))
    ids = enc(m, text)
    streamed = run(m, [[i] for i in ids])
    assert [t.index for delta in streamed.deltas for t in delta.tool_calls if t.name] == [0, 1, 2]
    assert shape(streamed.message)[2] == tuple((f"f{i}", f'{{"i": {i}}}') for i in range(3))
    single, _ = parse_shape(m, ids, SessionOptions(parallel_tool_calls=False))
    assert single[2] == (("f0", '{"i": 0}'),)


def test_v3_adjacent_calls_without_newline() -> None:
    text = (
        "<｜tool▁calls▁begin｜>"
        + deepseek_v3_call("a", '{"x": 1}')
        + deepseek_v3_call("b", "{}")
        + "<｜tool▁calls▁end｜>"
    )
    assert split_check(V3, enc(V3, text))[2] == (("a", '{"x": 1}'), ("b", "{}"))


# ============================================================================ typed values
def test_dsml_typed_values_follow_the_string_attribute() -> None:
    d = DSML["deepseek-v4"]
    params = [
        d.param("x", "-3", False),
        d.param("y", "2.5", False),
        d.param("tolerance", "1e-05", False),
        d.param("exact", "true", False),
        d.param("limit", "null", False),
        d.param("values", "[0, -0.5, 1e+21]", False),
        d.param("when", '{"start": "09:00"}', False),
        d.param("code", "007"),  # string="true": a string even though it looks like a number
        d.param("bad", "not json", False),  # string="false" but not JSON: kept as the text it is
    ]
    got = split_check(V4, enc(V4, d.calls(d.invoke("calc", *params))))
    assert got[2][0][0] == "calc"
    assert json.loads(got[2][0][1]) == {
        "x": -3,
        "y": 2.5,
        "tolerance": 1e-05,
        "exact": True,
        "limit": None,
        "values": [0, -0.5, 1e21],
        "when": {"start": "09:00"},
        "code": "007",
        "bad": "not json",
    }


def test_dsml_value_without_string_attribute_is_typed_by_the_schema() -> None:
    d = DSML["deepseek-v3.2"]
    text = d.calls(d.invoke("f", d.param("n", "7", None), d.param("s", "7", None)))
    schema = (
        Tool("f", {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}),
    )
    got = split_check(V32, enc(V32, text), SessionOptions(tools=schema))
    assert got[2] == (("f", '{"n": 7, "s": "7"}'),)


def test_dsml_raw_string_values_are_kept_verbatim() -> None:
    """No trimming or unescaping: whitespace, quotes, backslashes, < and > are the value's."""
    d = DSML["deepseek-v4.1"]
    raw = '  if a < b and c > d:\n\tprint("x=\\"1\\"")\n'
    got = split_check(V41, enc(V41, d.calls(d.invoke("w", d.param("c", raw)))))
    assert got[2] == (("w", json.dumps({"c": raw}, ensure_ascii=False)),)


def test_v3_json_arguments_stream_verbatim() -> None:
    args = '{"x": -3, "y": 2.5, "tolerance": 1e-05, "limit": null, "values": [0, -0.5, 1e+21], "code": "007"}'
    got = split_check(V31, enc(V31, deepseek_v31_calls(("calculate", args))))
    assert got[2] == (("calculate", args),)


# ============================================================================ zero-argument calls
@pytest.mark.parametrize("name", list(DSML))
def test_dsml_empty_and_self_closing_invokes(name: str) -> None:
    d = DSML[name]
    self_closed = f'<{d.tag("invoke")} name="submit"/>'
    spaced = f'<{d.tag("invoke")} name="reset" />'
    text = "Now." + d.calls(d.invoke("get_time"), self_closed, spaced)
    m = model(name)
    got = split_check(m, enc(m, text))
    assert got == ("Now.", "", (("get_time", "{}"), ("submit", "{}"), ("reset", "{}")))


def test_v3_empty_arguments_and_missing_call_tokens() -> None:
    assert split_check(V3, enc(V3, deepseek_v3_calls(("get_time", "{}"))))[2] == (("get_time", "{}"),)
    # <｜tool▁call▁begin｜> missing: no well-formed call; the block is the model's text, passed
    # through as content, markers included (docs/service.md, "Malformed model output")
    broken = '<｜tool▁calls▁begin｜>function<｜tool▁sep｜>f\n```json\n{"a": 1}\n```<｜tool▁calls▁end｜>'
    assert split_check(V3, enc(V3, broken)) == (broken, "", ())


# ============================================================================ truncation
def _cut_after(text: str, marker: str) -> str:
    return text[: text.index(marker) + len(marker)]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deepseek-v3", _cut_after(deepseek_v3_calls(("get_weather", '{"city": "Zürich"}')), "Zür")),
        ("deepseek-v3.1", _cut_after(deepseek_v31_calls(("get_weather", '{"city": "Zürich"}')), "Zür")),
        *(
            (n, _cut_after(d.calls(d.invoke("get_weather", d.param("city", "Zürich"))), "Zür"))
            for n, d in DSML.items()
        ),
    ],
)
def test_length_mid_arguments(name: str, text: str) -> None:
    """Cut inside the arguments: streamed mode keeps what was streamed (finish_reason ``length``
    tells the client), ``complete_tool_calls`` drops the unfinished call."""
    m = model(name)
    ids = enc(m, text)
    streamed = run(m, [[i] for i in ids], reason="length")
    assert streamed.final.finish_reason == "length"
    (call,) = streamed.final.message.tool_calls
    assert call.name == "get_weather" and call.arguments.startswith('{"city": "Z')
    split_check(m, ids, reason="length")
    shape_, final = parse_shape(m, ids, SessionOptions(complete_tool_calls=True), "length")
    assert shape_ == ("", "", ()) and final.finish_reason == "length"


@pytest.mark.parametrize("name", list(DSML))
def test_length_in_the_second_call_keeps_the_first_when_complete(name: str) -> None:
    d = DSML[name]
    full = dsml_two_calls(d)
    cut_at = full.index('name="query"') + len('name="query"')
    m = model(name)
    got = split_check(m, enc(m, full[:cut_at]), SessionOptions(complete_tool_calls=True), reason="length")
    assert got == ("", "", TWO_CALLS_SHAPE[:1])


@pytest.mark.parametrize("name", ["deepseek-r1", "deepseek-v3.1", "deepseek-v4"])
def test_length_in_reasoning(name: str) -> None:
    m = model(name)
    ids = enc(m, "The user wants the current weather")
    got = split_check(m, ids, prompted(m, "<｜Assistant｜><think>"), reason="length")
    assert got == ("", "The user wants the current weather", ())


# ============================================================================ reasoning toggles
@pytest.mark.parametrize("name", ["deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1"])
def test_generation_prompt_decides_where_the_output_starts(name: str) -> None:
    m = model(name)
    ids = [*enc(m, "Plan.</think>Answer."), EOS]
    thinking = prompted(m, "<｜User｜>hi<｜Assistant｜><think>")
    assert parsed(m, ids, thinking) == ("Answer.", "Plan.", ())
    # a later </think> in the prompt (thinking off) wins over earlier turns' markers
    off = prompted(m, "<think>x</think>y<｜User｜>hi<｜Assistant｜></think>")
    assert parsed(m, enc(m, "Hello."), off) == ("Hello.", "", ())
    # the stray </think> of a thinking output parsed as non-thinking is dropped, never shown
    assert parsed(m, ids, off) == ("Plan.Answer.", "", ())


@pytest.mark.parametrize("name", ["deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1"])
def test_thinking_option_and_template_default(name: str) -> None:
    m = model(name)
    ids = enc(m, "Plan.</think>Answer.")
    assert parsed(m, ids, SessionOptions(thinking=True)) == ("Answer.", "Plan.", ())
    assert parsed(m, enc(m, "Answer.")) == ("Answer.", "", ())  # default: off
    hidden = SessionOptions(thinking=True, include_reasoning=False)
    assert parsed(m, ids, hidden) == ("Answer.", "", ())


def test_r1_reasons_by_default_with_or_without_think_in_the_output() -> None:
    assert parsed(R1, enc(R1, "<think>\nHmm.\n</think>\n\nYes.")) == ("Yes.", "Hmm.", ())
    prompt = prompted(R1, "<｜Assistant｜><think>\n")
    assert parsed(R1, enc(R1, "Hmm.\n</think>\n\nYes."), prompt) == ("Yes.", "Hmm.", ())


def test_v3_0324_output_is_content_and_think_text_stays_text() -> None:
    """V3-0324 never reasons: its prompt has no <think>, and "<think>" written as text is text."""
    opts = prompted(V3, "<｜User｜>hi<｜Assistant｜>")
    text = "Tags like <think> and </think> are R1's."
    assert parsed(V3, plain(V3, text), opts) == (text, "", ())


def test_reasoning_then_dsml_call_exact_deltas() -> None:
    d = DSML["deepseek-v4"]
    ids = [*enc(V4, "Weather.</think>" + d.calls(d.invoke("get_weather", d.param("city", "Paris")))), EOS]
    streamed = run(V4, [ids], prompted(V4, "<｜Assistant｜><think>"))
    (delta_r, delta_c) = streamed.deltas
    assert delta_r.reasoning == "Weather."
    assert [(t.index, t.name, t.arguments) for t in delta_c.tool_calls] == [
        (0, "get_weather", '{"city": "Paris"}')
    ]
    assert streamed.final.finish_reason == "tool_calls"
    assert streamed.final.usage.completion_tokens == len(ids)
    assert accumulate(streamed.deltas) == streamed.final.message


def _first_arguments(m: Model, ids: Sequence[int]) -> str:
    return shape(run(m, [list(ids)]).message)[2][0][1]


def test_dsml_string_values_stream_before_the_value_ends() -> None:
    """A string value's text arrives while it is generated, not only at its closing tag."""
    d = DSML["deepseek-v4"]
    text = d.calls(d.invoke("w", d.param("c", "line one\nline two\nline three")))
    ids = enc(V4, text)
    cut_at = len(enc(V4, text[: text.index("line three")]))
    streamed = run(V4, [ids[:cut_at], ids[cut_at:]])
    first = "".join(t.arguments for delta in streamed.per_feed[0] for t in delta.tool_calls)
    assert first == '{"c": "line one\\nline two\\n'
    assert _first_arguments(V4, ids) == '{"c": "line one\\nline two\\nline three"}'


def test_tools_schema_unused_for_json_formats() -> None:
    """V3.1 arguments are the model's JSON as written, whatever the schema says."""
    ids = enc(V31, deepseek_v31_calls(("f", '{"n": "7"}')))
    opts = SessionOptions(tools=tools(("f", {"n": {"type": "integer"}})))
    assert parsed(V31, ids, opts)[2] == (("f", '{"n": "7"}'),)


def test_nameless_calls_are_not_started_and_json_less_calls_get_empty_arguments() -> None:
    text = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜><｜tool▁call▁end｜>"
        '<｜tool▁call▁begin｜> <｜tool▁sep｜>{"a": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    assert split_check(V31, enc(V31, text)) == ("", "", (("f", "{}"),))
    d = DSML["deepseek-v4"]
    text = d.calls(d.invoke("", d.param("a", "x")), d.invoke("g"))
    assert split_check(V4, enc(V4, text)) == ("", "", (("g", "{}"),))


@pytest.mark.parametrize("name", list(DSML))
def test_dsml_parameter_closer_as_its_token_inside_a_value_is_value_text(name: str) -> None:
    """The template writes values verbatim, so ``</｜DSML｜parameter>`` inside one is the real
    token sequence: a value ends only where the call's structure goes on after the closer."""
    m, d = model(name), DSML[name]
    closer = f"</{d.tag('parameter')}>"
    text_value = f"see {closer} inside"
    json_value = json.dumps([f"see {closer} inside", "next"], ensure_ascii=False)
    ids = enc(m, d.calls(d.invoke("echo", d.param("text", text_value), d.param("items", json_value, False))))
    assert ids.count(m.tokenizer.token_to_id("｜DSML｜")) == 8 + 2  # two closers inside values
    got = split_check(m, ids)
    want = {"text": text_value, "items": [f"see {closer} inside", "next"]}
    assert got[2][0][0] == "echo" and json.loads(got[2][0][1]) == want


@pytest.mark.parametrize("name", list(DSML))
def test_dsml_stop_before_the_closers_gives_valid_json(name: str) -> None:
    m, d = model(name), DSML[name]
    full = d.calls(d.invoke("echo", d.param("text", "hi"), d.param("n", "12", False)))
    cut = full[: full.index("12") + 2]
    for complete in (False, True):
        got = split_check(m, enc(m, cut), SessionOptions(complete_tool_calls=complete))
        assert got == ("", "", (("echo", '{"text": "hi", "n": 12}'),))
