"""Session behaviour for Qwen3-Coder XML tool calls (``<function=…><parameter=…>``), with the real
Qwen3 vocabulary. Values are raw text typed by the tool's JSON schema; string values stream."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_helpers import (
    CALL_CLOSE,
    QWEN3,
    QWEN3_CODER,
    accumulate,
    check_consistent,
    cut,
    enc,
    parse_shape,
    run,
    shape,
    tools,
    typed,
)
from family_support import plain, split_check
from native_diff import compare_splits
from parsetier.engine.events import EventKind
from parsetier.engine.session import InvalidInput, Session, WrongState
from parsetier.messages import SessionOptions
from property_settings import property_settings
from strategies import GeneratedXml, coder_ids, coder_messages, render_coder

PROPERTY = property_settings(60)

SCHEMA = typed("i", "n", "b", "z", "o", "a", "s") | {
    "u": {"type": ["integer", "null"]},
    "e": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
}
TOOLS = SessionOptions(tools=tools(("f", SCHEMA), ("g", {"s": {"type": "string"}})))


def call(params: list[tuple[str, str]], name: str = "f") -> str:
    """A call as Qwen3-Coder writes it; values are the raw text the model writes."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def arguments(ids: list[int], options: SessionOptions = TOOLS, reason: str = "stop") -> list[tuple[str, str]]:
    shape_, _ = parse_shape(QWEN3_CODER, ids, options, reason)
    return list(shape_[2])


