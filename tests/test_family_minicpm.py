"""MiniCPM-4 / 5 (``minicpm``) through its marker tokenizer: no MiniCPM vocabulary is on PyPI. Calls
are plain-text XML, ``<function name="N"><param name="K">V</param></function>``, values typed by the
tool's schema, a value in CDATA kept verbatim (docs/formats/minicpm.md). Exact outputs, split
invariance.
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import arguments_before, enc, split_check
from parsetier.messages import SessionOptions

CPM = marker_tokenizers.registry().get("minicpm-5")
TOOLS = tools(
    get_weather={"city": {"type": "string"}, "date": {"type": "string"}},
    sum_values={"nums": {"type": "array"}, "exact": {"type": "boolean"}},
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)


def fn(name: str, *params: tuple[str, str]) -> str:
    return (
        f'<function name="{name}">'
        + "".join(f'<param name="{k}">{v}</param>' for k, v in params)
        + "</function>"
    )


def test_reasoning_text_and_typed_parallel_calls() -> None:
    text = (
        "<think>Two calls.</think>Intro.\n"
        + fn("get_weather", ("city", "上海"), ("date", "2024-06-27"))
        + "\n"
        + fn("sum_values", ("nums", "[7,8,9]"), ("exact", "false"))
        + "\n"
    )
    want = (
        "Intro.",
        "Two calls.",
        (
            ("get_weather", '{"city": "上海", "date": "2024-06-27"}'),
            ("sum_values", '{"nums": [7, 8, 9], "exact": false}'),
        ),
    )
    assert split_check(CPM, enc(CPM, text + "<|im_end|>"), OPTS) == want


def test_cdata_values_are_verbatim() -> None:
    """Line breaks, markup and a look-alike closer inside CDATA are the value."""
    text = fn("get_weather", ("city", "<![CDATA[北\n京 </param> <b>]]>"), ("date", "today"))
    want = ("", "", (("get_weather", '{"city": "北\\n京 </param> <b>", "date": "today"}'),))
    assert split_check(CPM, enc(CPM, text), OPTS) == want


def test_a_closer_inside_a_plain_value_is_text_unless_the_structure_follows() -> None:
    text = fn("get_weather", ("city", "a </param> b"))
    assert split_check(CPM, enc(CPM, text), OPTS) == ("", "", (("get_weather", '{"city": "a </param> b"}'),))


def test_a_call_without_parameters() -> None:
    assert split_check(CPM, enc(CPM, '<function name="get_time"></function>'), OPTS) == (
        "",
        "",
        (("get_time", "{}"),),
    )


def test_string_values_stream() -> None:
    text = fn("get_weather", ("city", "Paris is lovely"))
    partway = len(enc(CPM, text[: text.index(" lovely")]))
    assert arguments_before(CPM, enc(CPM, text), OPTS, partway) == '{"city": "Paris is'


def test_thinking_prompt_starts_in_reasoning() -> None:
    options = SessionOptions(tools=TOOLS, thinking=True)
    assert split_check(CPM, enc(CPM, "Hmm.</think>Hi."), options) == ("Hi.", "Hmm.", ())


def test_output_cut_inside_a_value() -> None:
    """The call keeps what was written, closed as valid JSON (docs/engine.md, truncation)."""
    text = '<function name="get_weather"><param name="city">Par'
    assert split_check(CPM, enc(CPM, text), OPTS, reason="length") == (
        "",
        "",
        (("get_weather", '{"city": "Par"}'),),
    )


# --- MiniCPM-4: <|thought_start|> reasoning, fenced pythonic calls -------------------------------
CPM4 = marker_tokenizers.registry().get("minicpm-4")
TOOLS4 = tools(
    get_currency_exchange_rate={
        "from_currency": {"type": "string"},
        "to_currency": {"type": "string"},
        "amount": {"type": "number"},
    },
    get_time={},
)
OPTS4 = SessionOptions(tools=TOOLS4)


def test_minicpm4_thought_then_a_fenced_python_call() -> None:
    """The shape of MiniCPM4-MCP's published training data."""
    text = (
        "<|thought_start|>\nI will call get_currency_exchange_rate.\n<|thought_end|>\n"
        '<|tool_call_start|>\n```python\nget_currency_exchange_rate(from_currency="USD",to_currency="EUR",amount=500)'
        "\n```\n<|tool_call_end|>\n<|im_end|>"
    )
    want = (
        "",
        "I will call get_currency_exchange_rate.",
        (("get_currency_exchange_rate", '{"from_currency": "USD", "to_currency": "EUR", "amount": 500}'),),
    )
    assert split_check(CPM4, enc(CPM4, text), OPTS4) == want


def test_minicpm4_several_calls_python_literals_and_an_answer() -> None:
    text = (
        "Converting.\n<|tool_call_start|>\n```python\n"
        "get_currency_exchange_rate(from_currency='GBP', amount=1.5)\nget_time()\n```\n<|tool_call_end|>"
    )
    want = (
        "Converting.",
        "",
        (("get_currency_exchange_rate", '{"from_currency": "GBP", "amount": 1.5}'), ("get_time", "{}")),
    )
    assert split_check(CPM4, enc(CPM4, text), OPTS4) == want


def test_minicpm4_a_block_that_is_no_call_is_delivered() -> None:
    text = "<|tool_call_start|>\n```python\nprint('hi')\n```\n<|tool_call_end|>"
    got = split_check(CPM4, enc(CPM4, text), OPTS4)
    assert got[2] == () and "print('hi')" in got[0]


def test_minicpm4_answer_after_reasoning_and_look_alikes() -> None:
    text = "<|thought_start|>Plain.<|thought_end|>Write ```python\nf()\n``` to call."
    assert split_check(CPM4, enc(CPM4, text), OPTS4) == ("Write ```python\nf()\n``` to call.", "Plain.", ())
