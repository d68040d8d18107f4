"""Gemma 4 (``<|channel>thought`` reasoning, ``<|tool_call>call:NAME{…}`` object notation), token-id mode.

No Gemma 4 tokenizer is on PyPI: the ``gemma-4`` marker tokenizer carries the real marker tokens
at their real ids over a one-token-per-byte vocabulary, so these tests drive the format as a
server would (ids in, deltas out). ``plain`` spells a marker as ordinary bytes (a look-alike).
Every test asserts exact outputs; arguments are compared as the exact JSON text the reader writes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

from parsetier.messages import Delta, Message, SessionOptions, ToolCall
from parsetier.models import Model, ModelRegistry
from parsetier.session import Session, parse

GEMMA: Model = ModelRegistry().get("gemma-4")
PROMPT_OFF = "<|turn>model\n<|channel>thought\n<channel|>"
PROMPT_ON = "<|turn>model\n"
Q = '<|"|>'


def enc(text: str) -> list[int]:
    """Ids as the model emits them: marker texts become their special tokens."""
    return GEMMA.tokenizer.encode(text, add_special_tokens=False).ids


def plain(text: str) -> list[int]:
    """Ids of ``text`` as ordinary characters only (marker look-alikes)."""
    ids = [i for ch in text for i in enc(ch)]
    assert GEMMA.tokenizer.decode(ids, skip_special_tokens=False) == text
    return ids


def opts(prompt: str = PROMPT_OFF, **kw: Any) -> SessionOptions:
    return SessionOptions(prompt_token_ids=tuple(enc(prompt)) if prompt else (), **kw)


def shape(message: Message) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    return message.content, message.reasoning, tuple((c.name, c.arguments) for c in message.tool_calls)


def run(ids: Sequence[int], options: SessionOptions | None = None, reason: str = "stop") -> tuple[Any, ...]:
    message, _, _ = parse(GEMMA, options or opts(), list(ids), reason)
    return shape(message)


def accumulate(deltas: Sequence[Delta]) -> Message:
    """What an OpenAI client builds from the deltas (first fragment of a call has id and name)."""
    content, reasoning = [], []
    calls: list[dict[str, Any]] = []
    for d in deltas:
        content.append(d.content)
        reasoning.append(d.reasoning)
        for tc in d.tool_calls:
            if tc.index == len(calls):
                assert tc.id is not None and tc.name is not None
                calls.append({"id": tc.id, "name": tc.name, "args": [tc.arguments]})
            else:
                assert tc.id is None and tc.name is None
                calls[tc.index]["args"].append(tc.arguments)
    return Message(
        "".join(content),
        "".join(reasoning),
        tuple(ToolCall(c["id"], c["name"], "".join(c["args"])) for c in calls),
    )


def call(name: str, body: str) -> str:
    return f"<|tool_call>call:{name}{{{body}}}<tool_call|>"


def test_single_call() -> None:
    ids = enc(call("get_weather", f"city:{Q}Paris{Q},unit:{Q}c{Q}"))
    assert run(ids) == ("", "", (("get_weather", '{"city":"Paris","unit":"c"}'),))


def test_typed_values_keys_with_spaces_and_nesting() -> None:
    body = (
        f"flag:false,key with space:1.5e-05,none:null,n:-3,big:1e+21,"
        f"obj:{{a:[1,{Q}t{Q}],B:{{deep:[[{{x:0}}]]}}}},s:{Q}x,y}} {Q}"
    )
    (content, reasoning, calls) = run(enc(call("record", body)))
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
    ids = enc(call("write_file", f"content:{Q}{text}{Q},path:{Q}C:\\Users\\me{Q}"))
    ((name, args),) = run(ids)[2]
    assert name == "write_file"
    assert json.loads(args) == {"content": text, "path": "C:\\Users\\me"}
    assert args == json.dumps(
        {"content": text, "path": "C:\\Users\\me"}, ensure_ascii=False, separators=(",", ":")
    )


def test_marker_tokens_inside_a_string_are_text() -> None:
    inner = "Wrap calls as <|tool_call>call:f{}<tool_call|> and close thoughts with <channel|>."
    ids = enc(call("echo", f"text:{Q}{inner}{Q}"))
    assert ids.count(GEMMA.tokenizer.token_to_id("<tool_call|>")) == 2, "the string holds the marker token"
    assert run(ids) == ("", "", (("echo", json.dumps({"text": inner}, separators=(",", ":"))),))


def test_look_alike_markers_in_content_stay_text() -> None:
    text = "Use <|tool_call>call:f{} to call."
    assert run(plain(text)) == (text, "", ())


def test_parallel_calls_and_text_around() -> None:
    text = (
        "Before "
        + call("get_time", "")
        + call("get_weather", f"city:{Q}Oslo{Q},days:2")
        + call("weather.get-v2", f"tags:[{Q}a{Q},{Q}b{Q}]")
        + " after"
    )
    message, final, _ = parse(GEMMA, opts(), enc(text))
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
    assert run(enc("<|tool_call>call:bad_func no brace<tool_call|>")) == ("", "", ())


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
    assert run(enc(text), opts(prompt, thinking=thinking)) == expected


def test_reasoning_then_call() -> None:
    text = "<|channel>thought\nNeed data.\n<channel|>" + call("get_weather", f"city:{Q}Zürich{Q}")
    assert run(enc(text), opts(PROMPT_ON)) == ("", "Need data.", (("get_weather", '{"city":"Zürich"}'),))


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
    ids = enc(FULL[: FULL.rindex(cut_after) + len(cut_after)])
    assert run(ids, opts(complete_tool_calls=True), "length") == ("", "", (FIRST,))
    partial = (FIRST,) if streamed is None else (FIRST, ("search", streamed))
    assert run(ids, opts(), "length") == ("", "", partial)


def test_truncated_in_reasoning_is_reasoning() -> None:
    ids = enc("<|channel>thought\nThe user wants the current weather")
    assert run(ids, opts(PROMPT_ON), "length") == ("", "The user wants the current weather", ())


@pytest.mark.parametrize("complete", [False, True])
def test_split_invariance(complete: bool) -> None:
    text = "<|channel>thought\nTwo calls.\n<channel|>Sure " + FULL + " done."
    ids = enc(text)
    options = opts(PROMPT_ON, complete_tool_calls=complete)
    reference, _, _ = parse(GEMMA, options, ids)
    assert shape(reference) == (
        "Sure  done.",
        "Two calls.",
        (FIRST, ("search", '{"filters":{"max":3,"tags":["a","b"]},"query":"café \\"best\\""}')),
    )
    rng = random.Random(f"gemma4-{complete}")
    splits = [[ids], [[i] for i in ids]]
    for most in (2, 3, 8, 40):
        for _ in range(4):
            groups, pos = [], 0
            while pos < len(ids):
                n = rng.randint(1, most)
                groups.append(ids[pos : pos + n])
                pos += n
            splits.append(groups)
    for groups in splits:
        session = Session(GEMMA, options)
        deltas: list[Delta] = []
        for g in groups:
            deltas += session.feed(g).deltas
        last = session.finish("stop")
        assert last.final is not None
        assert accumulate(deltas + last.deltas) == last.final.message
        assert shape(last.final.message) == shape(reference)