# ================================================================================ generated
@PROPERTY
@given(msg=coder_messages(), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_generated_messages_any_split(msg: GeneratedXml, cuts: list[int]) -> None:
    ids = coder_ids(msg)
    schemas: dict[str, dict[str, Any]] = {}
    for c in msg.calls:  # calls may repeat a name: the tool's schema is the last one's
        schemas[c.name] = c.schema()
    opts = SessionOptions(tools=tools(*((name, schema["properties"]) for name, schema in schemas.items())))
    expected, final = parse_shape(QWEN3_CODER, ids, opts)
    assert expected[0] == msg.content.strip()
    assert expected[1] == (msg.reasoning or "").strip()
    assert [name for name, _ in expected[2]] == [c.name for c in msg.calls]
    for (name, args), c in zip(expected[2], msg.calls, strict=True):
        if schemas[name] == c.schema():
            assert args == json.dumps(c.arguments, ensure_ascii=False)
        assert isinstance(json.loads(args), dict)
    assert final.finish_reason == ("tool_calls" if msg.calls else "stop")
    for deltas in ([[i] for i in ids], [ids], cut(ids, cuts)):
        streamed = run(QWEN3_CODER, deltas, opts)
        check_consistent(streamed)
        assert sum(e.tokens for e in streamed.events) == len(ids)
        assert shape(streamed.message) == expected
        assert streamed.final.usage == final.usage


@PROPERTY
@given(msg=coder_messages(lookalikes=False), cuts=st.lists(st.integers(0, 100_000), max_size=16))
def test_text_steps_cut_anywhere_match_token_ids(msg: GeneratedXml, cuts: list[int]) -> None:
    """``feed_text`` with the text cut anywhere, inside the literal tags too, gives the ids' message:
    the lexer holds back exactly the suffixes that could still become a tag."""
    opts = SessionOptions(
        tools=tools(*{c.name: (c.name, c.schema()["properties"]) for c in msg.calls}.values())
    )
    expected, _ = parse_shape(QWEN3_CODER, coder_ids(msg), opts)
    text = render_coder(msg)
    bounds = [0, *sorted(c % (len(text) + 1) for c in cuts), len(text)]
    session = Session(QWEN3_CODER, opts)
    deltas = [d for a, b in itertools.pairwise(bounds) for d in session.feed_text(text[a:b]).deltas]
    last = session.finish()
    assert last.final is not None
    assert accumulate(deltas + last.deltas) == last.final.message
    assert shape(last.final.message) == expected


# ================================================================================ typing
def test_values_typed_by_schema() -> None:
    ids = enc(
        call(
            [
                ("i", "12"),
                ("n", "3.5"),
                ("b", "true"),
                ("z", "null"),
                ("o", '{"x": [1, 2], "y": "二"}'),
                ("a", '[1, "a", null]'),
                ("s", "12"),
                ("u", "7"),
                ("e", "8"),
            ]
        )
    )
    expected = (
        '{"i": 12, "n": 3.5, "b": true, "z": null, "o": {"x": [1, 2], "y": "二"}, "a": [1, "a", null],'
        ' "s": "12", "u": 7, "e": "8"}'
    )
    # A type union that admits strings ("e": integer or string) streams the value as a string.
    assert arguments(ids) == [("f", expected)]
    split_check(QWEN3_CODER, ids, TOOLS)


def test_values_invalid_for_their_type_become_strings() -> None:
    ids = enc(call([("i", "abc"), ("n", "x1"), ("b", "yes"), ("z", "nil"), ("o", "{bad"), ("a", "[1,")]))
    expected = '{"i": "abc", "n": "x1", "b": "yes", "z": "nil", "o": "{bad", "a": "[1,"}'
    assert arguments(ids) == [("f", expected)]


def test_values_follow_what_the_model_wrote() -> None:
    """Valid JSON of another type is kept as written; Python spellings of literals are mapped."""
    ids = enc(call([("i", "4.5"), ("b", "True"), ("u", "None"), ("z", " null ")]))
    assert arguments(ids) == [("f", '{"i": 4.5, "b": true, "u": null, "z": null}')]


def test_unknown_parameter_and_unknown_tool_are_strings() -> None:
    ids = enc(call([("q", "42"), ("s", "x")]) + call([("k", "true")], name="unknown"))
    assert arguments(ids) == [("f", '{"q": "42", "s": "x"}'), ("unknown", '{"k": "true"}')]
    # No tools given at all: every value is a string.
    assert arguments(enc(call([("i", "1")])), SessionOptions()) == [("f", '{"i": "1"}')]


def test_string_values_keep_inner_whitespace_and_trim_one_newline() -> None:
    ids = enc(call([("s", "  spaced  "), ("t", "\nline1\n\nline2\n"), ("v", "")]))
    assert arguments(ids) == [("f", '{"s": "  spaced  ", "t": "\\nline1\\n\\nline2\\n", "v": ""}')]
    split_check(QWEN3_CODER, ids, TOOLS)


def test_string_values_with_quotes_backslashes_and_unicode() -> None:
    value = 'say "hi" \\ path C:\\tmp\tend 你好 🎉 𝄞'
    ids = enc(call([("s", value)]))
    assert arguments(ids) == [("f", json.dumps({"s": value}, ensure_ascii=False))]
    split_check(QWEN3_CODER, ids, TOOLS)


def test_marker_texts_inside_values() -> None:
    """Special ids that are not terminals of the value state are text; look-alikes are text."""
    ids = enc(call([("s", "<tool_call> and <think>x</think>")]))
    ids += (
        enc(call([("s", "a")], "g")[: -len("</tool_call>")])
        + plain(QWEN3, "</tool_call>")
        + enc("</tool_call>")
    )
    assert arguments(ids) == [("f", '{"s": "<tool_call> and <think>x</think>"}'), ("g", '{"s": "a"}')]
    # A partial closing tag in a value is value text once the next character rules it out.
    assert arguments(enc(call([("s", "a</param b </function")]))) == [("f", '{"s": "a</param b </function"}')]


def test_function_name_and_no_parameters() -> None:
    ids = enc("<tool_call>\n<function=get_time>\n</function>\n</tool_call>")
    assert arguments(ids) == [("get_time", "{}")]
    split_check(QWEN3_CODER, ids, TOOLS)


# ================================================================================ streaming
def test_string_value_streams_before_its_closing_tag() -> None:
    text = "word " * 200
    ids = enc(call([("s", text), ("i", "5")]))
    end = ids.index(enc("</")[0], ids.index(enc("<parameter")[0]) + 5)  # first "</" after the value
    session = Session(QWEN3_CODER, TOOLS)
    fragments: list[str] = []
    for k in range(end):
        fragments += [t.arguments for d in session.feed([ids[k]]).deltas for t in d.tool_calls]
    streamed_text = "".join(fragments)
    assert streamed_text.startswith('{"s": "word word')
    assert len(streamed_text) > len(text) - 10
    assert len(fragments) > 100


def test_typed_value_is_written_when_it_closes() -> None:
    ids = enc(call([("i", "123456")]))
    close = ids.index(enc("</")[0], ids.index(enc("<parameter")[0]) + 5)
    session = Session(QWEN3_CODER, TOOLS)
    fragments = [t.arguments for d in session.feed(ids[:close]).deltas for t in d.tool_calls]
    assert "".join(fragments) == '{"i": '
    rest = session.feed(ids[close:]).deltas
    assert "".join(t.arguments for d in rest for t in d.tool_calls) == "123456}"


def test_reasoning_content_and_two_calls() -> None:
    text = "<think>\nhmm\n</think>\n\nCalling.\n\n" + call([("s", "x")]) + "\n" + call([("s", "y")], "g")
    ids = enc(text)
    shape_, final = parse_shape(QWEN3_CODER, ids, TOOLS)
    assert shape_ == ("Calling.", "hmm", (("f", '{"s": "x"}'), ("g", '{"s": "y"}')))
    assert final.finish_reason == "tool_calls"
    assert final.usage.reasoning_tokens == len(enc("\nhmm\n</think>"))
    split_check(QWEN3_CODER, ids, TOOLS)


def test_two_functions_in_one_tool_call_block() -> None:
    text = "<tool_call>\n<function=f>\n<parameter=s>\nx\n</parameter>\n</function>\n"
    text += "<function=g>\n<parameter=s>\ny\n</parameter>\n</function>\n</tool_call>"
    ids = enc(text)
    assert arguments(ids) == [("f", '{"s": "x"}'), ("g", '{"s": "y"}')]
    split_check(QWEN3_CODER, ids, TOOLS)


def test_missing_closing_tags_are_implied_by_outer_ones() -> None:
    for text in (
        "<tool_call>\n<function=f>\n<parameter=s>\nabc\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=s>\nabc</tool_call>",
        "<tool_call>\n<function=f>\n<parameter=s>\nabc\n<parameter=i>\n1\n</function>\n</tool_call>",
    ):
        expected = '{"s": "abc", "i": 1}' if "<parameter=i>" in text else '{"s": "abc"}'
        assert arguments(enc(text)) == [("f", expected)], text


def test_closing_tags_inside_a_value_are_text_unless_the_structure_goes_on() -> None:
    """``</parameter>``/``</function>`` end a value only when the call's structure follows them."""
    value = "Close with </parameter> and </function> then go"
    ids = enc(call([("s", value)]))
    assert arguments(ids) == [("f", json.dumps({"s": value}))]
    split_check(QWEN3_CODER, ids, TOOLS)


def test_bare_function_opener_at_a_line_start_starts_a_call() -> None:
    """Models sometimes skip ``<tool_call>``: ``<function=`` at the start of the answer or of a line
    opens a call; inside a line it is prose."""
    body = "<function=f>\n<parameter=s>\nx\n</parameter>\n</function>"
    assert parse_shape(QWEN3_CODER, enc(body), TOOLS)[0] == ("", "", (("f", '{"s": "x"}'),))
    assert parse_shape(QWEN3_CODER, enc("Sure.\n" + body), TOOLS)[0] == ("Sure.", "", (("f", '{"s": "x"}'),))
    assert parse_shape(QWEN3_CODER, enc("Sure. <function=f> inline"), TOOLS)[0] == (
        "Sure. <function=f> inline",
        "",
        (),
    )


def test_call_opened_inside_unclosed_reasoning_ends_it() -> None:
    ids = enc("<think>\nhm\n" + call([("s", "x")]))
    streamed = run(QWEN3_CODER, [[i] for i in ids], TOOLS)
    assert shape(streamed.message) == ("", "hm", (("f", '{"s": "x"}'),))
    assert [e.kind for e in streamed.events].count(EventKind.REASONING_END) == 1


# ================================================================================ truncation / malformed
def test_length_mid_string_value_keeps_what_streamed() -> None:
    ids = enc("<tool_call>\n<function=f>\n<parameter=s>\nabc def")
    streamed = run(QWEN3_CODER, [[i] for i in ids], TOOLS, reason="length")
    assert shape(streamed.message) == ("", "", (("f", '{"s": "abc def"}'),))
    assert streamed.final.finish_reason == "length"
    assert EventKind.TOOL_CALL_END not in [e.kind for e in streamed.events]
    split_check(QWEN3_CODER, ids, TOOLS, reason="length")


def test_length_mid_typed_value_is_written_as_far_as_it_came() -> None:
    """A typed value needs its end to be typed; cut off, it is typed as far as it came and the
    object is closed: the arguments the engine writes are always valid JSON."""
    ids = enc("<tool_call>\n<function=f>\n<parameter=i>\n12")
    assert arguments(ids, reason="length") == [("f", '{"i": 12}')]


def test_length_mid_call_with_complete_tool_calls_drops_it() -> None:
    ids = enc("Let me.\n\n<tool_call>\n<function=f>\n<parameter=s>\nabc")
    opts = SessionOptions(tools=TOOLS.tools, complete_tool_calls=True)
    shape_, final = parse_shape(QWEN3_CODER, ids, opts, reason="length")
    assert shape_ == ("Let me.", "", ())
    assert final.finish_reason == "length"


def test_length_before_the_function_name_is_complete() -> None:
    ids = enc("<tool_call>\n<function=get_wea")
    shape_, final = parse_shape(QWEN3_CODER, ids, TOOLS, reason="length")
    assert shape_ == ("", "", ())
    assert final.finish_reason == "length"


def test_length_mid_reasoning() -> None:
    ids = enc("<think>\nlong thought")
    shape_, final = parse_shape(QWEN3_CODER, ids, TOOLS, reason="length")
    assert shape_ == ("", "long thought", ())
    assert final.usage.reasoning_tokens == len(ids) - 1


def test_complete_tool_calls_delivers_whole_calls() -> None:
    ids = enc(call([("s", "x"), ("i", "2")]) + "\n" + call([("s", "y")], "g"))
    opts = SessionOptions(tools=TOOLS.tools, complete_tool_calls=True)
    streamed = run(QWEN3_CODER, [[i] for i in ids], opts)
    fragments = [(t.index, t.name, t.arguments) for d in streamed.deltas for t in d.tool_calls]
    assert fragments == [(0, "f", '{"s": "x", "i": 2}'), (1, "g", '{"s": "y"}')]
    check_consistent(streamed)


def test_tool_call_marker_not_followed_by_a_function_is_text() -> None:
    """``<tool_call>`` counts only when ``<function=`` follows it; otherwise the block is content,
    so no text is lost (like Qwen3's passthrough of a malformed envelope)."""
    ids = enc("Hi <tool_call>\nnot xml\n</tool_call> there")
    assert parse_shape(QWEN3_CODER, ids, TOOLS)[0] == ("Hi <tool_call>\nnot xml\n</tool_call> there", "", ())


_NO_GT = "<tool_call>\n<function=bad_func_no_gt\n</function>\n</tool_call>"
_NO_GT_BEFORE_PARAMS = "<tool_call>\n<function=f\n<parameter=s>\nx\n</parameter>\n</function>\n</tool_call>"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # vLLM's regression case: the name's `>` never comes; the next line's closer is no part of it.
        (_NO_GT + "\n" + call([("s", "x")]), (_NO_GT, "", (("f", '{"s": "x"}'),))),
        (_NO_GT_BEFORE_PARAMS, (_NO_GT_BEFORE_PARAMS, "", ())),
        ("<function=f\nmore text", ("<function=f\nmore text", "", ())),
    ],
)
def test_a_function_name_ends_at_the_end_of_its_line(text: str, want: tuple) -> None:
    """A ``<function=NAME`` whose ``>`` never comes names no call: the name ends at the end of its
    line, and its block is the model's text (passed through, like any block that yields no call),
    in both engines. It used to read on into the next line, giving a call named
    ``"bad_func_no_gt\\n</function"`` beside the real one."""
    ids = enc(text)
    assert split_check(QWEN3_CODER, ids, TOOLS) == want
    compare_splits(QWEN3_CODER, TOOLS, ids)


