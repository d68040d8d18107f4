"""Kimi K2 / K2.6 (section tokens, ``functions.NAME:IDX`` ids) and Kimi K3 (XTML), token-id mode.

No Kimi tokenizer is on PyPI: the ``kimi-k2`` / ``kimi-k3`` marker tokenizers carry the real marker
tokens at their real ids over a one-token-per-byte vocabulary, so these tests drive the formats
exactly as a server would (ids in, deltas out), with markers as single special tokens and every
other character as ordinary tokens. ``plain`` spells a marker as ordinary bytes (a look-alike).
Every test asserts exact outputs.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import marker_tokenizers
from engine_helpers import shape
from family_support import call_ids, enc, plain, prompted, split_check
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model
from testkit.format_renderers import kimi_k2_call, kimi_k3_argument, kimi_k3_call

_REGISTRY = marker_tokenizers.registry()
K2: Model = _REGISTRY.get("kimi-k2")
K26: Model = _REGISTRY.get("kimi-k2.6")
K3: Model = _REGISTRY.get("kimi-k3")


# ------------------------------------------------------------------------------------------ Kimi K2
K26_PROMPT = "<|im_assistant|>assistant<|im_middle|><think>"
K26_PROMPT_OFF = "<|im_assistant|>assistant<|im_middle|><think></think>"


K2_PARALLEL = (
    "Two lookups.</think>Checking.<|tool_calls_section_begin|>"
    + kimi_k2_call("functions.get_weather:0", '{"city": "Paris", "days": 3}')
    + kimi_k2_call("functions.get_news:1", '{"topic": "tech", "tags": ["a", "b"], "urgent": true}')
    + "<|tool_calls_section_end|>"
)


def test_k2_parallel_calls_keep_the_written_ids() -> None:
    message, final, _ = parse(K26, prompted(K26, K26_PROMPT), enc(K26, K2_PARALLEL))
    assert shape(message) == (
        "Checking.",
        "Two lookups.",
        (
            ("get_weather", '{"city": "Paris", "days": 3}'),
            ("get_news", '{"topic": "tech", "tags": ["a", "b"], "urgent": true}'),
        ),
    )
    assert call_ids(message) == ["functions.get_weather:0", "functions.get_news:1"]
    assert final.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("written", "call_id", "name"),
    [
        ("functions.get_weather:7", "functions.get_weather:7", "get_weather"),  # global idx kept
        ("get_weather:0", "get_weather:0", "get_weather"),  # no functions. prefix
        ("functions.weather.get:2", "functions.weather.get:2", "weather.get"),  # dotted name
        ("functions.get-time:0 ", "functions.get-time:0", "get-time"),  # space before the marker
        ("functions.ping", "functions.ping", "ping"),  # no index
    ],
)
def test_k2_id_is_what_the_model_wrote(written: str, call_id: str, name: str) -> None:
    text = "<|tool_calls_section_begin|>" + kimi_k2_call(written, "{}") + "<|tool_calls_section_end|>"
    message, _, _ = parse(K2, SessionOptions(), enc(K2, text))
    assert shape(message) == ("", "", ((name, "{}"),))
    assert call_ids(message) == [call_id]


def test_k2_marker_token_inside_a_json_string_is_text() -> None:
    args = '{"path": "end.txt", "content": "stop at <|tool_call_end|> and <|tool_calls_section_end|> please"}'
    text = (
        "<|tool_calls_section_begin|>"
        + kimi_k2_call("functions.write_file:0", args)
        + "<|tool_calls_section_end|>"
    )
    ids = enc(K2, text)
    assert ids.count(K2.tokenizer.token_to_id("<|tool_call_end|>")) == 2, "the string holds the marker token"
    message, _, _ = parse(K2, SessionOptions(), ids)
    assert shape(message) == ("", "", (("write_file", args),))


def test_k2_text_around_the_section_is_content_and_noise_inside_is_dropped() -> None:
    """The section's own text outside its calls is markup (``markup = true``: vLLM's reading, a
    documented exception to conservation); text around the section is content."""
    text = (
        "Before. <|tool_calls_section_begin|> noise "
        + kimi_k2_call("functions.get_weather:0", '{"city": "Tokyo"}')
        + " more noise <|tool_calls_section_end|> After."
    )
    want = ("Before.  After.", "", (("get_weather", '{"city": "Tokyo"}'),))
    assert split_check(K2, enc(K2, text)) == want


def test_k2_look_alike_markers_in_content_stay_text() -> None:
    text = "Write <|tool_calls_section_begin|> to start a section."
    message, _, _ = parse(K2, SessionOptions(), plain(K2, text))
    assert shape(message) == (text, "", ())


@pytest.mark.parametrize(
    ("model", "prompt", "thinking", "expected"),
    [
        (K26, K26_PROMPT, None, ("Answer.", "Thought.", ())),  # the prompt opened <think>
        (K26, "", None, ("Answer.", "Thought.", ())),  # K2.6's default: thinking on
        (K26, "", True, ("Answer.", "Thought.", ())),
        (K2, "", True, ("Answer.", "Thought.", ())),  # the request turns thinking on
    ],
)
def test_k2_reasoning_on(model: Model, prompt: str, thinking: bool | None, expected: tuple[Any, ...]) -> None:
    message, _, _ = parse(
        model, prompted(model, prompt, thinking=thinking), enc(model, "Thought.</think>Answer.")
    )
    assert shape(message) == expected


@pytest.mark.parametrize(
    ("model", "prompt", "thinking"),
    [
        (K26, K26_PROMPT_OFF, None),  # the prompt closed an empty <think></think>
        (K26, K26_PROMPT_OFF, True),  # the prompt wins over the switch
        (K26, "", False),
        (K2, "<|im_assistant|>assistant<|im_middle|>", None),  # K2-Instruct: no reasoning
    ],
)
def test_k2_reasoning_off(model: Model, prompt: str, thinking: bool | None) -> None:
    message, _, _ = parse(model, prompted(model, prompt, thinking=thinking), enc(model, "Just text."))
    assert shape(message) == ("Just text.", "", ())


def test_k2_model_opens_think_itself_and_a_stray_close_is_dropped() -> None:
    message, _, _ = parse(K2, SessionOptions(), enc(K2, "<think>Hmm.</think>Yes."))
    assert shape(message) == ("Yes.", "Hmm.", ())
    message, _, _ = parse(K26, prompted(K26, K26_PROMPT_OFF), enc(K26, "Yes.</think> Sure."))
    assert shape(message) == ("Yes. Sure.", "", ())


def test_k2_truncation() -> None:
    cut_in_second = enc(K26, K2_PARALLEL[: K2_PARALLEL.index('{"topic"') + 4])  # ids of a prefix: a prefix
    options = prompted(K26, K26_PROMPT)
    # Complete mode: only the finished first call is delivered.
    message, final, _ = parse(
        K26, prompted(K26, K26_PROMPT, complete_tool_calls=True), cut_in_second, "length"
    )
    assert shape(message) == ("Checking.", "Two lookups.", (("get_weather", '{"city": "Paris", "days": 3}'),))
    assert final.finish_reason == "length"
    # Streaming mode: the started call was already streamed; its arguments stay unfinished.
    message, final, _ = parse(K26, options, cut_in_second, "length")
    assert shape(message) == (
        "Checking.",
        "Two lookups.",
        (("get_weather", '{"city": "Paris", "days": 3}'), ("get_news", '{"to')),
    )
    # Cut inside reasoning: the text is reasoning.
    message, _, _ = parse(K26, options, enc(K26, "The user wants"), "length")
    assert shape(message) == ("", "The user wants", ())


# ------------------------------------------------------------------------------------------ Kimi K3
K3_PROMPT = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
K3_PROMPT_OFF = '<|open|>message role="assistant"<|sep|><|open|>response<|sep|>'


K3_FULL = (
    "Two cities.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
    "<|open|>tools<|sep|>"
    + kimi_k3_call(
        "get_weather", 1, kimi_k3_argument("city", "Paris"), kimi_k3_argument("days", "3", "number")
    )
    + kimi_k3_call(
        "create_event",
        2,
        kimi_k3_argument("title", 'Stand-up "daily"\n'),
        kimi_k3_argument("all_day", "false", "boolean"),
        kimi_k3_argument("reminder", "null", "null"),
        kimi_k3_argument("tags", '["a", "b"]', "array"),
        kimi_k3_argument("where", '{"room": 4, "geo": [47.3, 8.5]}', "object"),
    )
    + "<|close|>tools<|sep|><|close|>message<|sep|>"
)
K3_FULL_CALLS = (
    ("get_weather", '{"city": "Paris", "days": 3}'),
    (
        "create_event",
        '{"title": "Stand-up \\"daily\\"\\n", "all_day": false, "reminder": null, "tags": ["a", "b"], '
        '"where": {"room": 4, "geo": [47.3, 8.5]}}',
    ),
)


def test_k3_full_message_typed_values_and_raw_strings() -> None:
    message, final, _ = parse(K3, prompted(K3, K3_PROMPT), enc(K3, K3_FULL))
    assert shape(message) == ("Checking.", "Two cities.", K3_FULL_CALLS)
    assert final.finish_reason == "tool_calls"
    assert all(c.id.startswith("chatcmpl-tool-") for c in message.tool_calls), "K3's index is no id"


def test_k3_attribute_escapes_and_order() -> None:
    text = (
        "<|close|>think<|sep|><|open|>tools<|sep|>"
        '<|open|>call index="1" tool="save&amp;go"<|sep|>'
        '<|open|>argument type="number" key="q&amp;a"<|sep|>1.5<|close|>argument<|sep|>'
        '<|open|>argument key="say &quot;hi&quot; &#38; &#x41;"<|sep|>fish & chips<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|>"
    )
    message, _, _ = parse(K3, prompted(K3, K3_PROMPT), enc(K3, text))
    assert shape(message) == ("", "", (("save&go", '{"q&a": 1.5, "say \\"hi\\" & A": "fish & chips"}'),))


def test_k3_untyped_argument_follows_the_tool_schema() -> None:
    tool = Tool("f", {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"}}})
    text = "<|open|>tools<|sep|>" + kimi_k3_call(
        "f", 1, kimi_k3_argument("n", "42", None), kimi_k3_argument("s", "42", None)
    )
    message, _, _ = parse(
        K3, prompted(K3, K3_PROMPT_OFF, tools=(tool,)), enc(K3, text + "<|close|>tools<|sep|>")
    )
    assert shape(message) == ("", "", (("f", '{"n": 42, "s": "42"}'),))


def test_k3_marker_text_in_a_value_is_text_and_values_are_not_trimmed() -> None:
    head = "<|close|>response<|sep|><|open|>tools<|sep|>" + '<|open|>call tool="write_file" index="1"<|sep|>'
    head += '<|open|>argument key="content" type="string"<|sep|>'
    body = "\n<|close|>argument<|sep|> is how args end\n"
    tail = "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
    ids = enc(K3, head) + plain(K3, body) + enc(K3, tail)
    message, _, _ = parse(K3, prompted(K3, K3_PROMPT_OFF), ids)
    assert shape(message) == (
        "",
        "",
        (("write_file", '{"content": "\\n<|close|>argument<|sep|> is how args end\\n"}'),),
    )


@pytest.mark.parametrize(
    ("prompt", "thinking", "expected"),
    [
        (K3_PROMPT, None, ("answer", "step", ())),
        (K3_PROMPT, False, ("answer", "step", ())),  # the prompt wins over the switch
        ("", None, ("answer", "step", ())),  # K3's default: the think element is open
        ("", True, ("answer", "step", ())),
    ],
)
def test_k3_starts_in_think(prompt: str, thinking: bool | None, expected: tuple[Any, ...]) -> None:
    text = "step<|close|>think<|sep|><|open|>response<|sep|>answer<|close|>response<|sep|>"
    message, _, _ = parse(
        K3, prompted(K3, prompt, thinking=thinking), enc(K3, text + "<|close|>message<|sep|>")
    )
    assert shape(message) == expected


@pytest.mark.parametrize(("prompt", "thinking"), [(K3_PROMPT_OFF, None), (K3_PROMPT_OFF, True), ("", False)])
def test_k3_starts_in_response(prompt: str, thinking: bool | None) -> None:
    text = "Hello!<|close|>response<|sep|><|close|>message<|sep|>"
    message, _, _ = parse(K3, prompted(K3, prompt, thinking=thinking), enc(K3, text))
    assert shape(message) == ("Hello!", "", ())


def test_k3_skipped_think_element_and_text_after_the_message() -> None:
    text = "<|open|>response<|sep|>Hello world<|close|>response<|sep|><|close|>message<|sep|>trailing"
    message, _, _ = parse(K3, prompted(K3, K3_PROMPT), enc(K3, text))
    assert shape(message) == ("Hello world", "", ())


def test_k3_truncation() -> None:
    cut = enc(K3, K3_FULL[: K3_FULL.index("Stand-up") + 5])  # inside the second call's first argument
    message, _, _ = parse(K3, prompted(K3, K3_PROMPT, complete_tool_calls=True), cut, "length")
    assert shape(message) == ("Checking.", "Two cities.", K3_FULL_CALLS[:1])
    message, _, _ = parse(K3, prompted(K3, K3_PROMPT), enc(K3, "The user wants"), "length")
    assert shape(message) == ("", "The user wants", ())
    head_only = enc(K3, '<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="calc" index="1"')
    for complete in (False, True):
        message, _, _ = parse(
            K3, prompted(K3, K3_PROMPT_OFF, complete_tool_calls=complete), head_only, "length"
        )
        assert shape(message) == ("", "", ())


# ------------------------------------------------------------------------------------------ both
CASES = [
    (K26, K26_PROMPT, K2_PARALLEL),
    (K2, "", "Sure. " + K2_PARALLEL.split("</think>")[1] + " Done."),
    (K3, K3_PROMPT, K3_FULL),
]


@pytest.mark.parametrize(("model", "prompt", "text"), CASES, ids=["k2.6", "k2", "k3"])
@pytest.mark.parametrize("complete", [False, True])
def test_split_invariance(model: Model, prompt: str, text: str, complete: bool) -> None:
    """K2 call ids are the model's own: ``split_check`` also holds them equal under every split."""
    options = prompted(model, prompt, complete_tool_calls=complete)
    assert split_check(model, enc(model, text), options)[2], "the case makes calls"


