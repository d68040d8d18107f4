"""FunctionGemma (``functiongemma``) through its marker tokenizer: no FunctionGemma vocabulary is on
PyPI. Gemma 4's object notation between FunctionGemma's own tokens:
``<start_function_call>call:NAME{key:<escape>text<escape>,n:1}<end_function_call>``
(docs/formats/functiongemma.md). Exact outputs, split invariance.
"""

from __future__ import annotations

import json

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, split_check
from parsetier.messages import SessionOptions

FG = marker_tokenizers.registry().get("functiongemma")
TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}},
    search={"query": {"type": "string"}, "exact": {"type": "boolean"}, "tags": {"type": "array"}},
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)
E = "<escape>"


def fcall(name: str, body: str) -> str:
    return f"<start_function_call>call:{name}{{{body}}}<end_function_call>"


def test_parallel_calls_with_strings_numbers_booleans_and_lists() -> None:
    text = (
        fcall("get_weather", f"city:{E}Zürich{E},days:3")
        + fcall("search", f"query:{E}a, b: {{c}}{E},exact:true,tags:[{E}x{E},{E}y{E}]")
        + "<start_function_response>"
    )
    got = split_check(FG, enc(FG, text), OPTS)
    assert [(n, json.loads(a)) for n, a in got[2]] == [
        ("get_weather", {"city": "Zürich", "days": 3}),
        ("search", {"query": "a, b: {c}", "exact": True, "tags": ["x", "y"]}),
    ]
    assert got[:2] == ("", "")


def test_a_string_that_looks_like_a_number_stays_a_string() -> None:
    """Unlike peers that json-load every escaped value, ``<escape>7<escape>`` is the string "7"."""
    got = split_check(FG, enc(FG, fcall("search", f"query:{E}7{E}")), OPTS)
    assert got[2] == (("search", '{"query":"7"}'),)


def test_text_before_a_call_is_content_and_an_empty_call_has_empty_arguments() -> None:
    text = "Sure." + fcall("get_time", "")
    assert split_check(FG, enc(FG, text), OPTS) == ("Sure.", "", (("get_time", "{}"),))


def test_look_alike_markers_are_text() -> None:
    prose = "Write <start_function_call>call:get_time{}<end_function_call> to call."
    assert split_check(FG, plain(FG, prose), OPTS) == (prose, "", ())


def test_output_cut_inside_a_string() -> None:
    text = f"<start_function_call>call:get_weather{{city:{E}Par"
    got = split_check(FG, enc(FG, text), OPTS, reason="length")
    assert got[2][0][0] == "get_weather" and got[2][0][1].startswith('{"city":"Par')
