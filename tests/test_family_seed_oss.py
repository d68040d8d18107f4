"""Seed-OSS through its marker tokenizer (``seed-oss``): no Seed-OSS vocabulary is on PyPI, so the
``<seed:*>`` markers are single special tokens (at synthetic ids) over a one-token-per-byte
vocabulary, which drives the format exactly as a server would (ids in, deltas out).

Outputs are written from the official chat template: the model opens ``<seed:think>`` itself, calls
are ``<seed:tool_call>\\n<function=N>\\n<parameter=K>V</parameter>\\n</function>\\n</seed:tool_call>``
with values that carry no wrapping newlines; non-string values are rendered with Jinja's ``string``
filter (Python literals). Every test asserts exact outputs and split invariance.
"""

from __future__ import annotations

import pytest

import marker_tokenizers
from engine_helpers import run, tools, typed
from family_support import arguments_before, enc, plain, prompted, split_check
from marker_tokenizers import MARKERS
from native_diff import compare_splits
from parsetier.messages import SessionOptions

SEED = marker_tokenizers.registry().get("seed-oss")
EOS = MARKERS["seed-oss"]["<seed:eos>"]
BUDGET_OPEN = MARKERS["seed-oss"]["<seed:cot_budget_reflect>"]

TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}},
    write_file={"path": {"type": "string"}, "content": {"type": "string"}},
    typed=typed("i", "b", "o", "a", "s", "ns"),
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)


def call(name: str, *kv: tuple[str, str]) -> str:
    params = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in kv)
    return f"\n<seed:tool_call>\n<function={name}>\n{params}</function>\n</seed:tool_call>"


def test_markers_are_single_special_tokens() -> None:
    assert len(enc(SEED, "<seed:think></seed:think><seed:tool_call></seed:tool_call>")) == 4
    assert enc(SEED, "<seed:eos>") == [EOS]


def test_reasoning_content_and_parallel_calls() -> None:
    text = (
        "<seed:think>Two lookups.</seed:think>\nOn it."
        + call("get_weather", ("city", "Paris"), ("days", "2"))
        + call("get_time")
    )
    want = ("On it.", "Two lookups.", (("get_weather", '{"city": "Paris", "days": 2}'), ("get_time", "{}")))
    assert split_check(SEED, [*enc(SEED, text), EOS], OPTS) == want


def test_python_literal_values_follow_the_schema() -> None:
    text = "<seed:think>t</seed:think>" + call(
        "typed",
        ("i", "4"),
        ("b", "True"),
        ("o", "{'k': [1, None], 'on': False}"),
        ("a", "['x', 'y']"),
        ("s", "True"),
        ("ns", "null"),
    )
    args = '{"i": 4, "b": true, "o": {"k": [1, null], "on": false}, "a": ["x", "y"], "s": "True", "ns": null}'
    assert split_check(SEED, enc(SEED, text), OPTS) == ("", "t", (("typed", args),))


def test_values_keep_their_whitespace() -> None:
    text = call("write_file", ("path", " a b "), ("content", "line 1\n  line 2\n"))
    args = '{"path": " a b ", "content": "line 1\\n  line 2\\n"}'
    assert split_check(SEED, enc(SEED, text), OPTS) == ("", "", (("write_file", args),))


def test_markers_inside_a_string_value_are_text() -> None:
    value = "Close </parameter> and </function> then </seed:tool_call>; <parameter=x> too."
    text = call("write_file", ("content", value))
    args = '{"content": "Close </parameter> and </function> then </seed:tool_call>; <parameter=x> too."}'
    assert split_check(SEED, enc(SEED, text), OPTS) == ("", "", (("write_file", args),))


def test_marker_lookalikes_are_text() -> None:
    text = "Type <seed:think> or <seed:tool_call> literally."
    assert split_check(SEED, plain(SEED, text), OPTS) == (text, "", ())


def test_thinking_budget_reflections_stay_in_the_reasoning() -> None:
    text = (
        "<seed:think>Step one.\n<seed:cot_budget_reflect>I have used 12 tokens, and there are 500 left."
        "</seed:cot_budget_reflect>\nStep two.</seed:think>Answer."
    )
    ids = enc(SEED, text)
    assert BUDGET_OPEN in ids
    reasoning = "Step one.\nI have used 12 tokens, and there are 500 left.\nStep two."
    assert split_check(SEED, ids, OPTS) == ("Answer.", reasoning, ())


