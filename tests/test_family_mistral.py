"""Mistral: tokenizer v3 (SentencePiece, JSON-array calls) and v11 / v13 tekken
(``[TOOL_CALLS]NAME[ARGS]{…}``, ``[CALL_ID]``, ``[THINK]``), with the real vocabularies from
mistral-common. Control tokens are recognised by id only: ``enc`` turns marker texts into their
control ids, ``plain`` spells them as ordinary tokens. Every test asserts exact outputs.
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import Shape, check_consistent, parse_shape, parsed, run, shape, tools
from family_support import enc, plain, prompted, split_check
from parsetier.messages import SessionOptions
from parsetier.models import Model

_REGISTRY = marker_tokenizers.registry()
V3: Model = _REGISTRY.get("mistral-7b-v0.3")
V11: Model = _REGISTRY.get("mistral-small-3.2")
V13: Model = _REGISTRY.get("magistral-small")
TOOL_CALLS, ARGS, CALL_ID, THINK, THINK_END, EOS = 9, 32, 33, 34, 35, 2
V3_TOOL_CALLS = 5


# ============================================================================ v3: JSON array
V3_CASES: list[tuple[str, str, Shape]] = [
    (
        "single",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}]',
        ("", "", (("get_weather", '{"city": "Paris", "unit": "c"}'),)),
    ),
    (
        "no space, parallel",
        '[TOOL_CALLS][{"name": "add", "arguments":{"a": 3.5, "b": 4}}, {"name": "get_time", "arguments":{}}]',
        ("", "", (("add", '{"a": 3.5, "b": 4}'), ("get_time", "{}"))),
    ),
    (
        "arguments before name",
        '[TOOL_CALLS] [{"arguments":{"name": "John Doe"}, "name": "get_age"}]',
        ("", "", (("get_age", '{"name": "John Doe"}'),)),
    ),
    (
        "content before",
        'Hello[TOOL_CALLS] [{"name": "add", "arguments":{"a": 1, "b": 2}}]',
        ("Hello", "", (("add", '{"a": 1, "b": 2}'),)),
    ),
    ("not JSON: passed through", "[TOOL_CALLS] not json at all", ("[TOOL_CALLS] not json at all", "", ())),
    ("no call", "The capital of France is Paris.", ("The capital of France is Paris.", "", ())),
]


@pytest.mark.parametrize(("text", "want"), [(t, w) for _, t, w in V3_CASES], ids=[c[0] for c in V3_CASES])
def test_v3(text: str, want: Shape) -> None:
    ids = enc(V3, text)
    assert split_check(V3, ids) == want


def test_v3_lookalikes_inside_strings() -> None:
    args = '{"content": "[TOOL_CALLS] [{\\"name\\": \\"x\\"}] and ]}"}'
    ids = [V3_TOOL_CALLS, *plain(V3, '[{"name": "write_file", "arguments": ' + args + "}]")]
    assert split_check(V3, ids) == ("", "", (("write_file", args),))


# ============================================================================ v11 / v13
V11_CASES: list[tuple[str, str, Shape]] = [
    (
        "single",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
        ("", "", (("get_weather", '{"city": "Rome"}'),)),
    ),
    (
        "parallel",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Zürich"}[TOOL_CALLS]search[ARGS]{"q": "café \\"b\\""}'
        "[TOOL_CALLS]get_time[ARGS]{}",
        (
            "",
            "",
            (("get_weather", '{"city": "Zürich"}'), ("search", '{"q": "café \\"b\\""}'), ("get_time", "{}")),
        ),
    ),
    (
        "call ids are not part of the name",
        '[TOOL_CALLS]f[CALL_ID]000000001[ARGS]{"a": 1}[TOOL_CALLS]g[CALL_ID]000000002[ARGS]{"b": 2}',
        ("", "", (("f", '{"a": 1}'), ("g", '{"b": 2}'))),
    ),
    (
        "content before",
        'Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
        ("Hello, world!\nWhat's up?", "", (("special_function", '{"arg1": 1}'),)),
    ),
    (
        "braces inside a string",
        '[TOOL_CALLS]file_search[ARGS]{"query":"/{.github/a.md,AGENTS.md}"}',
        ("", "", (("file_search", '{"query":"/{.github/a.md,AGENTS.md}"}'),)),
    ),
    (
        "argument keys that collide with envelope keys",
        '[TOOL_CALLS]create_user[ARGS]{"name": "bar", "arguments": "--force", "id": "u-1"}',
        ("", "", (("create_user", '{"name": "bar", "arguments": "--force", "id": "u-1"}'),)),
    ),
    (
        "pre-v11 JSON array on tekken (v7 models)",
        'Hi[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]',
        ("Hi", "", (("f", '{"a": 1}'), ("g", "{}"))),
    ),
    ("stop token", "Sure.</s>", ("Sure.", "", ())),
    ("no call", "Paris is the capital of France. 🇫🇷", ("Paris is the capital of France. 🇫🇷", "", ())),
]


@pytest.mark.parametrize(("text", "want"), [(t, w) for _, t, w in V11_CASES], ids=[c[0] for c in V11_CASES])
def test_v11(text: str, want: Shape) -> None:
    ids = enc(V11, text)
    assert split_check(V11, ids) == want


THINK_CASES: list[tuple[str, str, Shape]] = [
    (
        "reasoning then call",
        '[THINK]I\'m\nthinking[/THINK][TOOL_CALLS]special_function[ARGS]{"arg1":1}',
        ("", "I'm\nthinking", (("special_function", '{"arg1":1}'),)),
    ),
    (
        "reasoning, content, call",
        '[THINK]Weather needed.[/THINK]Let me check.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        ("Let me check.", "Weather needed.", (("get_weather", '{"city": "Paris"}'),)),
    ),
    (
        "control tokens inside reasoning are reasoning text",
        '[THINK]Let me think about [TOOL_CALLS]f[ARGS]{"a":1} and more[/THINK][TOOL_CALLS]f[ARGS]{"a": 1}',
        ("", 'Let me think about [TOOL_CALLS]f[ARGS]{"a":1} and more', (("f", '{"a": 1}'),)),
    ),
    ("no call", "[THINK]A greeting.[/THINK]Hello!", ("Hello!", "A greeting.", ())),
    ("plain-text <think> at the start (Magistral 2506)", "<think>r</think>c", ("c", "r", ())),
    ("<think> later is text", "Use <think> tags.", ("Use <think> tags.", "", ())),
]


@pytest.mark.parametrize(
    ("text", "want"), [(t, w) for _, t, w in THINK_CASES], ids=[c[0] for c in THINK_CASES]
)
def test_v13_reasoning(text: str, want: Shape) -> None:
    ids = enc(V13, text)
    assert split_check(V13, ids) == want


def test_marker_lookalikes_in_reasoning_and_arguments() -> None:
    reasoning = "Document the format; [TOOL_CALLS] here is just text."
    args = (
        '{"content": "Calls look like [TOOL_CALLS]name[ARGS]{\\"a\\": 1}; thinking is [THINK]...[/THINK]."}'
    )
    ids = [
        THINK,
        *plain(V13, reasoning),
        THINK_END,
        *enc(V13, "[TOOL_CALLS]write_file[ARGS]"),
        *plain(V13, args),
    ]
    assert split_check(V13, ids) == ("", reasoning, (("write_file", args),))


def test_control_tokens_inside_a_json_string_are_string_content() -> None:
    args = '{"s": "a[TOOL_CALLS]b[ARGS]c"}'
    ids = enc(V11, "[TOOL_CALLS]f[ARGS]" + args)
    assert ids.count(TOOL_CALLS) == 2
    assert split_check(V11, ids) == ("", "", (("f", args),))


def test_typed_values_and_finish_reason() -> None:
    args = '{"hour": 7, "minute": 30, "volume": 0.75, "big": 1e-9, "repeat": true, "label": null, "tags": []}'
    ids = [*enc(V11, "[TOOL_CALLS]set_alarm[ARGS]" + args), EOS]
    _, final = parse_shape(V11, ids, SessionOptions(tools=tools("set_alarm")))
    assert final.message.tool_calls[0].arguments == args
    assert json.loads(args)["big"] == 1e-9
    assert final.finish_reason == "tool_calls"


# ============================================================================ truncation
def test_truncated_in_arguments() -> None:
    ids = enc(
        V13,
        '[THINK]Write the script.[/THINK][TOOL_CALLS]write_file[ARGS]{"path": "/tmp/b.sh", "content": "rm',
    )
    assert parsed(V13, ids, reason="length") == (
        "",
        "Write the script.",
        (("write_file", '{"path": "/tmp/b.sh", "content": "rm'),),
    )
    complete = SessionOptions(complete_tool_calls=True)
    assert split_check(V13, ids, complete, "length") == ("", "Write the script.", ())


def test_truncated_after_the_marker_or_in_reasoning() -> None:
    ids = enc(V13, "[THINK]r[/THINK]Let me check that for you.[TOOL_CALLS]")
    assert parsed(V13, ids, reason="length") == ("Let me check that for you.", "r", ())
    ids = enc(V11, "[TOOL_CALLS]get_wea")
    assert parsed(V11, ids, reason="length") == ("", "", ())
    assert parsed(V13, enc(V13, "[THINK]so I will need"), reason="length") == ("", "so I will need", ())


def test_v3_truncated_inside_the_array_keeps_complete_calls() -> None:
    ids = enc(V3, '[TOOL_CALLS] [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": ')
    complete = SessionOptions(complete_tool_calls=True)
    assert split_check(V3, ids, complete, "length") == ("", "", (("a", "{}"),))


# ============================================================================ reasoning toggles
def test_prompt_that_opens_think_starts_in_reasoning() -> None:
    output = enc(V13, "still thinking[/THINK]Answer.")
    opened = SessionOptions(prompt_token_ids=(*enc(V13, "[INST]hi[/INST]"), THINK))
    assert parsed(V13, output, opened) == ("Answer.", "still thinking", ())
    # A system prompt that spells out [THINK]…[/THINK] (Magistral's) does not open reasoning.
    system = prompted(V13, "[SYSTEM_PROMPT]Use [THINK]x[/THINK].[/SYSTEM_PROMPT][INST]hi[/INST]")
    assert parsed(V13, enc(V13, "[THINK]r[/THINK]Answer."), system) == ("Answer.", "r", ())
    assert parsed(V13, enc(V13, "<think>r</think>Answer."), system) == ("Answer.", "r", ())


def test_thinking_switch_does_not_invent_reasoning() -> None:
    ids = enc(V13, "Hello!")
    for thinking in (None, True, False):
        assert parsed(V13, ids, SessionOptions(thinking=thinking)) == ("Hello!", "", ())
    streamed = run(
        V13, [[i] for i in enc(V13, "[THINK]secret[/THINK]Hi")], SessionOptions(include_reasoning=False)
    )
    check_consistent(streamed)
    assert shape(streamed.final.message) == ("Hi", "", ())


def test_v3_byte_tokens_before_a_marker_decode_without_an_error() -> None:
    """Byte tokens that are no UTF-8 character (C2 80 80), then ``[TOOL_CALLS]``: stepped one id
    at a time, tokenizers' DecodeStream would refuse the marker's step ("Invalid prefix"). The
    scanner steps the byte group with the marker, so the group is decided whole (one U+FFFD per
    byte) and the call parses, in every grouping (the long fuzz run's finding; more splits in
    tests/test_byte_groups.py)."""
    call = V3.tokenizer.encode('[{"name": "get_weather", "arguments": {"city": "Paris"}}]').ids
    ids = [965, 899, 899, 5, *call]
    options = SessionOptions(tools=tools("get_weather"))
    for groups in ([ids], [[i] for i in ids], [ids[:2], ids[2:4], ids[4:]]):
        streamed = run(V3, groups, options, "stop")
        check_consistent(streamed)
        content, _, calls = shape(streamed.message)
        assert content == "\ufffd\ufffd\ufffd", (groups, content)
        assert calls == (("get_weather", '{"city": "Paris"}'),), groups
