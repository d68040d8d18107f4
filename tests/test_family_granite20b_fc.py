"""granite-20b-functioncalling (``granite-20b-fc``) through a byte-level test vocabulary: its StarCoder
vocabulary is not on PyPI and has no token for ``<function_call>``, which is plain text. Calls are
``<function_call>`` plus one JSON object each, several in a row (docs/formats/granite.md,
"Granite-20B-FC"). Exact outputs, split invariance.
"""

from __future__ import annotations

import json

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, split_check
from parsetier.messages import SessionOptions

G20 = marker_tokenizers.registry().get("granite-20b-fc")
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)
EOT = "<|endoftext|>"


def fc(name: str, args: dict) -> str:
    return "<function_call> " + json.dumps({"name": name, "arguments": args})


def test_repeated_calls() -> None:
    text = fc("get_weather", {"city": "Paris"}) + "\n" + fc("get_time", {}) + EOT
    want = ("", "", (("get_weather", '{"city": "Paris"}'), ("get_time", "{}")))
    assert split_check(G20, enc(G20, text), OPTS) == want


def test_text_after_the_calls_is_content() -> None:
    text = fc("get_time", {}) + "\nDone." + EOT
    assert split_check(G20, enc(G20, text), OPTS) == ("Done.", "", (("get_time", "{}"),))


def test_the_tag_inside_an_answer_is_text() -> None:
    text = 'Use <function_call> {"name": "get_time", "arguments": {}} to call.'
    assert split_check(G20, enc(G20, text + EOT), OPTS) == (text, "", ())


def test_a_tag_that_is_no_call_is_delivered() -> None:
    text = "<function_call> sorry, no call"
    got = split_check(G20, enc(G20, text + EOT), OPTS)
    assert got[2] == () and "sorry, no call" in got[0]


def test_output_cut_mid_call() -> None:
    text = '<function_call> {"name": "get_weather", "arguments": {"city": "Pa'
    assert split_check(G20, enc(G20, text), OPTS, reason="length") == (
        "",
        "",
        (("get_weather", '{"city": "Pa'),),
    )
