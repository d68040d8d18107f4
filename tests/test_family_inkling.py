"""Thinking Machines Inkling (``inkling``) through its marker tokenizer: no Inkling vocabulary is on
PyPI, so its control tokens sit at synthetic ids. An assistant turn is a run of typed blocks after a
``<|message_model|>`` header; a tool block's header repeats the tool's name and its payload is
``{"name": …, "args": {…}}``. Exact outputs, split invariance (docs/formats/inkling.md).
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, prompted, split_check

INKLING = marker_tokenizers.registry().get("inkling")
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={})
PROMPT = "<|message_system|>tool_declare<|content_xml|>[]<|end_message|><|message_model|>"
OPTS = prompted(INKLING, PROMPT, tools=TOOLS)


def block(kind: str, body: str, header: str = "") -> str:
    return f"<|message_model|>{header}<|content_{kind}|>{body}<|end_message|>"


def call(name: str, payload: str) -> str:
    return block("invoke_tool_json", payload, name)


def test_reasoning_text_and_parallel_calls_in_the_templates_key_order() -> None:
    """The template writes sorted keys (``args`` first); peers' tests and SGLang's structural tag
    write ``name`` first: both read."""
    text = (
        "<|content_thinking|>Two lookups.<|end_message|>"
        + block("text", "Checking.")
        + call("get_weather", '{"args":{"city":"Paris <|end_message|>"},"name":"get_weather"}')
        + call("get_time", '{"name": "get_time", "args": {}}')
        + "<|content_model_end_sampling|>"
    )
    want = (
        "Checking.",
        "Two lookups.",
        (("get_weather", '{"city":"Paris <|end_message|>"}'), ("get_time", "{}")),
    )
    assert split_check(INKLING, enc(INKLING, text), OPTS) == want


def test_the_header_name_is_markup_and_never_content() -> None:
    """SGLang issue 33181: the tool's name in the header leaked into content. The header's text is
    markup; the payload's name is the call's (a header that disagrees does not drop the call)."""
    text = call("get_time", '{"name": "get_weather", "args": {"city": "Oslo"}}')
    assert split_check(INKLING, enc(INKLING, text), OPTS) == ("", "", (("get_weather", '{"city": "Oslo"}'),))


def test_a_call_block_opened_inside_unclosed_reasoning_ends_it() -> None:
    payload = '{"name": "get_time", "args": {}}'
    text = f"<|content_thinking|>Need the time.<|content_invoke_tool_json|>{payload}<|end_message|>"
    assert split_check(INKLING, enc(INKLING, text), OPTS) == ("", "Need the time.", (("get_time", "{}"),))


def test_prompt_opened_blocks_decide_the_start() -> None:
    thinking = prompted(INKLING, PROMPT + "<|content_thinking|>", tools=TOOLS)
    text = "Hmm.<|end_message|>" + block("text", "Hi.")
    assert split_check(INKLING, enc(INKLING, text), thinking) == ("Hi.", "Hmm.", ())
    answering = prompted(INKLING, PROMPT + "<|content_text|>", tools=TOOLS)
    assert split_check(INKLING, enc(INKLING, "Hi.<|end_message|>"), answering) == ("Hi.", "", ())


def test_text_and_error_tool_blocks_are_shown_as_text() -> None:
    text = block("invoke_tool_text", "get_time now") + block("tool_error", "no such tool")
    assert split_check(INKLING, enc(INKLING, text), OPTS) == ("get_time nowno such tool", "", ())


def test_a_payload_that_is_no_call_is_delivered() -> None:
    """The recovery policy (docs/service.md): a block whose args are no JSON yields no call, and
    the block (its header and markers included) is delivered as content."""
    text = call("get_time", '{"name": "get_time", "args": now}')
    assert split_check(INKLING, enc(INKLING, text), OPTS) == (text.removeprefix("<|message_model|>"), "", ())


def test_look_alike_markers_are_text() -> None:
    prose = "Write <|content_invoke_tool_json|> then <|end_message|> to call."
    text = enc(INKLING, "<|content_text|>") + plain(INKLING, prose)
    assert split_check(INKLING, text, OPTS) == (prose, "", ())


def test_output_cut_mid_call_keeps_the_streamed_arguments() -> None:
    text = call("get_weather", '{"name": "get_weather", "args": {"city": "Pa').removesuffix("<|end_message|>")
    got = split_check(INKLING, enc(INKLING, text), OPTS, reason="length")
    assert got == ("", "", (("get_weather", '{"city": "Pa'),))
