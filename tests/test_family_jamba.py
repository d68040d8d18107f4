"""Jamba (``jamba``) through its test vocabulary: no Jamba vocabulary is on PyPI, so
``<tool_calls>`` / ``</tool_calls>`` are single special tokens at synthetic ids over a
one-token-per-byte vocabulary (tests/marker_tokenizers.py), as the model's own tokens would be.
Outputs follow Jamba's chat template: one ``<tool_calls>`` block holding a JSON list of
``{"name", "arguments"}`` objects (docs/formats/jamba.md). Exact outputs, split invariance, both
engines.
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, split_check
from native_diff import compare_splits
from parsetier.messages import SessionOptions

JAMBA = marker_tokenizers.registry().get("jamba")
EOS = marker_tokenizers.MARKERS["jamba"]["<|endoftext|>"]
TOOLS = tools(get_weather={"city": {"type": "string"}, "days": {"type": "integer"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)


def block(*calls: tuple[str, dict]) -> str:
    body = ",\n    ".join(json.dumps({"name": n, "arguments": a}, ensure_ascii=False) for n, a in calls)
    return f"<tool_calls>[\n    {body}\n]</tool_calls>"


def check(text: str, want: tuple, options: SessionOptions = OPTS, reason: str = "stop") -> None:
    ids = enc(JAMBA, text) + ([EOS] if reason == "stop" else [])
    assert split_check(JAMBA, ids, options, reason) == want
    compare_splits(JAMBA, options, ids, reason)


def test_markers_are_single_tokens() -> None:
    assert len(enc(JAMBA, "<tool_calls></tool_calls>")) == 2


def test_content_then_parallel_calls() -> None:
    text = " Sure! let me call the tool for you." + block(
        ("get_weather", {"city": "Dallas", "days": 2}), ("get_time", {})
    )
    want = (
        "Sure! let me call the tool for you.",
        "",
        (("get_weather", '{"city": "Dallas", "days": 2}'), ("get_time", "{}")),
    )
    check(text, want)


def test_a_marker_inside_a_string_argument_is_text() -> None:
    text = block(("get_weather", {"city": "</tool_calls> 北京"}))
    check(text, ("", "", (("get_weather", '{"city": "</tool_calls> 北京"}'),)))


def test_text_after_the_block_is_content() -> None:
    check(block(("get_time", {})) + "\nDone.", ("Done.", "", (("get_time", "{}"),)))


def test_look_alike_markers_are_text() -> None:
    prose = 'Write <tool_calls>[{"name": "get_time", "arguments": {}}]</tool_calls> to call.'
    ids = plain(JAMBA, prose)
    assert split_check(JAMBA, ids, OPTS) == (prose, "", ())
    compare_splits(JAMBA, OPTS, ids)


def test_a_block_that_is_no_call_is_content() -> None:
    check("<tool_calls>not json</tool_calls>", ("<tool_calls>not json</tool_calls>", "", ()))


@pytest.mark.parametrize("complete", [False, True])
def test_cut_inside_the_arguments(complete: bool) -> None:
    text = block(("get_weather", {"city": "Dallas", "days": 2}))
    text = text[: text.index('"days"')]
    options = SessionOptions(tools=TOOLS, complete_tool_calls=complete)
    got = split_check(JAMBA, enc(JAMBA, text), options, "length")
    assert got == (("", "", ()) if complete else ("", "", (("get_weather", '{"city": "Dallas", '),)))
    compare_splits(JAMBA, options, enc(JAMBA, text), "length")
