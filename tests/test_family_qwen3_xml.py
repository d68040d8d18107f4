"""Qwen XML tool calls (Qwen3-Coder on the Qwen3 vocabulary; Qwen3.5 / 3.8 on the 248k vocabulary).

``<tool_call>\\n<function=N>\\n<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>``; one newline
on each side of a value is markup. ``<tool_call>``/``<think>`` and their closers are added tokens;
``<function=``/``<parameter=`` are plain text. Closers count only where the structure goes on
after them, so marker text inside a value stays text. Every test asserts exact outputs and split
invariance.
"""

from __future__ import annotations

import pytest

import marker_tokenizers
from engine_helpers import tools
from family_support import arguments_before, enc, plain, prompted, split_check
from parsetier.engine.grammar import GrammarError, grammar_from_dict
from parsetier.engine.readers import ParamWriter
from parsetier.messages import SessionOptions

_REGISTRY = marker_tokenizers.registry()
CODER = _REGISTRY.get("qwen3-coder")
Q35 = _REGISTRY.get("qwen3.5")
IM_END_35 = 248046

TOOLS = tools(
    get_weather={"city": {"type": "string"}, "unit": {"type": "string"}},
    write_file={"path": {"type": "string"}, "content": {"type": "string"}},
    set_alarm={
        "hour": {"type": "integer"},
        "volume": {"type": "number"},
        "repeat": {"type": "boolean"},
        "label": {"type": ["string", "null"]},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "tags": {"type": "array"},
        "opts": {"type": "object"},
    },
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)
THINK_PROMPT = prompted(Q35, "<|im_start|>assistant\n<think>\n", tools=TOOLS)
NO_THINK_PROMPT = prompted(Q35, "<|im_start|>assistant\n<think>\n\n</think>\n\n", tools=TOOLS)


def call(name: str, *kv: tuple[str, str]) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in kv)
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def test_qwen35_reasoning_from_the_prompt_the_preset_and_the_switch() -> None:
    ids = enc(Q35, "Weather lookup.\n</think>\n\n" + call("get_weather", ("city", "Zürich")))
    want = ("", "Weather lookup.", (("get_weather", '{"city": "Zürich"}'),))
    assert split_check(Q35, [*ids, IM_END_35], THINK_PROMPT) == want
    assert split_check(Q35, ids, OPTS) == want  # preset default: thinking on
    plain_ids = enc(Q35, call("get_time"))
    assert split_check(Q35, plain_ids, NO_THINK_PROMPT) == ("", "", (("get_time", "{}"),))
    assert split_check(Q35, plain_ids, SessionOptions(tools=TOOLS, thinking=False)) == (
        "",
        "",
        (("get_time", "{}"),),
    )
    # Qwen3-Coder does not think: the same text with no prompt is content from the start.
    assert split_check(CODER, enc(CODER, "Hi.\n\n" + call("get_time")), OPTS) == (
        "Hi.",
        "",
        (("get_time", "{}"),),
    )


def test_call_opened_inside_the_reasoning_ends_it() -> None:
    ids = enc(Q35, "Need to inspect.\n" + call("get_time"))
    assert split_check(Q35, ids, THINK_PROMPT) == ("", "Need to inspect.", (("get_time", "{}"),))
    # A <tool_call> token mentioned in the reasoning (no <function= after it) stays reasoning.
    mention = enc(Q35, "Calls use <tool_call> blocks.\n</think>\n\nOK.")
    assert split_check(Q35, mention, THINK_PROMPT) == ("OK.", "Calls use <tool_call> blocks.", ())