def test_a_parameter_key_ends_at_the_end_of_its_line() -> None:
    """``<parameter=KEY`` whose ``>`` never comes is that key, and its value starts on the next line
    (inside a call the key is not in doubt), in both engines; it used to read on into the value and
    its closer (a key ``"city\\nDallas\\n</parameter"``)."""
    body = "<parameter=s\nDallas\n</parameter>\n<parameter=i\n3\n</parameter>\n"
    text = f"<tool_call>\n<function=f>\n{body}</function>\n</tool_call>"
    ids = enc(text)
    assert split_check(QWEN3_CODER, ids, TOOLS) == ("", "", (("f", '{"s": "Dallas", "i": 3}'),))
    compare_splits(QWEN3_CODER, TOOLS, ids)


# ================================================================================ options / errors
def test_tool_choice_and_parallel() -> None:
    ids = enc("OK.\n\n" + call([("s", "x")]) + "\n" + call([("s", "y")], "g"))
    none = SessionOptions(tools=TOOLS.tools, tool_choice="none")
    assert parse_shape(QWEN3_CODER, ids, none)[0] == ("OK.", "", ())
    named = SessionOptions(tools=TOOLS.tools, tool_choice="f", parallel_tool_calls=False)
    shape_, final = parse_shape(QWEN3_CODER, ids, named)
    assert shape_ == ("OK.", "", (("f", '{"s": "x"}'),))
    assert final.finish_reason == "stop"


