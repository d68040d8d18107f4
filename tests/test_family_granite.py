"""Granite 4 (``granite-4``, the Qwen3 grammar) and Granite 3.x (``granite-3``) through their marker
tokenizers: no Granite vocabulary is on PyPI. Granite 4's markers sit at their real ids (IBM's
published added-token list); Granite 3.x's at synthetic ids. Every test asserts exact outputs and
split invariance.
"""

from __future__ import annotations

import json

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, prompted, split_check
from marker_tokenizers import MARKERS
from parsetier.messages import SessionOptions

REGISTRY = marker_tokenizers.registry()
G4 = REGISTRY.get("granite-4")
G3 = REGISTRY.get("granite-3")
EOT4 = MARKERS["granite-4"]["<|end_of_text|>"]
EOT3 = MARKERS["granite-3"]["<|end_of_text|>"]
TOOLS = tools(get_weather={"city": {"type": "string"}, "days": {"type": "integer"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)
TURN = "<|start_of_role|>assistant<|end_of_role|>"


def hermes(name: str, args: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def test_granite4_markers_are_the_real_ids() -> None:
    assert enc(G4, "<tool_call></tool_call><think></think>") == [100270, 100271, 100274, 100275]


def test_granite4_content_and_parallel_calls() -> None:
    text = "Checking.\n" + hermes("get_weather", {"city": "Paris", "days": 2}) + "\n" + hermes("get_time", {})
    want = ("Checking.", "", (("get_weather", '{"city": "Paris", "days": 2}'), ("get_time", "{}")))
    assert split_check(G4, [*enc(G4, text), EOT4], OPTS) == want


def test_granite4_thinking_prompt_starts_in_reasoning() -> None:
    """Granite 4.2 with thinking on: the generation prompt ends with ``<think>``."""
    options = prompted(G4, TURN + "<think>\n", tools=TOOLS)
    text = "Need the time.\n</think>\n\n" + hermes("get_time", {})
    assert split_check(G4, enc(G4, text), options) == ("", "Need the time.", (("get_time", "{}"),))


def test_granite4_marker_lookalikes_stay_text() -> None:
    text = 'Write <tool_call>{"name": "get_time", "arguments": {}}</tool_call> to call.'
    assert split_check(G4, plain(G4, text), OPTS) == (text, "", ())


def test_granite3_call_list_after_the_control_token() -> None:
    calls = [{"name": "get_weather", "arguments": {"city": "Zürich"}}, {"name": "get_time", "arguments": {}}]
    text = "<|tool_call|>" + json.dumps(calls, ensure_ascii=False, indent=4)
    # the arguments stream verbatim, as the template indented them
    args = '{\n            "city": "Zürich"\n        }'
    assert split_check(G3, [*enc(G3, text), EOT3], OPTS) == (
        "",
        "",
        (("get_weather", args), ("get_time", "{}")),
    )


def test_granite3_plain_text_opener_counts_only_at_the_start() -> None:
    call = '[{"name": "get_time", "arguments": {}}]'
    assert split_check(G3, enc(G3, "<tool_call>" + call), OPTS) == ("", "", (("get_time", "{}"),))
    later = "Use <tool_call>" + call + " to call."
    assert split_check(G3, enc(G3, later), OPTS) == (later, "", ())


def test_granite3_control_token_after_text_and_a_list_that_is_no_call() -> None:
    text = 'One moment.<|tool_call|>[{"arguments": {"days": 1}, "name": "get_weather"}]'
    want = ("One moment.", "", (("get_weather", '{"days": 1}'),))
    assert split_check(G3, enc(G3, text), OPTS) == want
    assert split_check(G3, enc(G3, "<|tool_call|>[1, 2]"), OPTS) == ("<|tool_call|>[1, 2]", "", ())


def test_granite33_thinking_tags_are_text_read_only_at_the_start() -> None:
    """Granite 3.3 writes <think>/<response> as plain text when its prompt asks for thinking."""
    text = "<think>Plan it.</think><response>The answer.</response>"
    assert split_check(G3, [*enc(G3, text), EOT3], OPTS) == ("The answer.", "Plan it.", ())
    later = "Use <think> and <response> tags."
    assert split_check(G3, enc(G3, later), OPTS) == (later, "", ())


def test_granite4_reasoning_the_model_opens_itself() -> None:
    text = "<think>Need the time.</think>\n\n" + hermes("get_time", {})
    assert split_check(G4, [*enc(G4, text), EOT4], OPTS) == ("", "Need the time.", (("get_time", "{}"),))
