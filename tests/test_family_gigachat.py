"""GigaChat 3 / 3.1 (``gigachat-3``) and 3.5 (``gigachat-3.5``) through their marker tokenizers: no
GigaChat vocabulary is on PyPI, so the control tokens sit at synthetic ids. GigaChat 3 ends the
assistant message and writes the call as the next message, of role ``function call``; 3.1 writes it
after ``<|function_call|>``; 3.5 writes DSML-style ``<｜GCML｜…>`` tags (docs/formats/gigachat.md).
Exact outputs, split invariance.
"""

from __future__ import annotations

import json

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, prompted, split_check
from parsetier.messages import SessionOptions

REGISTRY = marker_tokenizers.registry()
G3 = REGISTRY.get("gigachat-3")
G35 = REGISTRY.get("gigachat-3.5")
TOOLS = tools(get_weather={"city": {"type": "string"}, "days": {"type": "integer"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)
PROMPT = "user<|role_sep|>\nWeather?<|message_sep|>\n\nassistant<|role_sep|>\n"


def call_json(name: str, args: dict) -> str:
    """The template's own spelling: the name spliced in, the arguments through ``tojson``."""
    return '{"name": "' + name + '", "arguments": ' + json.dumps(args, ensure_ascii=False) + "}"


def test_gigachat3_answer_then_the_function_call_message() -> None:
    text = (
        "Checking the weather.<|message_sep|>\n\nfunction call<|role_sep|>\n"
        + call_json("get_weather", {"city": "Москва", "days": 2})
        + "</s>"
    )
    want = ("Checking the weather.", "", (("get_weather", '{"city": "Москва", "days": 2}'),))
    assert split_check(G3, enc(G3, text), prompted(G3, PROMPT, tools=TOOLS)) == want


def test_gigachat3_call_without_content_and_its_closing_separator() -> None:
    text = (
        "<|message_sep|>\n\nfunction call<|role_sep|>\n" + call_json("get_time", {}) + "<|message_sep|>\n\n"
    )
    assert split_check(G3, enc(G3, text), OPTS) == ("", "", (("get_time", "{}"),))


def test_gigachat31_function_call_token() -> None:
    text = "I'll check.<|function_call|>" + call_json("get_weather", {"city": "Paris"}) + "</s>"
    assert split_check(G3, enc(G3, text), OPTS) == (
        "I'll check.",
        "",
        (("get_weather", '{"city": "Paris"}'),),
    )


def test_gigachat3_plain_answer() -> None:
    assert split_check(G3, enc(G3, "Hello there.<|message_sep|>\n\n"), OPTS) == ("Hello there.", "", ())


def test_gigachat3_role_name_without_the_token_is_text() -> None:
    """ "function call" is text; only together with the real <|role_sep|> token is it a header."""
    prose = 'A function call<|role_sep|> header starts a call: {"name": "f"}'
    assert split_check(G3, plain(G3, prose), OPTS) == (prose, "", ())


def test_gigachat3_output_cut_mid_call_keeps_the_streamed_arguments() -> None:
    text = '<|function_call|>{"name": "get_weather", "arguments": {"city": "Par'
    assert split_check(G3, enc(G3, text), OPTS, reason="length") == (
        "",
        "",
        (("get_weather", '{"city": "Par'),),
    )


def gcml_invoke(name: str, *params: tuple[str, str, bool]) -> str:
    body = "".join(
        f'<｜GCML｜parameter name="{k}" string="{str(s).lower()}">{v}</｜GCML｜parameter>'
        for k, v, s in params
    )
    return f'<｜GCML｜invoke name="{name}">{body}</｜GCML｜invoke>'


def test_gigachat35_typed_parameters_and_parallel_calls() -> None:
    text = (
        "Looking.<｜GCML｜tool_calls>\n"
        + gcml_invoke("get_weather", ("city", "Tokyo </｜GCML｜parameter> x", True), ("days", "3", False))
        + "\n"
        + gcml_invoke("get_time")
        + "\n</｜GCML｜tool_calls>"
    )
    want = (
        "Looking.",
        "",
        (("get_weather", '{"city": "Tokyo </｜GCML｜parameter> x", "days": 3}'), ("get_time", "{}")),
    )
    assert split_check(G35, enc(G35, text), OPTS) == want


def test_gigachat35_string_false_values_are_json() -> None:
    store = tools(store={"payload": {"type": "object"}})
    text = (
        "<｜GCML｜tool_calls>"
        + gcml_invoke("store", ("payload", '{"a": 1}', False))
        + "</｜GCML｜tool_calls>"
    )
    assert split_check(G35, enc(G35, text), SessionOptions(tools=store)) == (
        "",
        "",
        (("store", '{"payload": {"a": 1}}'),),
    )


def test_gigachat35_tags_written_as_text_stay_text() -> None:
    prose = 'Use <｜GCML｜invoke name="get_time"> to call.'
    assert split_check(G35, plain(G35, prose), OPTS) == (prose, "", ())


def test_gigachat35_reasoning_prompt_and_blocks_joined_by_blank_lines() -> None:
    """The template's reasoning switch ends the prompt with ``<think>``; the reasoning, the answer
    and the call block follow, joined by blank lines, then ``</s>``."""
    options = prompted(G35, "assistant<|role_sep|>\n<think>", tools=TOOLS)
    text = (
        "Need the weather.</think>\n\nChecking.\n\n<｜GCML｜tool_calls>\n"
        + '<｜GCML｜invoke name="get_weather">\n'
        + '<｜GCML｜parameter name="city" string="true">Oslo</｜GCML｜parameter>\n'
        + "</｜GCML｜invoke>\n</｜GCML｜tool_calls></s>"
    )
    want = ("Checking.", "Need the weather.", (("get_weather", '{"city": "Oslo"}'),))
    assert split_check(G35, enc(G35, text), options) == want


def test_gigachat35_reasoning_off_and_a_stray_closer() -> None:
    text = "Answer.</think> More.</s>"
    assert split_check(G35, enc(G35, text), prompted(G35, "assistant<|role_sep|>\n", tools=TOOLS)) == (
        "Answer. More.",
        "",
        (),
    )
