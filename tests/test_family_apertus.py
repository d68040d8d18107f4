"""Apertus (``apertus``) through its marker tokenizer: no Apertus vocabulary is on PyPI, so its control
tokens sit at synthetic ids. Reasoning in ``<|inner_prefix|>…<|inner_suffix|>``; calls a JSON list of
objects keyed by the tool's name in ``<|tools_prefix|>…<|tools_suffix|>``. Exact outputs, split
invariance.
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, split_check
from parsetier.messages import SessionOptions

APERTUS = marker_tokenizers.registry().get("apertus")
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)


def test_deliberation_answer_and_keyed_calls() -> None:
    text = (
        "<|inner_prefix|>Two lookups.<|inner_suffix|>On it."
        '<|tools_prefix|>[{"get_weather": {"city": "Bern <|tools_suffix|>"}}, '
        '{"get_time": {}}]<|tools_suffix|>'
    )
    want = (
        "On it.",
        "Two lookups.",
        (("get_weather", '{"city": "Bern <|tools_suffix|>"}'), ("get_time", "{}")),
    )
    assert split_check(APERTUS, enc(APERTUS, text), OPTS) == want


def test_calls_inside_the_deliberation_end_it() -> None:
    """The template's block form writes a tool_calls block right after thoughts, and closes the
    deliberation only before the response."""
    text = '<|inner_prefix|>Need the time.<|tools_prefix|>[{"get_time": {}}]<|tools_suffix|><|inner_suffix|>'
    assert split_check(APERTUS, enc(APERTUS, text), OPTS) == ("", "Need the time.", (("get_time", "{}"),))


def test_objects_that_are_not_keyed_calls_are_passed_through() -> None:
    text = '<|tools_prefix|>[{"name": "get_time", "arguments": {}}]<|tools_suffix|>'
    assert split_check(APERTUS, enc(APERTUS, text), OPTS) == (text, "", ())
    prose = "Write <|tools_prefix|>[...] to call."
    assert split_check(APERTUS, plain(APERTUS, prose), OPTS) == (prose, "", ())