def test_unescape_option_is_validated() -> None:
    from parsetier.engine.grammar import GrammarError, grammar_from_dict

    spec = {
        "name": "x",
        "initial": "a",
        "terminals": {"sep": "|"},
        "states": {"a": {"kind": "capture", "unescape": "html", "on": {"sep": "a"}}},
    }
    with pytest.raises(GrammarError, match="unescape 'html'"):
        grammar_from_dict(spec, "x.toml")
    spec["states"]["a"]["unescape"] = "xml"  # type: ignore[index]
    assert grammar_from_dict(spec, "x.toml").states["a"].unescape == "xml"


def test_k3_closers_as_their_tokens_inside_a_value_are_value_text() -> None:
    """Argument bodies are raw text, so a closer written inside one is the very tokens of the real
    closer: it ends the value only where the message's structure goes on after it."""
    value = "see <|close|>argument<|sep|> and <|close|>call<|sep|> or <|close|>message<|sep|> inside"
    text = "<|open|>tools<|sep|>" + kimi_k3_call(
        "write_file", 1, kimi_k3_argument("content", value), kimi_k3_argument("path", "a")
    )
    ids = enc(K3, text + "<|close|>tools<|sep|><|close|>message<|sep|>")
    want = ("", "", (("write_file", json.dumps({"content": value, "path": "a"})),))
    assert split_check(K3, ids, prompted(K3, K3_PROMPT_OFF)) == want
    # A value that lost its closer is still closed by a structural </call>.
    lost = '<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="s"<|sep|>x'
    ids = enc(K3, lost + "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>")
    assert split_check(K3, ids, prompted(K3, K3_PROMPT_OFF)) == ("", "", (("f", '{"s": "x"}'),))