def test_prompt_opened_reasoning() -> None:
    opts = SessionOptions(tools=TOOLS.tools, prompt_token_ids=tuple(enc("<|im_start|>assistant\n<think>\n")))
    ids = enc("plan\n</think>\n\n" + call([("i", "3")]))
    assert split_check(QWEN3_CODER, ids, opts) == ("", "plan", (("f", '{"i": 3}'),))


def test_thinking_switch_when_the_prompt_does_not_say() -> None:
    """The request's switch (or ``enable_thinking`` in the template kwargs) picks the start state;
    a prompt that holds a reasoning marker overrides it."""
    ids = enc("plan\n</think>\n\nanswer")
    on = ("answer", "plan", ())
    off = ("plan\n</think>\n\nanswer", "", ())
    assert parse_shape(QWEN3_CODER, ids, SessionOptions(thinking=True))[0] == on
    assert (
        parse_shape(QWEN3_CODER, ids, SessionOptions(chat_template_kwargs={"enable_thinking": "true"}))[0]
        == on
    )
    assert parse_shape(QWEN3_CODER, ids, SessionOptions(thinking=False))[0] == off
    closed = SessionOptions(thinking=True, prompt_token_ids=tuple(enc("<think>\n\n</think>\n\n")))
    assert parse_shape(QWEN3_CODER, ids, closed)[0] == off