def test_reasoning_toggles_from_the_prompt() -> None:
    budget0 = prompted(SEED, "<seed:bos>assistant\n<seed:think><seed:cot_budget_reflect>")
    ids = enc(SEED, "Budget is 0, answer directly.</seed:cot_budget_reflect>\n</seed:think>Hi.")
    assert split_check(SEED, ids, budget0) == ("Hi.", "Budget is 0, answer directly.", ())
    off = prompted(SEED, "<seed:bos>assistant\n<seed:think></seed:think>")
    assert split_check(SEED, enc(SEED, "Hi."), off) == ("Hi.", "", ())


def test_call_without_closing_the_reasoning() -> None:
    text = "<seed:think>Need the time." + call("get_time")
    assert split_check(SEED, enc(SEED, text), OPTS) == ("", "Need the time.", (("get_time", "{}"),))


def test_string_values_stream_before_the_value_ends() -> None:
    text = call("write_file", ("content", "abcdefghij"))
    ids = enc(SEED, text)
    close = len(enc(SEED, text[: text.index("</parameter>")]))
    assert arguments_before(SEED, ids, OPTS, close) == '{"content": "abcdefghij'


@pytest.mark.parametrize("complete", [False, True])
def test_truncation_inside_a_value(complete: bool) -> None:
    text = call("get_weather", ("city", "Paris"), ("days", "2"))
    ids = enc(SEED, text[: text.index("</parameter>")])
    opts = SessionOptions(tools=TOOLS, complete_tool_calls=complete)
    got = split_check(SEED, ids, opts, reason="length")
    assert got == ("", "", ()) if complete else ("", "", (("get_weather", '{"city": "Paris'),))


WEATHER = call("get_weather", ("city", "Barcelona, Spain"), ("days", "2"))
WEATHER_ARGS = '{"city": "Barcelona, Spain", "days": 2}'


def test_a_call_the_reasoning_describes_is_reasoning() -> None:
    """vLLM's case: the reasoning quotes the call format before its ``</seed:think>``. The quoted
    call is reasoning text (not executed), the reasoning is not cut at the quote, the reasoning
    closer is markup, and the call after it is the one call, in both engines, under any split."""
    reasoning = "Got it. The format is" + WEATHER + ". Wait, but does days accept 2? Yes."
    ids = [*enc(SEED, "<seed:think>\n" + reasoning + "</seed:think>" + WEATHER), EOS]
    assert split_check(SEED, ids, OPTS) == ("", reasoning, (("get_weather", WEATHER_ARGS),))
    compare_splits(SEED, OPTS, ids)


def test_a_described_call_before_the_reasoning_closes_is_reasoning() -> None:
    reasoning = "Maybe:" + WEATHER
    ids = [*enc(SEED, "<seed:think>" + reasoning + "</seed:think>No call needed."), EOS]
    assert split_check(SEED, ids, OPTS) == ("No call needed.", reasoning, ())
    compare_splits(SEED, OPTS, ids)


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_calls_that_end_the_turn_end_the_reasoning(reason: str) -> None:
    """Calls the model makes without closing its reasoning end its turn: only whitespace and more
    calls follow them. They are calls, delivered when the output ends (the parser cannot tell them
    from a description before then), and the reasoning before them streams at once."""
    ids = enc(SEED, "<seed:think>Need two." + WEATHER + "\n" + call("get_time"))
    if reason == "stop":
        ids.append(EOS)
    want = ("", "Need two.", (("get_weather", WEATHER_ARGS), ("get_time", "{}")))
    assert split_check(SEED, ids, OPTS, reason=reason) == want
    streamed = run(SEED, [[i] for i in ids], OPTS, reason)
    opener = enc(SEED, "<seed:think>Need two.")
    assert "".join(d.reasoning for feed in streamed.per_feed[: len(opener)] for d in feed) == "Need two."
    assert not any(d.tool_calls for feed in streamed.per_feed[: len(ids) - 1] for d in feed)
    compare_splits(SEED, OPTS, ids, reason)


def test_a_stray_reasoning_closer_is_markup() -> None:
    """``</seed:think>`` where no reasoning is open (the prompt closed it, or it was never opened)
    is markup, never content."""
    off = prompted(SEED, "<seed:bos>assistant\n<seed:think></seed:think>")
    ids = [*enc(SEED, "</seed:think>Hi.</seed:think> There."), EOS]
    assert split_check(SEED, ids, off) == ("Hi. There.", "", ())
    compare_splits(SEED, off, ids)