def test_k3_a_closer_followed_by_the_next_argument_inside_a_value_is_structure() -> None:
    """What cannot round-trip: ``x<|close|>argument<|sep|><|open|>argument key=…`` inside a value is
    exactly a value that ended and the next argument, and is parsed as the structure."""
    value = 'x<|close|>argument<|sep|><|open|>argument key="k2"<|sep|>y'
    text = (
        "<|open|>tools<|sep|>" + kimi_k3_call("f", 1, kimi_k3_argument("s", value)) + "<|close|>tools<|sep|>"
    )
    assert split_check(K3, enc(K3, text), prompted(K3, K3_PROMPT_OFF))[2] == (("f", '{"s": "x", "k2": "y"}'),)


@pytest.mark.parametrize("complete", [False, True])
def test_k2_a_repeated_written_id_names_one_call_only(complete: bool) -> None:
    """The model wrote one id for two calls: the first keeps it, the second gets the derived id
    (ids stay unique in the message, and the same under every split)."""
    text = (
        "</think><|tool_calls_section_begin|>"
        + kimi_k2_call("functions.get_weather:0", '{"city": "Paris"}')
        + kimi_k2_call("functions.get_weather:0", '{"city": "Rome"}')
        + "<|tool_calls_section_end|>"
    )
    options = dataclasses.replace(prompted(K26, K26_PROMPT), complete_tool_calls=complete)
    ids = enc(K26, text)
    split_check(K26, ids, options)
    message, _, _ = parse(K26, options, ids)
    written = call_ids(message)
    assert len(message.tool_calls) == 2 and written[0] == "functions.get_weather:0"
    assert written[1].startswith("chatcmpl-tool-")
