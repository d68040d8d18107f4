"""Step-3 (``step-3``, the original ``steptml`` format) through its test vocabulary: no Step-3
vocabulary is on PyPI, so its ``<｜…｜>`` call markers, ``<think>`` and ``</think>`` are single
special tokens at synthetic ids over a one-token-per-byte vocabulary (tests/marker_tokenizers.py).
Outputs follow the format peers parse (vLLM's, SGLang's and SMG's Step-3 parsers and their tests):
the output starts inside the reasoning; each call is ``<｜tool_call_begin｜>function<｜tool_sep｜>``
and a ``<steptml:invoke>`` with one ``<steptml:parameter>`` per argument (docs/formats/step3.md).
Exact outputs, split invariance, both engines.
"""

from __future__ import annotations

import pytest

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, prompted, split_check
from native_diff import compare_splits
from parsetier.messages import SessionOptions

STEP3 = marker_tokenizers.registry().get("step-3")
EOS = marker_tokenizers.MARKERS["step-3"]["<|EOT|>"]
TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}},
    typed={"b": {"type": "boolean"}, "n": {"type": "number"}, "o": {"type": "object"}, "z": {"type": "null"}},
    refresh={},
)
OPTS = SessionOptions(tools=TOOLS)


def invoke(name: str, *kv: tuple[str, str], typed: bool = True) -> str:
    params = "".join(f'<steptml:parameter name="{k}">{v}</steptml:parameter>\n' for k, v in kv)
    head = "function<｜tool_sep｜>" if typed else ""
    body = f'<steptml:invoke name="{name}">\n{params}</steptml:invoke>'
    return f"<｜tool_call_begin｜>{head}{body}<｜tool_call_end｜>"


def block(*calls: str) -> str:
    return "<｜tool_calls_begin｜>\n" + "\n".join(calls) + "\n<｜tool_calls_end｜>"


def check(text: str, want: tuple, options: SessionOptions = OPTS, reason: str = "stop") -> None:
    ids = enc(STEP3, text) + ([EOS] if reason == "stop" else [])
    assert split_check(STEP3, ids, options, reason) == want
    compare_splits(STEP3, options, ids, reason)


def test_reasoning_content_and_parallel_calls() -> None:
    text = "Two lookups.</think>Let me help you.\n" + block(
        invoke("get_weather", ("city", "Tokyo"), ("days", "2")), invoke("refresh", typed=False)
    )
    want = (
        "Let me help you.",
        "Two lookups.",
        (("get_weather", '{"city": "Tokyo", "days": 2}'), ("refresh", "{}")),
    )
    check(text, want)


def test_values_are_typed_by_the_schema_and_strings_keep_their_whitespace() -> None:
    text = "r</think>" + block(
        invoke("typed", ("b", "true"), ("n", "3.14"), ("o", '{"nested": "value"}'), ("z", "null")),
        invoke("get_weather", ("city", "    if x:\n"), ("days", "x")),
    )
    want = (
        "",
        "r",
        (
            ("typed", '{"b": true, "n": 3.14, "o": {"nested": "value"}, "z": null}'),
            ("get_weather", '{"city": "    if x:\\n", "days": "x"}'),
        ),
    )
    check(text, want)


def test_a_parameter_closer_inside_a_value_is_text() -> None:
    value = 'He said "hi" </steptml:parameter> then left'
    text = "r</think>" + block(invoke("get_weather", ("city", value)))
    check(text, ("", "r", (("get_weather", '{"city": "He said \\"hi\\" </steptml:parameter> then left"}'),)))


def test_a_call_block_inside_the_reasoning_is_reasoning() -> None:
    inner = block(invoke("refresh"))
    text = "Maybe " + inner + " no.</think>Nothing to call."
    check(text, ("Nothing to call.", "Maybe " + inner + " no.", ()))


def test_a_prompt_that_closed_the_reasoning_starts_in_content() -> None:
    options = prompted(STEP3, "<think>\n</think>\n", tools=TOOLS)
    check("Hi." + block(invoke("refresh")), ("Hi.", "", (("refresh", "{}"),)), options)


def test_look_alike_markers_are_text() -> None:
    prose = "Type <｜tool_calls_begin｜> to call."
    ids = enc(STEP3, "r</think>") + plain(STEP3, prose)
    assert split_check(STEP3, ids, OPTS) == (prose, "r", ())
    compare_splits(STEP3, OPTS, ids)


@pytest.mark.parametrize("complete", [False, True])
def test_cut_inside_a_value(complete: bool) -> None:
    text = "r</think>" + block(invoke("get_weather", ("city", "Tokyo"), ("days", "2")))
    text = text[: text.index("</steptml:parameter>")]
    options = SessionOptions(tools=TOOLS, complete_tool_calls=complete)
    want = ("", "r", ()) if complete else ("", "r", (("get_weather", '{"city": "Tokyo"}'),))
    check(text, want, options, "length")
