"""Gemma 4 (``<|channel>thought`` reasoning, ``<|tool_call>call:NAME{…}`` object notation), token-id mode.

No Gemma 4 tokenizer is on PyPI: the ``gemma-4`` marker tokenizer carries the real marker tokens
at their real ids over a one-token-per-byte vocabulary, so these tests drive the format as a
server would (ids in, deltas out). ``plain`` spells a marker as ordinary bytes (a look-alike).
Every test asserts exact outputs; arguments are compared as the exact JSON text the reader writes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import marker_tokenizers
from engine_helpers import parsed, shape
from family_support import enc, plain, prompted, split_check
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions
from parsetier.models import Model

GEMMA: Model = marker_tokenizers.registry().get("gemma-4")
PROMPT_OFF = "<|turn>model\n<|channel>thought\n<channel|>"
PROMPT_ON = "<|turn>model\n"
Q = '<|"|>'


def opts(prompt: str = PROMPT_OFF, **kw: Any) -> SessionOptions:
    """Gemma 4 options; by default the generation prompt closed an empty thought (thinking off)."""
    return prompted(GEMMA, prompt, **kw)


def call(name: str, body: str) -> str:
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


def test_single_call() -> None:
    ids = enc(GEMMA, call("get_weather", f"city:{Q}Paris{Q},unit:{Q}c{Q}"))
    assert parsed(GEMMA, ids, opts()) == ("", "", (("get_weather", '{"city":"Paris","unit":"c"}'),))


def test_typed_values_keys_with_spaces_and_nesting() -> None:
    body = (
        f"flag:false,key with space:1.5e-05,none:null,n:-3,big:1e+21,"
        f"obj:{{a:[1,{Q}t{Q}],B:{{deep:[[{{x:0}}]]}}}},s:{Q}x,y}} {Q}"
    )
    (content, reasoning, calls) = parsed(GEMMA, enc(GEMMA, call("record", body)), opts())
    assert (content, reasoning) == ("", "")
    assert calls == (
        (
            "record",
            '{"flag":false,"key with space":1.5e-05,"none":null,"n":-3,"big":1e+21,'
            '"obj":{"a":[1,"t"],"B":{"deep":[[{"x":0}]]}},"s":"x,y} "}',
        ),
    )
    assert json.loads(calls[0][1])["key with space"] == 1.5e-05


def test_strings_are_raw_text() -> None:
    text = 'def main():\n\tprint("hi {name}")\n\treturn {"ok": True}\n'
    ids = enc(GEMMA, call("write_file", f"content:{Q}{text}{Q},path:{Q}C:\\Users\\me{Q}"))
    ((name, args),) = parsed(GEMMA, ids, opts())[2]
    assert name == "write_file"
    assert json.loads(args) == {"content": text, "path": "C:\\Users\\me"}
    assert args == json.dumps(
        {"content": text, "path": "C:\\Users\\me"}, ensure_ascii=False, separators=(",", ":")
    )


def test_marker_tokens_inside_a_string_are_text() -> None:
    inner = "Wrap calls as <|tool_call>call:f{}<tool_call|> and close thoughts with <channel|>."
    ids = enc(GEMMA, call("echo", f"text:{Q}{inner}{Q}"))
    assert ids.count(GEMMA.tokenizer.token_to_id("<tool_call|>")) == 2, "the string holds the marker token"
    assert parsed(GEMMA, ids, opts()) == (
        "",
        "",
        (("echo", json.dumps({"text": inner}, separators=(",", ":"))),),
    )


def test_look_alike_markers_in_content_stay_text() -> None:
    text = "Use <|tool_call>call:f{} to call."
    assert parsed(GEMMA, plain(GEMMA, text), opts()) == (text, "", ())


def test_parallel_calls_and_text_around() -> None:
    text = (
        "Before "
        + call("get_time", "")
        + call("get_weather", f"city:{Q}Oslo{Q},days:2")
        + call("weather.get-v2", f"tags:[{Q}a{Q},{Q}b{Q}]")
        + " after"
    )
    message, final, _ = parse(GEMMA, opts(), enc(GEMMA, text))
    assert shape(message) == (
        "Before  after",
        "",
        (
            ("get_time", "{}"),
            ("get_weather", '{"city":"Oslo","days":2}'),
            ("weather.get-v2", '{"tags":["a","b"]}'),
        ),
    )
    assert final.finish_reason == "tool_calls"
    assert len({c.id for c in message.tool_calls}) == 3


def test_call_without_arguments_object_is_not_a_call() -> None:
    """No call; the block is the model's text, passed through as content (docs/service.md,
    "Malformed model output")."""
    text = "<|tool_call>call:bad_func no brace<tool_call|>"
    assert parsed(GEMMA, enc(GEMMA, text), opts()) == (text, "", ())


@pytest.mark.parametrize(
    ("prompt", "thinking", "text", "expected"),
    [
        # thinking on: the model opens the thought channel itself
        (
            PROMPT_ON,
            True,
            "<|channel>thought\nLine1\nLine2\n<channel|>Answer",
            ("Answer", "Line1\nLine2", ()),
        ),
        (PROMPT_ON, None, "<|channel>thought\nHm.<channel|>Answer", ("Answer", "Hm.", ())),
        # thinking off: the prompt closed an empty thought
        (PROMPT_OFF, None, "Answer", ("Answer", "", ())),
        (PROMPT_OFF, True, "Answer", ("Answer", "", ())),
        ("", False, "Answer", ("Answer", "", ())),
        # a prompt that prefills the open channel starts in reasoning
        ("<|turn>model\n<|channel>thought\n", None, "Hm.<channel|>Answer", ("Answer", "Hm.", ())),
        # a stray channel end is dropped
        (PROMPT_OFF, None, "Ans<channel|>wer", ("Answer", "", ())),
    ],
)
def test_reasoning_toggles(prompt: str, thinking: bool | None, text: str, expected: tuple[Any, ...]) -> None:
    assert parsed(GEMMA, enc(GEMMA, text), opts(prompt, thinking=thinking)) == expected


def test_reasoning_then_call() -> None:
    text = "<|channel>thought\nNeed data.\n<channel|>" + call("get_weather", f"city:{Q}Zürich{Q}")
    want = ("", "Need data.", (("get_weather", '{"city":"Zürich"}'),))
    assert parsed(GEMMA, enc(GEMMA, text), opts(PROMPT_ON)) == want


FULL = call("get_weather", f"city:{Q}Zürich{Q},unit:{Q}c{Q}") + call(
    "search", f'filters:{{max:3,tags:[{Q}a{Q},{Q}b{Q}]}},query:{Q}café "best"{Q}'
)
FIRST = ("get_weather", '{"city":"Zürich","unit":"c"}')


@pytest.mark.parametrize(
    ("cut_after", "streamed"),
    [
        ("query:", '{"filters":{"max":3,"tags":["a","b"]},"query":'),  # between key and value
        ("quer", '{"filters":{"max":3,"tags":["a","b"]},'),  # inside a key: the key waits for ":"
        ("café ", '{"filters":{"max":3,"tags":["a","b"]},"query":"café '),  # inside a string: streamed
        ("call:sea", None),  # inside the name: no call started
    ],
)
def test_truncation(cut_after: str, streamed: str | None) -> None:
    ids = enc(GEMMA, FULL[: FULL.rindex(cut_after) + len(cut_after)])
    assert parsed(GEMMA, ids, opts(complete_tool_calls=True), "length") == ("", "", (FIRST,))
    partial = (FIRST,) if streamed is None else (FIRST, ("search", streamed))
    assert parsed(GEMMA, ids, opts(), "length") == ("", "", partial)


def test_truncated_in_reasoning_is_reasoning() -> None:
    ids = enc(GEMMA, "<|channel>thought\nThe user wants the current weather")
    assert parsed(GEMMA, ids, opts(PROMPT_ON), "length") == ("", "The user wants the current weather", ())


@pytest.mark.parametrize("complete", [False, True])
def test_split_invariance(complete: bool) -> None:
    text = "<|channel>thought\nTwo calls.\n<channel|>Sure " + FULL + " done."
    options = opts(PROMPT_ON, complete_tool_calls=complete)
    assert split_check(GEMMA, enc(GEMMA, text), options) == (
        "Sure  done.",
        "Two calls.",
        (FIRST, ("search", '{"filters":{"max":3,"tags":["a","b"]},"query":"café \\"best\\""}')),
    )


def test_the_string_delimiter_inside_a_string_is_text_where_the_notation_does_not_go_on() -> None:
    """Strings are written verbatim, so ``<|"|>`` inside one is the very token of the delimiter: it
    ends the string only where ``,`` ``}`` ``]``, another marker token or the end follows (after
    optional whitespace). Followed by anything else, or by another quote, it is string text."""
    value = f"see {Q} inside, and {Q}{Q} twice"
    ids = enc(GEMMA, call("echo", f"text:{Q}{value}{Q},n:1"))
    want = ("", "", (("echo", json.dumps({"text": value, "n": 1}, separators=(",", ":"))),))
    assert split_check(GEMMA, ids, opts()) == want
    # A quote right before the call's closer (the model forgot the brace) still ends the string.
    ids = enc(GEMMA, f"<|tool_call>call:echo{{text:{Q}x{Q} <tool_call|>")
    assert split_check(GEMMA, ids, opts())[2] == (("echo", '{"text":"x"'),)


def test_a_string_holding_the_delimiter_then_the_notation_ends_there() -> None:
    """What cannot round-trip: ``<|"|>}`` inside a string is exactly a string that ended and the
    object's closer, and is parsed as that structure (the rest of the value is dropped)."""
    ids = enc(GEMMA, call("echo", f"text:{Q}a{Q}}} b{Q}"))
    assert split_check(GEMMA, ids, opts())[2] == (("echo", '{"text":"a"}'),)