def test_feed_text_matches_ids() -> None:
    text = "<think>\nhmm\n</think>\n\nOK.\n\n" + call([("s", "x y"), ("i", "3")])
    expected = parse_shape(QWEN3_CODER, enc(text), TOOLS)[0]
    for size in (1, 4, len(text)):
        session = Session(QWEN3_CODER, TOOLS)
        for k in range(0, len(text), size):
            session.feed_text(text[k : k + size])
        last = session.finish()
        assert last.final is not None and shape(last.final.message) == expected


def test_errors() -> None:
    with pytest.raises(InvalidInput):
        Session(QWEN3_CODER, SessionOptions(tools=TOOLS.tools, tool_choice="h"))
    session = Session(QWEN3_CODER, TOOLS)
    with pytest.raises(InvalidInput):
        session.feed([QWEN3_CODER.vocab_size + 5])
    session.finish()
    with pytest.raises(WrongState):
        session.feed([CALL_CLOSE])


def test_long_name_capture_in_one_delta_is_bounded_like_id_by_id() -> None:
    """A capture keeps its first 4,096 characters whether its text came id by id or as one run."""
    body = "<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
    ids = enc("<tool_call>\n<function=" + "n" * 5000 + ">\n" + body)
    split_check(QWEN3_CODER, ids, TOOLS)
