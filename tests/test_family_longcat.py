"""LongCat-Flash (``longcat-flash``) through its marker tokenizer: no LongCat vocabulary is on PyPI.
The Hermes grammar under LongCat's own markers: ``<longcat_think>`` reasoning and
``<longcat_tool_call>`` JSON envelopes (docs/formats/longcat.md). Exact outputs, split invariance.
"""

from __future__ import annotations

import json

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, prompted, split_check
from parsetier.messages import SessionOptions

CAT = marker_tokenizers.registry().get("longcat-flash")
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={"timezone": {"type": "string"}})
OPTS = SessionOptions(tools=TOOLS)


def call(name: str, args: dict, indent: int | None = None) -> str:
    payload = json.dumps({"name": name, "arguments": args}, ensure_ascii=False, indent=indent)
    return f"<longcat_tool_call>{payload}</longcat_tool_call>"


def test_reasoning_then_parallel_calls() -> None:
    text = (
        "<longcat_think>Two lookups.</longcat_think>Checking.\n"
        + call("get_weather", {"city": "Tokyo"})
        + "\n"
        + call("get_time", {"timezone": "Asia/Tokyo"})
    )
    want = (
        "Checking.",
        "Two lookups.",
        (("get_weather", '{"city": "Tokyo"}'), ("get_time", '{"timezone": "Asia/Tokyo"}')),
    )
    assert split_check(CAT, enc(CAT, text), OPTS) == want


def test_a_marker_inside_a_json_string_is_text() -> None:
    text = call("get_weather", {"city": "</longcat_tool_call> Paris"}, indent=2)
    got = split_check(CAT, enc(CAT, text), OPTS)
    assert [json.loads(a) for _, a in got[2]] == [{"city": "</longcat_tool_call> Paris"}]


def test_output_without_reasoning_markers_is_content() -> None:
    assert split_check(CAT, enc(CAT, "Just an answer."), OPTS) == ("Just an answer.", "", ())


def test_prompt_that_opens_the_reasoning() -> None:
    options = prompted(CAT, "ASSISTANT:<longcat_think>", tools=TOOLS)
    assert split_check(CAT, enc(CAT, "Hmm.</longcat_think>Hi."), options) == ("Hi.", "Hmm.", ())


def test_look_alike_markers_are_text() -> None:
    prose = 'Write <longcat_tool_call>{"name": "get_time", "arguments": {}}</longcat_tool_call>.'
    assert split_check(CAT, plain(CAT, prose), OPTS) == (prose, "", ())


def test_a_stray_reasoning_closer_is_markup() -> None:
    assert split_check(CAT, enc(CAT, "Answer.</longcat_think> More."), OPTS) == ("Answer. More.", "", ())
