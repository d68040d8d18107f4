"""Hunyuan-A13B (``hunyuan-a13b``) and Hunyuan Hy-V4 (``hy-v4``) through their test vocabularies: no
Hunyuan vocabulary is on PyPI. A13B's markers are ordinary text of its vocabulary (its reasoning
parser spells ``<think>`` as three plain tokens), so its test vocabulary carries only the stop token
and the markers are matched as text; Hy-V4's markers are special tokens with the released
checkpoints' ``:opensource`` suffix, at synthetic ids (tests/marker_tokenizers.py).
Outputs follow the formats peers parse (vLLM's ``hunyuan_a13b`` and ``hy_v4`` parsers and their
tests; docs/formats/hunyuan.md). Exact outputs, split invariance, both engines.
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, split_check
from native_diff import compare_splits
from parsetier.messages import SessionOptions
from parsetier.models import Model

REGISTRY = marker_tokenizers.registry()
A13B = REGISTRY.get("hunyuan-a13b")
HYV4 = REGISTRY.get("hy-v4")
TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}},
    register_user={"name": {"type": "string"}, "address": {"type": "object"}, "role": {"type": "null"}},
    get_current_date={},
)
OPTS = SessionOptions(tools=TOOLS)
EOS = {
    "hunyuan-a13b": marker_tokenizers.MARKERS["hunyuan-a13b"]["<|eos|>"],
    "hy-v4": marker_tokenizers.MARKERS["hy-v4"]["<｜hy_eos:opensource｜>"],
}


def check(model: Model, text: str, want: tuple, options: SessionOptions = OPTS, reason: str = "stop") -> None:
    ids = enc(model, text) + ([EOS[model.name]] if reason == "stop" else [])
    assert split_check(model, ids, options, reason) == want
    compare_splits(model, options, ids, reason)


# ----------------------------------------------------------------------------- Hunyuan-A13B
def calls(*items: tuple[str, dict]) -> str:
    body = ", ".join(json.dumps({"name": n, "arguments": a}, ensure_ascii=False) for n, a in items)
    return f"<tool_calls>[{body}]</tool_calls>"


def test_a13b_reasoning_answer_and_parallel_calls() -> None:
    user = {"name": "John Doe", "address": {"city": "San Francisco"}, "role": None}
    text = (
        "<think>\nTwo calls.\n</think>\n<answer>\nI will call the tools now. "
        + calls(("get_weather", {"city": "北京", "days": 2}), ("register_user", user))
        + "\n</answer>"
    )
    want = (
        "I will call the tools now.",
        "Two calls.",
        (
            ("get_weather", '{"city": "北京", "days": 2}'),
            ("register_user", '{"name": "John Doe", "address": {"city": "San Francisco"}, "role": null}'),
        ),
    )
    check(A13B, text, want)


def test_a13b_calls_inside_the_reasoning_are_reasoning() -> None:
    inner = calls(("get_current_date", {}))
    text = "<think>\nMaybe " + inner + "\n</think>\n<answer>\nNo call.\n</answer>"
    check(A13B, text, ("No call.", "Maybe " + inner, ()))


def test_a13b_text_after_the_calls_is_content() -> None:
    text = calls(("get_weather", {"city": "Seattle"})) + "\nThank you!"
    check(A13B, text, ("Thank you!", "", (("get_weather", '{"city": "Seattle"}'),)))


def test_a13b_empty_arguments_beside_others() -> None:
    text = calls(("get_current_date", {}), ("get_weather", {"city": "X", "days": 42}))
    check(A13B, text, ("", "", (("get_current_date", "{}"), ("get_weather", '{"city": "X", "days": 42}'))))


# ----------------------------------------------------------------------------- Hy-V4
S = ":opensource"


def arg(key: str, value: str) -> str:
    return f"<arg_key{S}>{key}</arg_key{S}><arg_value{S}>{value}</arg_value{S}>"


def call(name: str, args: str = "") -> str:
    return f"<tool_call{S}>{name}{args}</tool_call{S}>"


def block(body: str) -> str:
    return f"<tool_calls{S}>{body}</tool_calls{S}>"


def test_hy_v4_values_typed_by_the_schema_and_a_call_without_arguments() -> None:
    text = "sure!" + block(
        call("get_weather", arg("city", "Beijing") + arg("days", "3")) + call("get_current_date")
    )
    want = ("sure!", "", (("get_weather", '{"city": "Beijing", "days": 3}'), ("get_current_date", "{}")))
    check(HYV4, text, want)


def test_hy_v4_reasoning_from_the_prompt_and_whitespace_in_values() -> None:
    options = SessionOptions(tools=TOOLS, thinking=True)
    text = f"Plan.</think{S}>" + block("\n  " + call("get_weather", arg("city", " 北京 \n")))
    check(HYV4, text, ("", "Plan.", (("get_weather", '{"city": " 北京 \\n"}'),)), options)


def test_hy_v4_a_value_closer_inside_a_value_is_text() -> None:
    value = f"a</arg_value{S}>b"
    text = block(call("get_weather", arg("city", value)))
    check(HYV4, text, ("", "", (("get_weather", '{"city": "a</arg_value:opensource>b"}'),)))


@pytest.mark.parametrize("complete", [False, True])
def test_hy_v4_cut_inside_a_value(complete: bool) -> None:
    text = block(call("get_weather", arg("city", "Beijing")))
    text = text[: text.index("jing")]
    options = SessionOptions(tools=TOOLS, complete_tool_calls=complete)
    want = ("", "", ()) if complete else ("", "", (("get_weather", '{"city": "Bei"}'),))
    check(HYV4, text, want, options, "length")