def test_typed_values_and_nullable_strings() -> None:
    text = call(
        "set_alarm",
        ("hour", "7"),
        ("volume", "1e20"),
        ("repeat", "False"),
        ("label", "null"),
        ("note", "nullish"),
        ("tags", '["a", "b"]'),
        ("opts", '{"x": null}'),
    )
    args = (
        '{"hour": 7, "volume": 1e+20, "repeat": false, "label": null, "note": "nullish", "tags": ["a", "b"], '
        '"opts": {"x": null}}'
    )
    assert split_check(CODER, enc(CODER, text), OPTS) == ("", "", (("set_alarm", args),))
    short = call("set_alarm", ("label", "nu"), ("note", ""), ("hour", "None"))
    want = ("", "", (("set_alarm", '{"label": "nu", "note": "", "hour": null}'),))
    assert split_check(CODER, enc(CODER, short), OPTS) == want


def test_nullable_string_opens_its_quote_only_when_it_cannot_be_null() -> None:
    out: list[str] = []
    writer = ParamWriter(TOOLS[2].parameters, True, out.append)
    writer.begin("label")
    for piece in ("\n", "n", "u", "l"):
        writer.value(piece)
    assert "".join(out) == '{"label": '  # "nul" could still become null: nothing shown yet
    writer.value("l\n")
    assert "".join(out) == '{"label": '
    writer.end()
    assert "".join(out) == '{"label": null'
    writer.begin("note")
    writer.value("\nnu")
    writer.value("t")  # "nut" is not null: the string opens and streams
    assert "".join(out) == '{"label": null, "note": "nut'
    writer.close()
    assert "".join(out) == '{"label": null, "note": "nut"}'


def test_bare_function_without_the_tool_call_opener() -> None:
    body = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
    calls = (("get_weather", '{"city": "Paris"}'),)
    assert split_check(CODER, enc(CODER, body + "\n</tool_call>"), OPTS) == ("", "", calls)
    after_text = enc(CODER, "I will use the tool.\n\n" + body + "\n</tool_call>")
    assert split_check(CODER, after_text, OPTS) == ("I will use the tool.", "", calls)
    # After the reasoning, and without any closer at all: text after the function is content.
    q35 = enc(Q35, "Plan.\n</think>\n\n" + body + "\nDone.")
    assert split_check(Q35, q35, THINK_PROMPT) == ("Done.", "Plan.", calls)
    # Mid-line, the same text is prose about the format.
    prose = "Write <function=get_weather> to call it."
    assert split_check(CODER, enc(CODER, prose), OPTS) == (prose, "", ())


def test_marker_text_inside_a_value_is_text() -> None:
    value = "Close tags inline: </parameter> and </function> and <parameter=path> and </tool_call> are text."
    ids = enc(CODER, call("write_file", ("path", "n.md"), ("content", value)))
    assert ids.count(151658) == 2  # the </tool_call> inside the value is the real token
    args = (
        '{"path": "n.md", "content": "Close tags inline: </parameter> and </function> and <parameter=path> '
        'and </tool_call> are text."}'
    )
    assert split_check(CODER, ids, OPTS) == ("", "", (("write_file", args),))


def test_marker_lookalikes_are_text() -> None:
    text = "Literally <tool_call> and <think> here."
    assert split_check(CODER, plain(CODER, text), OPTS) == (text, "", ())


def test_missing_closers_still_delimit_values() -> None:
    text = (
        "Let me check:\n<tool_call>\n<function=get_weather>\n<parameter=city>\nDallas\n"
        "<parameter=unit>\nF\n</parameter>\n</function>\n</tool_call>"
    )
    want = ("Let me check:", "", (("get_weather", '{"city": "Dallas", "unit": "F"}'),))
    assert split_check(CODER, enc(CODER, text), OPTS) == want
    text2 = '<tool_call>\n<function=set_alarm>\n<parameter=opts>\n{"a": true}\n</function>\n</tool_call>'
    assert split_check(CODER, enc(CODER, text2), OPTS) == ("", "", (("set_alarm", '{"opts": {"a": true}}'),))


