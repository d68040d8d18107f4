"""Session behaviour for Qwen3 (``<think>`` reasoning, Hermes ``<tool_call>`` JSON envelopes),
driven with the real Qwen3 vocabulary.

Every test asserts exact outputs. Token ids are built the way the model emits them: ``enc`` turns
marker texts into their special ids; ``plain`` spells them as ordinary text tokens (look-alikes).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers.decoders import DecodeStream

from engine_helpers import (
    CALL_CLOSE,
    CALL_OPEN,
    ENDOFTEXT,
    IM_END,
    QWEN3,
    THINK_CLOSE,
    THINK_OPEN,
    TOKENIZER,
    accumulate,
    calls_json,
    check_consistent,
    cut,
    enc,
    parse_shape,
    run,
    run_text,
    shape,
    tools,
)
from family_support import plain, split_check
from parsetier.engine.events import EventKind
from parsetier.engine.session import InvalidInput, Session, WrongState, parse
from parsetier.messages import Delta, SessionOptions, ToolCallDelta, Usage
from property_settings import property_settings
from strategies import Generated, hermes_ids, hermes_messages, render_hermes

PROPERTY = property_settings(60)

WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
TIME = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
FULL = "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n\n" + WEATHER


def no_ids(deltas: list[Delta]) -> list[Delta]:
    """Deltas with call ids blanked, for exact comparison (ids are random)."""
    return [
        replace(d, tool_calls=tuple(replace(t, id="ID" if t.id else None) for t in d.tool_calls))
        for d in deltas
    ]


def one_by_one(ids: list[int]) -> list[list[int]]:
    return [[i] for i in ids]


# ================================================================================ split invariance
@PROPERTY
@given(msg=hermes_messages(), cuts=st.lists(st.integers(0, 10_000), max_size=12), eos=st.booleans())
def test_generated_messages_any_split(msg: Generated, cuts: list[int], eos: bool) -> None:
    """The generated message comes back exactly, however the ids are cut into deltas."""
    ids = hermes_ids(msg) + ([IM_END] if eos else [])
    opts = SessionOptions(tools=tools(*{c.name for c in msg.calls}))
    expected, final = parse_shape(QWEN3, ids, opts)
    # What the model wrote, recovered exactly.
    assert expected[0] == msg.expected_content()
    assert expected[1] == msg.expected_reasoning()
    assert [name for name, _ in expected[2]] == [c.name for c in msg.calls]
    for (_, arguments), call in zip(expected[2], msg.calls, strict=True):
        assert arguments == call.arguments_text
        assert json.loads(arguments) == call.arguments
    assert final.finish_reason == ("tool_calls" if msg.calls else "stop")
    assert final.usage.completion_tokens == len(ids)
    # Any split: one id per delta, all at once, random groups.
    for deltas in (one_by_one(ids), [ids], cut(ids, cuts)):
        streamed = run(QWEN3, deltas, opts)
        check_consistent(streamed)
        assert sum(e.tokens for e in streamed.events) == len(ids)
        assert shape(streamed.message) == expected
        assert streamed.final.usage == final.usage
        assert streamed.final.finish_reason == final.finish_reason


@PROPERTY
@given(msg=hermes_messages(lookalikes=False), cuts=st.lists(st.integers(0, 100_000), max_size=12))
def test_text_steps_match_token_ids(msg: Generated, cuts: list[int]) -> None:
    """``feed_text`` with the decoded text cut anywhere (mid-marker too) gives the ids' message."""
    text = render_hermes(msg)
    expected, _ = parse_shape(QWEN3, hermes_ids(msg, lookalikes=False))
    bounds = [0, *sorted(c % (len(text) + 1) for c in cuts), len(text)]
    streamed = run_text(QWEN3, [text[a:b] for a, b in itertools.pairwise(bounds)])
    check_consistent(streamed)
    assert shape(streamed.message) == expected


