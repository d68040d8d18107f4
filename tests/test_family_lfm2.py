"""LFM2 / LFM2.5 (``lfm2``) through its marker tokenizer: no LFM2 vocabulary is on PyPI, so its
markers sit at synthetic ids. Calls are a pythonic list (the template's form, dict values ``tojson``)
or a JSON list between ``<|tool_call_start|>`` and ``<|tool_call_end|>``. Exact outputs, split
invariance.
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, split_check
from parsetier.messages import SessionOptions

LFM2 = marker_tokenizers.registry().get("lfm2")
TOOLS = tools(get_weather={"city": {"type": "string"}, "days": {"type": "integer"}}, search={}, get_time={})
OPTS = SessionOptions(tools=TOOLS)


def test_reasoning_content_and_a_pythonic_list() -> None:
    text = (
        "<think>Two calls.</think>On it.<|tool_call_start|>"
        "[get_weather(city='Zürich', days=2), search(filters={\"k\": null, \"on\": true}, tags=['a', None])]"
        "<|tool_call_end|>"
    )
    want = (
        "On it.",
        "Two calls.",
        (
            ("get_weather", '{"city": "Zürich", "days": 2}'),
            ("search", '{"filters": {"k": null, "on": true}, "tags": ["a", null]}'),
        ),
    )
    assert split_check(LFM2, enc(LFM2, text), OPTS) == want


def test_a_json_list_between_the_same_markers() -> None:
    text = '<|tool_call_start|>[{"name": "get_time", "arguments": {}}]<|tool_call_end|>'
    assert split_check(LFM2, enc(LFM2, text), OPTS) == ("", "", (("get_time", "{}"),))


def test_no_call_list_and_lookalikes_stay_text() -> None:
    prose = "Write <|tool_call_start|>[get_time()]<|tool_call_end|> to call."
    assert split_check(LFM2, plain(LFM2, prose), OPTS) == (prose, "", ())
    # a list of no calls after the real marker is passed through, the markers' text included
    not_calls = "<|tool_call_start|>[1, 2]<|tool_call_end|>"
    assert split_check(LFM2, enc(LFM2, not_calls), OPTS) == (not_calls, "", ())
