"""ERNIE 4.5 thinking (``ernie-4.5-thinking``) through its marker tokenizer: no ERNIE vocabulary is on
PyPI, so its markers sit at synthetic ids. The output starts inside the reasoning; ``<response>``
wraps the answer; calls are ``<tool_call>`` JSON envelopes. Exact outputs, split invariance.
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, prompted, split_check
from marker_tokenizers import MARKERS
from parsetier.messages import SessionOptions

ERNIE = marker_tokenizers.registry().get("ernie-4.5-thinking")
EOS = MARKERS["ernie-4.5"]["</s>"]
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)


def test_reasoning_then_the_wrapped_answer() -> None:
    text = "The user greets me.\n</think>\n\n<response>\nHello!\n\nHow can I help?\n</response>\n"
    want = ("Hello!\n\nHow can I help?", "The user greets me.", ())
    assert split_check(ERNIE, [*enc(ERNIE, text), EOS], OPTS) == want


def test_reasoning_then_parallel_calls() -> None:
    text = (
        "Two lookups.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Beijing"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'
    )
    want = ("", "Two lookups.", (("get_weather", '{"city": "Beijing"}'), ("get_time", "{}")))
    assert split_check(ERNIE, [*enc(ERNIE, text), EOS], OPTS) == want


def test_answer_without_the_wrapper_is_content() -> None:
    assert split_check(ERNIE, enc(ERNIE, "Hmm.\n</think>\nPlain answer."), OPTS) == (
        "Plain answer.",
        "Hmm.",
        (),
    )


def test_reasoning_closed_in_the_prompt_starts_in_content() -> None:
    options = prompted(ERNIE, "<think>\n\n</think>\n\n", tools=TOOLS)
    assert split_check(ERNIE, enc(ERNIE, "<response>\nHi\n</response>"), options) == ("Hi", "", ())


def test_marker_lookalikes_in_the_answer_stay_text() -> None:
    ids = enc(ERNIE, "r</think><response>") + plain(ERNIE, "Type </response> or <tool_call>.")
    assert split_check(ERNIE, ids, OPTS) == ("Type </response> or <tool_call>.", "r", ())
