"""Phi-4-mini (``phi-4-mini``) through its marker tokenizer: no Phi-4-mini vocabulary is on PyPI, so
its markers sit at synthetic ids. Calls are ``functools[…]`` (plain text, no closing marker) or
``<|tool_call|>{…}<|/tool_call|>``. Exact outputs, split invariance.
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, split_check
from parsetier.messages import SessionOptions

PHI = marker_tokenizers.registry().get("phi-4-mini")
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)


def test_functools_list_with_a_bracket_inside_a_string() -> None:
    text = (
        'functools[{"name": "get_weather", "arguments": {"city": "x]"}}, '
        '{"name": "get_time", "arguments": {}}]'
    )
    want = ("", "", (("get_weather", '{"city": "x]"}'), ("get_time", "{}")))
    assert split_check(PHI, enc(PHI, text), OPTS) == want


def test_functools_after_text_and_text_after_the_list() -> None:
    text = 'Sure. functools [{"name": "get_time", "arguments": {}}] Done.'
    assert split_check(PHI, enc(PHI, text), OPTS) == ("Sure.  Done.", "", (("get_time", "{}"),))


def test_the_word_functools_alone_is_text() -> None:
    for text in ("import functools\nfunctools.partial(f)", "use functools", "functools [1, 2] is a list"):
        assert split_check(PHI, enc(PHI, text), OPTS) == (text, "", ()), text


def test_tool_call_tokens() -> None:
    text = '<|tool_call|>{"name": "get_weather", "arguments": {"city": "Oslo"}}<|/tool_call|>'
    assert split_check(PHI, enc(PHI, text), OPTS) == ("", "", (("get_weather", '{"city": "Oslo"}'),))
