"""Poolside Laguna (``laguna``, a preset of the GLM grammar) through its marker tokenizer: no Laguna
vocabulary is on PyPI. Its calls are GLM-4.5's ``<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V
</arg_value>\\n</tool_call>``, string values verbatim (docs/formats/glm.md, "Poolside Laguna").
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, split_check
from parsetier.messages import SessionOptions

LAG = marker_tokenizers.registry().get("laguna")
TOOLS = tools(
    write_file={"content": {"type": "string"}, "mode": {"type": "integer"}},
    get_weather={"city": {"type": "string"}},
)
OPTS = SessionOptions(tools=TOOLS)


def call(name: str, *kv: tuple[str, str], sep: str = "\n") -> str:
    body = "".join(f"<arg_key>{k}</arg_key>{sep}<arg_value>{v}</arg_value>{sep}" for k, v in kv)
    return f"<tool_call>{name}{sep}{body}</tool_call>"


def test_string_values_keep_their_whitespace_and_typed_values_are_read() -> None:
    code = "    def f():\n        return 1\n"
    text = call("write_file", ("content", code), ("mode", " 420 "))
    want = ("", "", (("write_file", '{"content": "    def f():\\n        return 1\\n", "mode": 420}'),))
    assert split_check(LAG, enc(LAG, text), OPTS) == want


def test_compact_calls_without_line_breaks_and_reasoning() -> None:
    text = "<think>Weather.</think>" + call("get_weather", ("city", "Paris"), sep="")
    want = ("", "Weather.", (("get_weather", '{"city": "Paris"}'),))
    assert split_check(LAG, enc(LAG, text), OPTS) == want


def test_a_call_with_a_blank_name_is_no_call() -> None:
    got = split_check(LAG, enc(LAG, "<tool_call>   </tool_call>"), OPTS)
    assert got[2] == ()
