"""InternLM2 (``internlm2``) and Intern-S1 (``intern-s1``) through their test vocabularies: no
InternLM vocabulary is on PyPI, so ``<|action_start|>``, ``<|plugin|>``, ``<|action_end|>`` (and
Intern-S1's ``<think>``, ``</think>``) are single special tokens at synthetic ids over a
one-token-per-byte vocabulary (tests/marker_tokenizers.py). A call is an action block for the plugin
executor holding ``{"name", "parameters"}`` (docs/formats/internlm.md). Exact outputs, split
invariance, both engines.
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, split_check
from native_diff import compare_splits
from parsetier.messages import SessionOptions
from parsetier.models import Model

REGISTRY = marker_tokenizers.registry()
INTERNLM2 = REGISTRY.get("internlm2")
INTERN_S1 = REGISTRY.get("intern-s1")
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={"timezone": {"type": "string"}})
OPTS = SessionOptions(tools=TOOLS)


def action(name: str, params: dict, lead: str = "\n") -> str:
    payload = json.dumps({"name": name, "parameters": params}, ensure_ascii=False)
    return f"<|action_start|><|plugin|>{lead}{payload}<|action_end|>"


def check(model: Model, text: str, want: tuple, options: SessionOptions = OPTS, reason: str = "stop") -> None:
    eos = marker_tokenizers.MARKERS[model.name]["<|im_end|>"]
    ids = enc(model, text) + ([eos] if reason == "stop" else [])
    assert split_check(model, ids, options, reason) == want
    compare_splits(model, options, ids, reason)


@pytest.mark.parametrize("model", [INTERNLM2, INTERN_S1], ids=lambda m: m.name)
def test_calls_and_the_answer_around_them(model: Model) -> None:
    text = (
        "Sure."
        + action("get_weather", {"city": "Tokyo"})
        + "\n"
        + action("get_time", {"timezone": "Asia/Tokyo"}, lead="")
        + "\nVisible answer."
    )
    want = (
        "Sure.\n\nVisible answer.",
        "",
        (("get_weather", '{"city": "Tokyo"}'), ("get_time", '{"timezone": "Asia/Tokyo"}')),
    )
    check(model, text, want)


def test_spaced_markers_still_make_a_call() -> None:
    payload = '{"name": "get_weather", "parameters": {"city": "Tokyo"}}'
    text = f"<|action_start|> <|plugin|>\n{payload}\n<|action_end|>"
    check(INTERNLM2, text, ("", "", (("get_weather", '{"city": "Tokyo"}'),)))


@pytest.mark.parametrize("complete", [False, True])
def test_arguments_that_break_follow_the_malformed_call_policy(complete: bool) -> None:
    """vLLM's malformed case: the arguments break at ``<|action_end|>``. Streamed, the call keeps
    what was streamed (nothing is taken back); with ``complete_tool_calls`` it is invalid and its
    text up to the break, markers included, is content (docs/engine.md, *Malformed calls*)."""
    written = '<|action_start|><|plugin|>{"name": "get_weather", "parameters": {'
    text = written + "<|action_end|>"
    options = SessionOptions(tools=TOOLS, complete_tool_calls=complete)
    want = (written, "", ()) if complete else ("", "", (("get_weather", "{"),))
    check(INTERNLM2, text, want, options)


def test_an_interpreter_block_is_no_tool_call() -> None:
    """Code for the interpreter executor is not a function call: its block is content, markers
    included."""
    text = "Run:<|action_start|><|interpreter|>\nprint(1)<|action_end|>"
    check(INTERNLM2, text, (text, "", ()))


def test_intern_s1_reasoning_and_an_action_inside_it() -> None:
    inner = action("get_time", {"timezone": "UTC"})
    text = "<think>Maybe " + inner + "? No.</think>Here." + action("get_weather", {"city": "Oslo"})
    want = ("Here.", "Maybe " + inner + "? No.", (("get_weather", '{"city": "Oslo"}'),))
    check(INTERN_S1, text, want)


def test_look_alike_markers_are_text() -> None:
    prose = 'Write <|action_start|><|plugin|>{"name": "get_time", "parameters": {}}<|action_end|>.'
    ids = plain(INTERNLM2, prose)
    assert split_check(INTERNLM2, ids, OPTS) == (prose, "", ())
    compare_splits(INTERNLM2, OPTS, ids)


@pytest.mark.parametrize("complete", [False, True])
def test_cut_inside_the_parameters(complete: bool) -> None:
    text = action("get_weather", {"city": "Tokyo"})
    text = text[: text.index("Tokyo")]
    options = SessionOptions(tools=TOOLS, complete_tool_calls=complete)
    want = ("", "", ()) if complete else ("", "", (("get_weather", '{"city": "'),))
    check(INTERNLM2, text, want, options, "length")
