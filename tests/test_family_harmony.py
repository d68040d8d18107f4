"""gpt-oss (Harmony), driven with the real o200k_harmony vocabulary (quicktok-v1, converted).

Token ids are built the way the model emits them: ``enc`` turns every Harmony marker text into its
special id; ``plain`` spells marker texts as ordinary tokens (look-alikes that must stay text).
Every test asserts exact outputs; split invariance compares random chunkings with ``parse``.
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import Shape, check_consistent, chunks, parsed, run, run_text, shape, tools
from family_support import enc, plain, prompted, split_check
from parsetier.messages import SessionOptions
from parsetier.models import Model

GPT_OSS: Model = marker_tokenizers.registry().get("gpt-oss")
CALL, RETURN, END, START, CHANNEL, MESSAGE = 200012, 200002, 200007, 200006, 200005, 200008


def analysis(text: str) -> str:
    return f"<|channel|>analysis<|message|>{text}<|end|><|start|>assistant"


def call_in_role(name: str, args: str, constrain: str = " <|constrain|>json") -> str:
    return f" to=functions.{name}<|channel|>commentary{constrain}<|message|>{args}"


def call_in_channel(name: str, args: str, constrain: str = " <|constrain|>json") -> str:
    return f"<|channel|>commentary to=functions.{name}{constrain}<|message|>{args}"


def final(text: str) -> str:
    return f"<|channel|>final<|message|>{text}"


# ================================================================================ messages → results
REASONING = "The user asks for the weather in Paris. I should call get_weather."

CASES: list[tuple[str, str, Shape]] = [
    (
        "role recipient, constrain token",
        analysis(REASONING) + call_in_role("get_weather", '{"city": "Paris"}'),
        ("", REASONING, (("get_weather", '{"city": "Paris"}'),)),
    ),
    (
        "channel recipient, constrain adjacent",
        call_in_channel("get_weather", '{"latitude":48.8566}', "<|constrain|>json"),
        ("", "", (("get_weather", '{"latitude":48.8566}'),)),
    ),
    (
        "content type as plain text",
        call_in_role("get_time", "{}", " json"),
        ("", "", (("get_time", "{}"),)),
    ),
    (
        "no content type, closed by <|end|>",
        call_in_role("get_weather", '{"location": "SF"}', "") + "<|end|>",
        ("", "", (("get_weather", '{"location": "SF"}'),)),
    ),
    (
        "recipient on the analysis channel",
        '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}',
        ("", "", (("special_function", '{"arg1": 1}'),)),
    ),
    (
        "preamble then call",
        "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant"
        + call_in_role("search", '{"query": "x"}'),
        ("Let me check.", "", (("search", '{"query": "x"}'),)),
    ),
    (
        "analysis then final",
        analysis("A greeting.") + final("Hello! How can I help?"),
        ("Hello! How can I help?", "A greeting.", ()),
    ),
    (
        "final only, multiline",
        final("Line 1\n\nLine 2"),
        ("Line 1\n\nLine 2", "", ()),
    ),
    (
        "built-in python recipient is not a function call",
        analysis("run code") + '<|channel|>commentary to=python <|constrain|>code<|message|>print("hi")',
        ("", "run code", ()),
    ),
    (
        "unknown channel is dropped",
        "<|channel|>comment<|message|>some text<|end|>",
        ("", "", ()),
    ),
    (
        "garbage header before a good message",
        "<|channel|>commentary?commentary?noise<|end|><|start|>assistant"
        "<|channel|>analysis<|message|>Need data.",
        ("", "Need data.", ()),
    ),
    (
        "stray to=assistant header",
        "<|channel|>commentary to=assistant<|channel|>analysis<|message|>thinking<|end|><|start|>assistant"
        + final("Hi"),
        ("Hi", "thinking", ()),
    ),
    (
        "final text that looks like a call stays content",
        final('{"name": "get_weather", "arguments": {"city": "Paris"}}'),
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', "", ()),
    ),
]


@pytest.mark.parametrize(("text", "want"), [(t, w) for _, t, w in CASES], ids=[c[0] for c in CASES])
def test_messages(text: str, want: Shape) -> None:
    ids = enc(GPT_OSS, text)
    assert split_check(GPT_OSS, ids) == want


def test_names_never_carry_header_syntax() -> None:
    """Every header spelling yields the bare function name, whatever follows the recipient."""
    spellings = [
        call_in_role("get_weather", "{}"),
        call_in_role("get_weather", "{}", "<|constrain|>json"),
        call_in_role("get_weather", "{}", " json"),
        call_in_role("get_weather", "{}", ""),
        call_in_channel("get_weather", "{}"),
        call_in_channel("get_weather", "{}", "<|constrain|>json"),
        call_in_channel("get_weather", "{}", ""),
        "<|channel|>commentary to=functions.get_weather<|message|>{}",
    ]
    for text in spellings:
        ids = enc(GPT_OSS, analysis("r") + text)
        assert parsed(GPT_OSS, ids) == ("", "r", (("get_weather", "{}"),)), text


# ================================================================================ markers as text
def test_marker_lookalikes_in_arguments_and_reasoning_stay_text() -> None:
    reasoning = "I must not write <|call|> or <|channel|>final myself."
    args = '{"content": "A call ends with <|call|>; <|start|>assistant<|channel|>commentary<|message|>{}"}'
    ids = enc(GPT_OSS, "<|channel|>analysis<|message|>") + plain(GPT_OSS, reasoning)
    ids += enc(GPT_OSS, "<|end|><|start|>assistant") + enc(GPT_OSS, call_in_role("write_file", ""))
    ids += plain(GPT_OSS, args)
    want = ("", reasoning, (("write_file", args),))
    assert split_check(GPT_OSS, ids) == want


def test_marker_tokens_inside_a_json_string_are_string_content() -> None:
    """The real special tokens written inside a string argument: the JSON scanner keeps them."""
    args = '{"s": "a<|call|>b<|end|><|start|>c", "n": 1}'
    ids = enc(GPT_OSS, call_in_role("f", args) + "<|call|>")
    assert CALL in ids[:-1]
    assert split_check(GPT_OSS, ids) == ("", "", (("f", args),))


# ================================================================================ calls
def test_sequential_calls_get_consecutive_indices() -> None:
    """Harmony has no parallel wrapper; consecutive call messages (stop not applied) are calls 0, 1."""
    text = (
        analysis("two lookups")
        + call_in_role("get_weather", '{"city": "Paris"}') + "<|call|><|start|>assistant"
        + call_in_channel("get_time", '{"tz": "UTC"}') + "<|call|><|start|>assistant"
        + final("Done.")
    )  # fmt: skip
    ids = enc(GPT_OSS, text)
    streamed = run(GPT_OSS, [ids], SessionOptions(tools=tools("get_weather", "get_time")))
    check_consistent(streamed)
    message = streamed.final.message
    assert shape(message) == (
        "Done.",
        "two lookups",
        (("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "UTC"}')),
    )
    assert streamed.final.finish_reason == "tool_calls"
    assert [tc.index for d in streamed.deltas for tc in d.tool_calls if tc.id] == [0, 1]
    split_check(GPT_OSS, ids)


def test_typed_values_are_kept_verbatim() -> None:
    args = (
        '{"hour": 7, "volume": 0.75, "big": -1.5e-3, "repeat": true, "label": null, "tags": ["a", {"b": []}]}'
    )
    ids = enc(GPT_OSS, call_in_role("set_alarm", args))
    ((name, raw),) = parsed(GPT_OSS, ids)[2]
    assert (name, raw) == ("set_alarm", args)
    assert json.loads(raw)["big"] == -1.5e-3
    split_check(GPT_OSS, ids)


def test_arguments_stream_before_the_call_ends() -> None:
    ids = enc(GPT_OSS, call_in_role("write_file", '{"path": "a.txt", "content": "' + "x" * 200 + '"}'))
    streamed = run(GPT_OSS, list(chunks(ids, [3])))
    fragments = [tc.arguments for d in streamed.deltas for tc in d.tool_calls if tc.arguments]
    assert len(fragments) > 5
    assert "".join(fragments) == streamed.final.message.tool_calls[0].arguments


def test_unicode_split_inside_a_character() -> None:
    text = analysis("用户想知道东京的天气 🌦️") + call_in_role("search", '{"q": "東京 ☀️🌧️ — «x»"}')
    ids = enc(GPT_OSS, text)
    assert split_check(GPT_OSS, ids) == (
        "",
        "用户想知道东京的天气 🌦️",
        (("search", '{"q": "東京 ☀️🌧️ — «x»"}'),),
    )


# ================================================================================ truncation
def test_truncated_inside_arguments() -> None:
    """Streaming keeps what was generated (finish_reason says length); complete mode drops the call."""
    ids = enc(GPT_OSS, analysis("r") + call_in_role("get_weather", '{"city": "Paris", "unit'))
    assert parsed(GPT_OSS, ids, reason="length") == ("", "r", (("get_weather", '{"city": "Paris", "unit'),))
    complete = SessionOptions(complete_tool_calls=True)
    assert split_check(GPT_OSS, ids, complete, "length") == ("", "r", ())


def test_truncated_inside_reasoning_and_header() -> None:
    in_reasoning = enc(GPT_OSS, "<|channel|>analysis<|message|>so I will need")
    assert parsed(GPT_OSS, in_reasoning, reason="length") == ("", "so I will need", ())
    header = analysis("done") + " to=functions.get_weather<|channel|>commentary <|constrain|>json"
    assert parsed(GPT_OSS, enc(GPT_OSS, header), reason="length") == ("", "done", ())
    in_final = enc(GPT_OSS, analysis("done") + final("I'm in the middle of"))
    assert parsed(GPT_OSS, in_final, reason="length") == ("I'm in the middle of", "done", ())


def test_stop_token_ids_are_never_text() -> None:
    ids = enc(GPT_OSS, final("Bye.") + "<|return|>")
    assert ids[-1] == RETURN
    assert parsed(GPT_OSS, ids) == ("Bye.", "", ())
    assert parsed(GPT_OSS, enc(GPT_OSS, call_in_role("f", "{}") + "<|call|>")) == ("", "", (("f", "{}"),))


# ================================================================================ reasoning toggles
def test_reasoning_follows_channels_not_the_thinking_switch() -> None:
    ids = enc(GPT_OSS, analysis("think") + final("answer"))
    want = ("answer", "think", ())
    for thinking in (None, True, False):
        assert parsed(GPT_OSS, ids, SessionOptions(thinking=thinking)) == want
    prompt = prompted(GPT_OSS, "<|start|>user<|message|>hi<|end|><|start|>assistant")
    assert parsed(GPT_OSS, ids, prompt) == want


def test_include_reasoning_false_hides_analysis() -> None:
    ids = enc(GPT_OSS, analysis("secret") + call_in_role("f", '{"a": 1}'))
    streamed = run(GPT_OSS, [[i] for i in ids], SessionOptions(include_reasoning=False))
    check_consistent(streamed)
    assert shape(streamed.final.message) == ("", "", (("f", '{"a": 1}'),))
    assert streamed.final.usage.reasoning_tokens > 0


# ================================================================================ text steps
def test_text_steps_match_token_steps() -> None:
    text = analysis("r") + "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant"
    text += call_in_channel("search", '{"q": "v"}')
    want = parsed(GPT_OSS, enc(GPT_OSS, text))
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
    assert (
        shape(run_text(GPT_OSS, pieces).final.message)
        == want
        == ("Checking.", "r", (("search", '{"q": "v"}'),))
    )