@PROPERTY
@given(msg=hermes_messages(), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_complete_tool_calls_same_message(msg: Generated, cuts: list[int]) -> None:
    """``complete_tool_calls`` changes delivery, not the message: each call arrives in one delta."""
    ids = hermes_ids(msg)
    expected, _ = parse_shape(QWEN3, ids)
    opts = SessionOptions(complete_tool_calls=True)
    streamed = run(QWEN3, cut(ids, cuts), opts)
    check_consistent(streamed)
    assert shape(streamed.message) == expected
    fragments = [t for d in streamed.deltas for t in d.tool_calls]
    assert [(t.index, t.name, t.arguments) for t in fragments] == [
        (i, name, args) for i, (name, args) in enumerate(expected[2])
    ]


# ================================================================================ exact outputs
def test_reasoning_content_and_call_exact_deltas() -> None:
    ids = [*enc(FULL), IM_END]
    streamed = run(QWEN3, [ids], SessionOptions(tools=tools("get_weather")))
    assert no_ids(streamed.deltas) == [
        Delta(reasoning="The user wants the weather."),
        Delta(content="Let me check."),
        Delta(tool_calls=(ToolCallDelta(0, '{"city": "Paris", "days": 3}', "ID", "get_weather"),)),
    ]
    final = streamed.final
    assert final.finish_reason == "tool_calls"
    assert final.usage.completion_tokens == len(ids) == 40
    # Reasoning tokens: those after <think>, up to and including </think>.
    assert final.usage.reasoning_tokens == ids.index(THINK_CLOSE) == 8
    check_consistent(streamed)


def test_one_token_per_delta_exact_deltas() -> None:
    ids = enc("<think>\nHmm.\n</think>\n\nOK.\n\n" + TIME)
    streamed = run(QWEN3, one_by_one(ids))
    assert [d for feed in streamed.per_feed for d in no_ids(feed)] == [
        Delta(reasoning="Hmm"),
        Delta(reasoning="."),
        Delta(content="OK"),
        Delta(content="."),
        Delta(tool_calls=(ToolCallDelta(0, "{}", "ID", "get_time"),)),
    ]
    split_check(QWEN3, ids)


def test_start_and_end_markers_in_the_same_delta() -> None:
    ids = enc("<think>\nshort\n</think>\n\nAnswer.\n\n" + WEATHER)
    think = ids.index(THINK_CLOSE) + 1
    streamed = run(QWEN3, [ids[:think], ids[think:]])
    assert [no_ids(f) for f in streamed.per_feed] == [
        [Delta(reasoning="short")],
        [
            Delta(content="Answer."),
            Delta(tool_calls=(ToolCallDelta(0, '{"city": "Paris", "days": 3}', "ID", "get_weather"),)),
        ],
        [],
    ]
    split_check(QWEN3, ids)


def test_several_complete_calls_in_one_delta() -> None:
    ids = enc(WEATHER + "\n" + TIME + "\n" + WEATHER)
    streamed = run(QWEN3, [ids])
    assert no_ids(streamed.per_feed[0]) == [
        Delta(tool_calls=(ToolCallDelta(0, '{"city": "Paris", "days": 3}', "ID", "get_weather"),)),
        Delta(tool_calls=(ToolCallDelta(1, "{}", "ID", "get_time"),)),
        Delta(tool_calls=(ToolCallDelta(2, '{"city": "Paris", "days": 3}', "ID", "get_weather"),)),
    ]
    check_consistent(streamed)
    assert streamed.final.finish_reason == "tool_calls"
    split_check(QWEN3, ids)


def test_marker_tokens_inside_json_strings_stay_in_the_string() -> None:
    """The model writes the markers' special ids inside an argument string: string context wins."""
    args = {"code": "print('<tool_call>')</tool_call>", "note": "<think>x</think>"}
    ids = enc('<tool_call>\n{"name": "run", "arguments": ' + json.dumps(args) + "}\n</tool_call>")
    assert ids.count(CALL_OPEN) == 2 and ids.count(CALL_CLOSE) == 2 and THINK_OPEN in ids
    message, _final, _ = parse(QWEN3, SessionOptions(), ids)
    assert calls_json(message) == [("run", args)]
    assert message.tool_calls[0].arguments == json.dumps(args)
    assert message.content == ""
    split_check(QWEN3, ids)


def test_marker_lookalikes_in_prose_and_json_stay_text() -> None:
    """Marker texts spelled as ordinary tokens are text everywhere, reasoning and content included."""
    prose = "Use <tool_call> and </think> here; <think>not reasoning</think>."
    ids = (
        enc("<think>\n")
        + plain(QWEN3, "I saw </think> in the docs.")
        + enc("\n</think>\n\n")
        + plain(QWEN3, prose)
        + enc("\n\n<tool_call>\n")
        + plain(QWEN3, '{"name": "f", "arguments": {"s": "</tool_call><tool_call>"}}')
        + enc("\n</tool_call>")
    )
    assert ids.count(CALL_OPEN) == 1 and ids.count(THINK_CLOSE) == 1
    expected = (prose, "I saw </think> in the docs.", (("f", '{"s": "</tool_call><tool_call>"}'),))
    assert split_check(QWEN3, ids) == expected


def test_lookalike_split_over_deltas_is_not_held_forever() -> None:
    """``<tool`` + ``_call>`` as text: the first half is shown as soon as the ids prove it text."""
    ids = enc("a <tool") + enc("_call> b")
    streamed = run(QWEN3, [enc("a <tool"), enc("_call> b")])
    assert streamed.per_feed[0] == [Delta(content="a <tool")]
    assert streamed.message.content == "a <tool_call> b"
    split_check(QWEN3, ids)


def test_multibyte_characters_split_across_tokens_and_deltas() -> None:
    text = "天气 🎉 𝄞 ok"
    ids = enc("<think>\n" + text + "\n</think>\n\n" + text)
    # Premise: some ids decode to nothing on their own (an incomplete UTF-8 character).
    stream = DecodeStream(skip_special_tokens=False)
    steps = [stream.step(TOKENIZER, i) for i in ids]
    assert steps.count(None) >= 3
    streamed = run(QWEN3, one_by_one(ids))
    assert all("\ufffd" not in d.content + d.reasoning for d in streamed.deltas)
    assert shape(streamed.message) == (text, text, ())
    # Every split position, including inside each character's token run.
    for k in range(len(ids) + 1):
        assert shape(run(QWEN3, [ids[:k], ids[k:]]).message) == (text, text, ())


def test_unicode_arguments_split_mid_character() -> None:
    args = {"city": "東京 🗼", "emoji": "👍🏽🚀", "clef": "𝄞"}
    ids = enc(
        '<tool_call>\n{"name": "f", "arguments": ' + json.dumps(args, ensure_ascii=False) + "}\n</tool_call>"
    )
    streamed = run(QWEN3, one_by_one(ids))
    assert all("\ufffd" not in t.arguments for d in streamed.deltas for t in d.tool_calls)
    assert streamed.message.tool_calls[0].arguments == json.dumps(args, ensure_ascii=False)
    split_check(QWEN3, ids)


def test_empty_arguments() -> None:
    ids = enc('<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>')
    assert split_check(QWEN3, ids) == ("", "", (("now", "{}"),))


def test_nested_objects_and_arrays() -> None:
    args = {"a": {"b": [1, {"c": [None, True, -2.5e-3]}], "d": {}}, "e": [[], [[]]], "f": "}]"}
    text = '<tool_call>\n{"name": "deep", "arguments": ' + json.dumps(args) + "}\n</tool_call>"
    ids = enc(text)
    assert split_check(QWEN3, ids) == ("", "", (("deep", json.dumps(args)),))


def test_arguments_as_double_encoded_string_are_unwrapped() -> None:
    ids = enc('<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}\n</tool_call>')
    assert parse_shape(QWEN3, ids)[0] == ("", "", (("f", '{"a": 1}'),))


def test_arguments_before_name_and_parameters_key() -> None:
    ids = enc('<tool_call>\n{"arguments": {"a": [1]}, "name": "f"}\n</tool_call>\n')
    ids += enc('<tool_call>\n{"name": "g", "parameters": {"b": 2}}\n</tool_call>')
    assert split_check(QWEN3, ids) == ("", "", (("f", '{"a": [1]}'), ("g", '{"b": 2}')))


def test_reasoning_then_call_without_content() -> None:
    ids = enc("<think>\nNeed the weather.\n</think>\n\n" + WEATHER)
    expected = ("", "Need the weather.", (("get_weather", '{"city": "Paris", "days": 3}'),))
    assert split_check(QWEN3, ids) == expected


def test_call_without_reasoning() -> None:
    ids = enc(WEATHER)
    shape_, final = parse_shape(QWEN3, ids)
    assert shape_ == ("", "", (("get_weather", '{"city": "Paris", "days": 3}'),))
    assert final.usage.reasoning_tokens == 0
    split_check(QWEN3, ids)


def test_content_after_call_is_content() -> None:
    ids = enc("Before.\n\n" + TIME + "\n\nAfter.")
    assert parse_shape(QWEN3, ids)[0] == ("Before.\n\n\n\nAfter.", "", (("get_time", "{}"),))


def test_reasoning_block_inside_content_starts_reasoning() -> None:
    """Whitespace on either side of the block is inner content whitespace: kept verbatim."""
    ids = enc("Intro <think>\nlater thought\n</think>\n\nrest")
    assert parse_shape(QWEN3, ids)[0] == ("Intro \n\nrest", "later thought", ())


def test_tool_call_marker_inside_reasoning_is_reasoning_text() -> None:
    """Reasoning listens only for ``</think>``: a call written while thinking is thought, not a call."""
    ids = enc('<think>\nMaybe <tool_call>{"name": "f"}</tool_call>?\n</think>\n\nNo.')
    assert parse_shape(QWEN3, ids)[0] == ("No.", 'Maybe <tool_call>{"name": "f"}</tool_call>?', ())


def test_empty_deltas_are_harmless() -> None:
    ids = enc("Hi")
    streamed = run(QWEN3, [[], ids[:1], [], ids[1:], []])
    assert streamed.per_feed == [[], [Delta(content="Hi")], [], [], [], []]


# ================================================================================ prompt / thinking
PROMPT = enc("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n")


def test_thinking_disabled_by_the_prompt() -> None:
    """Template with enable_thinking=False: an empty think block in the prompt, output is content."""
    opts = SessionOptions(prompt_token_ids=(*PROMPT, *enc("<think>\n\n</think>\n\n")), thinking=False)
    ids = enc("It is sunny.")
    shape_, final = parse_shape(QWEN3, ids, opts)
    assert shape_ == ("It is sunny.", "", ())
    assert final.usage.reasoning_tokens == 0
    split_check(QWEN3, ids, opts)


def test_think_close_already_in_the_prompt() -> None:
    opts = SessionOptions(prompt_token_ids=(*PROMPT, *enc("<think>\nthought\n</think>\n\n")))
    ids = enc("Answer.\n\n" + TIME)
    assert parse_shape(QWEN3, ids, opts)[0] == ("Answer.", "", (("get_time", "{}"),))
    # A stray </think> in the output is then plain text: the reasoning block was already closed.
    assert parse_shape(QWEN3, enc("a </think> b"), opts)[0] == ("a </think> b", "", ())


def test_prompt_ending_in_think_open_starts_in_reasoning() -> None:
    opts = SessionOptions(prompt_token_ids=(*PROMPT, *enc("<think>\n")))
    ids = enc("Thinking hard.\n</think>\n\nDone.")
    shape_, final = parse_shape(QWEN3, ids, opts)
    assert shape_ == ("Done.", "Thinking hard.", ())
    assert final.usage.reasoning_tokens == len(enc("Thinking hard.\n</think>"))
    streamed = run(QWEN3, one_by_one(ids), opts)
    assert streamed.events[0].kind is EventKind.REASONING_START
    split_check(QWEN3, ids, opts)


def test_qwen3_has_no_thinking_switch() -> None:
    """Qwen3 writes ``<think>`` itself: the request's switch alone does not open reasoning."""
    ids = enc("<think>\nplan\n</think>\n\nanswer")
    for thinking in (True, False, None):
        assert parse_shape(QWEN3, ids, SessionOptions(thinking=thinking))[0] == ("answer", "plan", ())
    assert parse_shape(QWEN3, enc("plan"), SessionOptions(thinking=True))[0] == ("plan", "", ())


def test_the_last_reasoning_marker_in_the_prompt_decides() -> None:
    """Earlier turns' think blocks do not matter, only the last marker."""
    history = enc("<|im_start|>assistant\n<think>\nold\n</think>\n\nold answer<|im_end|>\n")
    opts = SessionOptions(prompt_token_ids=(*history, *PROMPT, *enc("<think>\n")))
    assert parse_shape(QWEN3, enc("new\n</think>\n\nA"), opts)[0] == ("A", "new", ())
    opts = SessionOptions(prompt_token_ids=(*history, *PROMPT))
    assert parse_shape(QWEN3, enc("<think>\nnew\n</think>\n\nA"), opts)[0] == ("A", "new", ())


# ================================================================================ truncation
def test_length_mid_reasoning_ends_the_reasoning() -> None:
    ids = enc("<think>\nStep one, then step")
    streamed = run(QWEN3, one_by_one(ids), reason="length")
    assert shape(streamed.message) == ("", "Step one, then step", ())
    assert streamed.final.finish_reason == "length"
    assert streamed.final.usage.reasoning_tokens == len(ids) - 1
    assert [e.kind for e in streamed.events].count(EventKind.REASONING_END) == 1
    assert [e.kind for e in streamed.events[-2:]] == [EventKind.REASONING_END, EventKind.END]
    split_check(QWEN3, ids, reason="length")


def test_length_mid_call_keeps_the_call_as_streamed() -> None:
    ids = enc('Sure.\n\n<tool_call>\n{"name": "write", "arguments": {"path": "a.txt", "text": "hel')
    streamed = run(QWEN3, one_by_one(ids), reason="length")
    assert shape(streamed.message) == ("Sure.", "", (("write", '{"path": "a.txt", "text": "hel'),))
    assert streamed.final.finish_reason == "length"
    assert EventKind.TOOL_CALL_END not in [e.kind for e in streamed.events]
    split_check(QWEN3, ids, reason="length")


def test_length_mid_call_with_complete_tool_calls_drops_it() -> None:
    ids = enc('Sure.\n\n<tool_call>\n{"name": "write", "arguments": {"path": "a.txt", "text": "hel')
    opts = SessionOptions(complete_tool_calls=True)
    streamed = run(QWEN3, one_by_one(ids), opts, reason="length")
    assert shape(streamed.message) == ("Sure.", "", ())
    assert streamed.final.finish_reason == "length"


@pytest.mark.parametrize(
    "cut", ['<tool_call>\n{"name": "wri', '<tool_call>\n{"name": "', "<tool_call>\n{", "<tool_call>"]
)
def test_length_before_the_envelope_names_a_call_drops_the_markup(cut: str) -> None:
    """Markup inside a call block is never content: a call the output cut (``length``) before its
    name is complete is dropped (an envelope that is not JSON at all is still passed through, see
    below). Where the model stopped by itself there, the block is its text: passed through."""
    ids = enc("Sure.\n\n" + cut)
    assert split_check(QWEN3, ids, reason="length") == ("Sure.", "", ())
    assert split_check(QWEN3, ids, reason="stop") == ("Sure.\n\n" + cut, "", ())


def test_length_after_arguments_but_before_close_marker() -> None:
    """Arguments complete, envelope closed, </tool_call> not yet written: the call is whole."""
    ids = enc('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n')
    for opts in (SessionOptions(), SessionOptions(complete_tool_calls=True)):
        shape_, final = parse_shape(QWEN3, ids, opts, reason="length")
        assert shape_ == ("", "", (("f", '{"a": 1}'),))
        assert final.finish_reason == "length"


# ================================================================================ malformed calls
def test_invalid_json_envelope_is_passed_through_as_content() -> None:
    ids = enc("<tool_call>not valid json</tool_call>")
    shape_, final = parse_shape(QWEN3, ids)
    assert shape_ == ("<tool_call>not valid json</tool_call>", "", ())
    assert final.finish_reason == "stop"
    split_check(QWEN3, ids)


def test_passthrough_keeps_the_surrounding_whitespace_in_place() -> None:
    """CORE BUG: content whitespace held before a malformed envelope is emitted after it."""
    ids = enc("Hi <tool_call>not valid json</tool_call> there")
    assert parse_shape(QWEN3, ids)[0] == ("Hi <tool_call>not valid json</tool_call> there", "", ())


def test_passthrough_at_the_end_is_trimmed_like_content() -> None:
    """CORE BUG (same place): passed-through text bypasses the whitespace policy, so content can
    end with whitespace."""
    ids = enc("<tool_call>\nnot json\n")
    assert parse_shape(QWEN3, ids, reason="length")[0] == ("<tool_call>\nnot json", "", ())


def test_envelope_without_a_name_is_passed_through() -> None:
    for text in (
        '<tool_call>\n{"arguments": {"a": 1}}\n</tool_call>',
        '<tool_call>\n{"name": 42, "arguments": {}}\n</tool_call>',
        "<tool_call>\n[1, 2]\n</tool_call>",
        "<tool_call>\n[]\n</tool_call>",
    ):
        assert parse_shape(QWEN3, enc(text))[0] == (text, "", ()), text


def test_envelope_without_arguments_is_not_a_call() -> None:
    """``{"name": …}`` alone names no arguments value: the block is passed through as content."""
    text = '<tool_call>\n{"name": "get_time"}\n</tool_call>'
    assert parse_shape(QWEN3, enc(text))[0] == (text, "", ())


def test_several_objects_in_one_block_are_several_calls() -> None:
    """A JSON list of call objects, or call objects one after another, inside one block."""
    expected = ("", "", (("get_weather", '{"city": "Paris"}'), ("get_time", "{}")))
    a = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    b = '{"name": "get_time", "arguments": {}}'
    for body in (f"[{a}, {b}]", f"{a}\n{b}"):
        ids = enc(f"<tool_call>\n{body}\n</tool_call>")
        assert split_check(QWEN3, ids) == expected, body


def test_text_after_the_envelope_inside_the_block_is_not_lost() -> None:
    """No lost text: words between a complete envelope and ``</tool_call>`` become content."""
    ids = enc('<tool_call>\n{"name": "get_time", "arguments": {}} and then some words\n</tool_call>')
    shape_, _ = parse_shape(QWEN3, ids)
    assert shape_[2] == (("get_time", "{}"),)
    assert "and then some words" in shape_[0]


def test_malformed_arguments_after_the_call_started_keep_what_was_streamed() -> None:
    ids = enc('<tool_call>\n{"name": "f", "arguments": {"a": 1 <oops> }}\n</tool_call>\n' + TIME)
    shape_, final = parse_shape(QWEN3, ids)
    # What follows the break inside the block is the model's text: it is shown, never lost.
    assert shape_ == ("<oops> }}", "", (("f", '{"a": 1 '), ("get_time", "{}")))
    assert final.finish_reason == "tool_calls"
    split_check(QWEN3, ids)
    # complete_tool_calls validates: the broken call is not delivered, its text as the model wrote
    # it is content (the call ends where its arguments break); the next call keeps index 0.
    opts = SessionOptions(complete_tool_calls=True)
    broken = '<tool_call>\n{"name": "f", "arguments": {"a": 1 <oops> }}'
    assert split_check(QWEN3, ids, opts) == (broken, "", (("get_time", "{}"),))


def test_unquoted_literal_streams_verbatim_and_complete_mode_rejects_it() -> None:
    """The scanner tracks structure, not literals: ``tru`` streams as written."""
    ids = enc('<tool_call>\n{"name": "f", "arguments": {"a": tru}}\n</tool_call>')
    assert parse_shape(QWEN3, ids)[0] == ("", "", (("f", '{"a": tru}'),))
    # Not delivered: the call's text is content (the block's closer after it stays markup).
    complete = SessionOptions(complete_tool_calls=True)
    want = '<tool_call>\n{"name": "f", "arguments": {"a": tru}}'
    assert split_check(QWEN3, ids, complete) == (want, "", ())


def test_close_marker_inside_an_unterminated_string_leaves_the_call_open() -> None:
    """String context wins even when the model never closes the string."""
    ids = enc('<tool_call>\n{"name": "f", "arguments": {"a": "x</tool_call>\n\nDone.')
    shape_, _ = parse_shape(QWEN3, ids)
    assert shape_ == ("", "", (("f", '{"a": "x</tool_call>\n\nDone.'),))


# ================================================================================ streaming arguments
@pytest.mark.slow  # split_check over every split of a 12K-character call
def test_long_envelope_in_one_delta_is_the_same_call() -> None:
    """A whole output in one delta is one run for the machine: an envelope far longer than the
    reader's head buffer comes out as it does id by id."""
    body = "line of the file\n" * 700  # ~12K characters of arguments
    call = '{"name": "write", "arguments": {"text": ' + json.dumps(body) + "}}"
    ids = enc("Saving.\n<tool_call>\n" + call + "\n</tool_call>")
    assert split_check(QWEN3, ids) == ("Saving.", "", (("write", json.dumps({"text": body})),))


def test_long_argument_streams_before_the_call_closes() -> None:
    body = "word " * 400
    ids = enc('<tool_call>\n{"name": "write", "arguments": {"text": "' + body + '"}}\n</tool_call>')
    close = ids.index(CALL_CLOSE)
    session = Session(QWEN3, SessionOptions())
    first_fragment_at = None
    for k in range(close):
        for d in session.feed([ids[k]]).deltas:
            if any(t.arguments for t in d.tool_calls) and first_fragment_at is None:
                first_fragment_at = k
    assert first_fragment_at is not None and first_fragment_at < 20 < close
    streamed = run(QWEN3, one_by_one(ids))
    fragments = [t.arguments for d in streamed.deltas for t in d.tool_calls]
    assert len(fragments) > 300
    assert json.loads("".join(fragments)) == {"text": body}


# ================================================================================ delivery options
TWO_CALLS = "Checking.\n\n" + WEATHER + "\n" + TIME


def test_tool_choice_none_drops_calls() -> None:
    opts = SessionOptions(tools=tools("get_weather", "get_time"), tool_choice="none")
    shape_, final = parse_shape(QWEN3, enc(TWO_CALLS), opts)
    assert shape_ == ("Checking.", "", ())
    assert final.finish_reason == "stop"


def test_tool_choice_named_keeps_stop() -> None:
    opts = SessionOptions(tools=tools("get_weather", "get_time"), tool_choice="get_weather")
    ids = enc(WEATHER)
    shape_, final = parse_shape(QWEN3, ids, opts)
    assert shape_ == ("", "", (("get_weather", '{"city": "Paris", "days": 3}'),))
    assert final.finish_reason == "stop"
    assert parse_shape(QWEN3, ids, opts, reason="length")[1].finish_reason == "length"


def test_tool_choice_required_and_auto_give_tool_calls() -> None:
    for choice in ("required", "auto"):
        opts = SessionOptions(tools=tools("get_weather", "get_time"), tool_choice=choice)
        shape_, final = parse_shape(QWEN3, enc(TWO_CALLS), opts)
        assert [name for name, _ in shape_[2]] == ["get_weather", "get_time"]
        assert final.finish_reason == "tool_calls"
    # No call made: stop stays stop, whatever tool_choice says.
    opts = SessionOptions(tools=tools("get_time"), tool_choice="required")
    assert parse_shape(QWEN3, enc("No tools needed."), opts)[1].finish_reason == "stop"


def test_length_and_abort_are_never_rewritten() -> None:
    for reason in ("length", "abort"):
        for choice in ("auto", "required"):
            opts = SessionOptions(tools=tools("get_weather", "get_time"), tool_choice=choice)
            shape_, final = parse_shape(QWEN3, enc(TWO_CALLS), opts, reason=reason)
            assert len(shape_[2]) == 2
            assert final.finish_reason == reason


def test_parallel_tool_calls_false_keeps_only_the_first() -> None:
    opts = SessionOptions(parallel_tool_calls=False)
    ids = enc(TWO_CALLS)
    assert parse_shape(QWEN3, ids, opts)[0] == (
        "Checking.",
        "",
        (("get_weather", '{"city": "Paris", "days": 3}'),),
    )
    split_check(QWEN3, ids, opts)
    # With complete_tool_calls the first *valid* call is the one kept.
    bad = '<tool_call>\n{"name": "f", "arguments": {"a": tru}}\n</tool_call>\n'
    opts = SessionOptions(parallel_tool_calls=False, complete_tool_calls=True)
    assert parse_shape(QWEN3, enc(bad + TIME), opts)[0] == (bad.split("\n</")[0], "", (("get_time", "{}"),))


def test_complete_tool_calls_delivers_each_call_whole_at_its_close() -> None:
    ids = enc(TWO_CALLS)
    opts = SessionOptions(complete_tool_calls=True)
    streamed = run(QWEN3, one_by_one(ids), opts)
    call_deltas = [(k, d) for k, feed in enumerate(streamed.per_feed) for d in no_ids(feed) if d.tool_calls]
    closes = [k for k, i in enumerate(ids) if i == CALL_CLOSE]
    # Each call is one delta, delivered when its JSON envelope closes (before </tool_call>).
    assert [d for _, d in call_deltas] == [
        Delta(tool_calls=(ToolCallDelta(0, '{"city": "Paris", "days": 3}', "ID", "get_weather"),)),
        Delta(tool_calls=(ToolCallDelta(1, "{}", "ID", "get_time"),)),
    ]
    assert [k for k, _ in call_deltas] <= closes
    check_consistent(streamed)


def test_include_reasoning_false_hides_reasoning_but_counts_it() -> None:
    ids = enc(FULL)
    opts = SessionOptions(include_reasoning=False)
    streamed = run(QWEN3, one_by_one(ids), opts)
    assert all(not d.reasoning for d in streamed.deltas)
    assert shape(streamed.message) == (
        "Let me check.",
        "",
        (("get_weather", '{"city": "Paris", "days": 3}'),),
    )
    assert streamed.final.usage.reasoning_tokens == ids.index(THINK_CLOSE)
    # The events still carry it, for clients that want them, as written (whitespace is trimmed
    # only in deltas, a delivery choice).
    assert (
        "".join(e.text for e in streamed.events if e.kind is EventKind.REASONING)
        == "\nThe user wants the weather.\n"
    )


def test_stop_token_text_is_not_content() -> None:
    for stop in (IM_END, ENDOFTEXT):
        ids = [*enc("Hello."), stop]
        streamed = run(QWEN3, [ids], matched_stop=stop)
        assert streamed.message.content == "Hello."
        assert streamed.final.usage.completion_tokens == len(ids) == 3


def test_include_stop_text_appends_the_matched_stop() -> None:
    opts = SessionOptions(include_stop_text=True)
    assert (
        run(QWEN3, [[*enc("Hello."), IM_END]], opts, matched_stop=IM_END).message.content
        == "Hello.<|im_end|>"
    )
    assert run(QWEN3, [enc("Hello.")], opts, matched_stop="END").message.content == "Hello.END"
    # Only a stop that was matched: a length finish adds nothing.
    assert run(QWEN3, [enc("Hello.")], opts, reason="length", matched_stop="END").message.content == "Hello."


def test_other_special_tokens_are_dropped() -> None:
    """Special tokens the format does not use vanish; non-special added tokens are text."""
    ids = enc("<|im_start|>A<|vision_start|>B<|fim_prefix|>C<|endoftext|>")
    assert ids[0] == 151644 and ENDOFTEXT in ids and 151659 in ids
    assert parse_shape(QWEN3, ids)[0] == ("AB<|fim_prefix|>C", "", ())


# ================================================================================ whitespace
def test_whitespace_edges_are_trimmed_and_inner_whitespace_kept() -> None:
    ids = enc("<think>\n\n  two  lines\n\n here \n\n</think>\n\n  Hello  \n\n world \n ")
    assert split_check(QWEN3, ids) == ("Hello  \n\n world", "two  lines\n\n here", ())


def test_trailing_whitespace_is_held_until_proven_inner() -> None:
    streamed = run(QWEN3, [enc("Hello"), enc(" \n"), enc("world"), enc("\n\n")])
    assert streamed.per_feed == [[Delta(content="Hello")], [], [Delta(content=" \nworld")], [], []]


# ================================================================================ text steps
def test_feed_text_gives_the_same_message_as_ids() -> None:
    text = FULL + "\n" + TIME
    expected = parse_shape(QWEN3, enc(text))[0]
    for size in (1, 3, 7, len(text)):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        assert shape(run_text(QWEN3, pieces).message) == expected


def test_feed_text_counts_the_tokens_it_is_told() -> None:
    """A text step's tokens count as reasoning when the step begins inside reasoning: with one
    step per token, usage is the same as in id mode."""
    ids = enc("<think>\nhm\n</think>\n\nHello")
    session = Session(QWEN3)
    for tid in ids:
        session.feed_text(TOKENIZER.decode([tid], skip_special_tokens=False), tokens=1)
    last = session.finish()
    assert last.final is not None
    assert last.final.usage == parse(QWEN3, SessionOptions(), ids)[1].usage
    assert last.final.usage == Usage(completion_tokens=len(ids), reasoning_tokens=ids.index(THINK_CLOSE))
    assert shape(last.final.message) == ("Hello", "hm", ())


def test_feed_text_after_ids_treats_marker_text_as_text() -> None:
    session = Session(QWEN3)
    session.feed(enc("A "))
    session.feed_text("<tool_call> B")
    last = session.finish()
    assert last.final is not None and last.final.message.content == "A <tool_call> B"


# ================================================================================ usage and events
@pytest.mark.parametrize(
    "text",
    [
        FULL,
        "Hello.",
        TWO_CALLS + "\n",
        "<think>\nunfinished",
    ],
)
@pytest.mark.parametrize("eos", [False, True])
def test_event_token_counts_sum_to_completion_tokens(text: str, eos: bool) -> None:
    """Tokens that produce no text (``<|im_end|>``, a closing marker after the call ended, trailing
    whitespace) are carried by the next event, at the latest by the final ``END`` event."""
    ids = enc(text) + ([IM_END] if eos else [])
    streamed = run(QWEN3, one_by_one(ids))
    assert sum(e.tokens for e in streamed.events) == streamed.final.usage.completion_tokens == len(ids)


def test_event_vocabulary_for_a_full_message() -> None:
    ids = enc(FULL)
    events = run(QWEN3, [ids]).events
    kinds = [e.kind for e in events]
    assert kinds[0] is EventKind.REASONING_START
    assert kinds.index(EventKind.REASONING_END) < kinds.index(EventKind.CONTENT)
    start = kinds.index(EventKind.TOOL_CALL_START)
    assert events[start].text == "get_weather" and events[start].tool_index == 0
    assert kinds[-2:] == [EventKind.TOOL_CALL_END, EventKind.END]
    assert kinds.count(EventKind.END) == 1
    assert (
        "".join(e.text for e in events if e.kind is EventKind.TOOL_ARGUMENTS)
        == '{"city": "Paris", "days": 3}'
    )
    assert all(e.tool_index == -1 for e in events if e.kind in (EventKind.CONTENT, EventKind.REASONING))


# ================================================================================ errors
def test_token_id_outside_the_vocabulary() -> None:
    session = Session(QWEN3)
    with pytest.raises(InvalidInput):
        session.feed([QWEN3.vocab_size])
    with pytest.raises(InvalidInput):
        session.feed([-1])
    with pytest.raises(InvalidInput):
        Session(QWEN3, SessionOptions(prompt_token_ids=(10**9,)))


def test_feed_after_finish_is_wrong_state() -> None:
    session = Session(QWEN3)
    session.feed(enc("Hi"))
    session.finish()
    with pytest.raises(WrongState):
        session.feed(enc("more"))
    with pytest.raises(WrongState):
        session.feed_text("more")
    with pytest.raises(WrongState):
        session.finish()


def test_tool_choice_naming_an_unknown_tool() -> None:
    with pytest.raises(InvalidInput):
        Session(QWEN3, SessionOptions(tools=tools("get_time"), tool_choice="get_weather"))
    with pytest.raises(InvalidInput):
        Session(QWEN3, SessionOptions(tool_choice="anything"))


def test_bad_finish_reason_and_duplicate_tools() -> None:
    with pytest.raises(InvalidInput):
        Session(QWEN3).finish("eos")
    with pytest.raises(InvalidInput):
        Session(QWEN3, SessionOptions(tools=tools("f", "f")))


def test_parse_equals_streaming_accumulation() -> None:
    ids = enc(FULL)
    message, final, deltas = parse(QWEN3, SessionOptions(), ids)
    assert accumulate(deltas) == message == final.message