def test_compact_calls_and_content_around_them() -> None:
    text = (
        "before<tool_call><function=get_weather><parameter=city>Paris</parameter></function></tool_call>after"
    )
    assert split_check(CODER, enc(CODER, text), OPTS) == (
        "beforeafter",
        "",
        (("get_weather", '{"city": "Paris"}'),),
    )


def test_tool_call_block_without_a_function_is_content() -> None:
    text = "Hi <tool_call>\nnot xml\n</tool_call> there"
    assert split_check(Q35, enc(Q35, text), NO_THINK_PROMPT) == (text, "", ())


def test_parallel_calls_and_whitespace_significant_values() -> None:
    text = (
        call("write_file", ("path", "a.py"), ("content", "    if x:\n        return 1\n"))
        + "\n"
        + call("get_time")
        + "\n"
        + call("get_weather", ("city", "  two  spaces  "))
    )
    calls = (
        ("write_file", '{"path": "a.py", "content": "    if x:\\n        return 1\\n"}'),
        ("get_time", "{}"),
        ("get_weather", '{"city": "  two  spaces  "}'),
    )
    assert split_check(Q35, enc(Q35, text), NO_THINK_PROMPT) == ("", "", calls)


def test_string_values_stream_before_the_value_ends() -> None:
    text = call("write_file", ("content", "alpha beta gamma delta"))
    ids = enc(CODER, text)
    close = len(enc(CODER, text[: text.index("\n</parameter>")]))
    assert arguments_before(CODER, ids, OPTS, close) == '{"content": "alpha beta gamma delta'


@pytest.mark.parametrize("complete", [False, True])
def test_truncation(complete: bool) -> None:
    text = "Write it.\n</think>\n\n" + call(
        "write_file", ("path", "/tmp/build.sh"), ("content", "rm -rf /tmp/build")
    )
    ids = enc(Q35, text[: text.index("tmp/build\n</parameter>\n</function>")])
    opts = SessionOptions(
        tools=TOOLS, prompt_token_ids=THINK_PROMPT.prompt_token_ids, complete_tool_calls=complete
    )
    got = split_check(Q35, ids, opts, reason="length")
    partial = (("write_file", '{"path": "/tmp/build.sh", "content": "rm -rf /'),)
    assert got == ("", "Write it.", ()) if complete else ("", "Write it.", partial)
    at_open = enc(Q35, "Done thinking.\n</think>\n\n<tool_call>")
    assert split_check(Q35, at_open, opts, reason="length") == ("", "Done thinking.", ())


def test_follow_must_name_terminals() -> None:
    spec = {
        "name": "bad",
        "initial": "a",
        "terminals": {"x": "<x>"},
        "states": {"a": {"kind": "content", "on": {"x": {"next": "a", "follow": ["y", "end"]}}}},
    }
    with pytest.raises(GrammarError, match=r"follow names unknown terminals \['y'\]"):
        grammar_from_dict(spec)
    spec["states"]["a"]["on"]["x"]["follow"] = ["x", "end"]
    assert grammar_from_dict(spec).states["a"].on["x"].follow == ("x", "end")


@pytest.mark.parametrize(
    "cut",
    [
        "<tool_call>",
        "<tool_call>\n",
        "<tool_call>\n<",
        "<tool_call>\n<function",
        "<tool_call>\n<function=get",
    ],
)
@pytest.mark.parametrize("reason", ["length", "stop"])
def test_cut_inside_a_call_block_before_the_name_is_not_content(cut: str, reason: str) -> None:
    """Markup inside a call block is never content; a call with no complete name is dropped. A
    name the model stopped in by itself (``stop``, not a cut) is its text: the block is passed
    through (docs/service.md, "Malformed model output")."""
    for m, opts in ((Q35, NO_THINK_PROMPT), (CODER, OPTS)):
        ids = enc(m, "Let me check.\n\n" + cut)
        want = "Let me check.\n\n" + cut if reason == "stop" and cut.endswith("=get") else "Let me check."
        assert split_check(m, ids, opts, reason=reason) == (want, "", ())
