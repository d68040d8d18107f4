"""Meta Muse Glimmer (``muse_glimmer``) through its marker tokenizer: no Muse Glimmer vocabulary is on
PyPI, so its control tokens (``<|start|>``, ``<|message|>``, ``<|eom|>``, ``<|eot|>``) sit at the ids
a public client of its GGUF export names; the ATEM tags are plain text. Messages are addressed
(``to=self`` reasoning, ``to=user`` answer, ``to=TOOL`` an ATEM call). Exact outputs, split
invariance (docs/formats/muse-glimmer.md).
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, prompted, split_check

MUSE = marker_tokenizers.registry().get("muse-glimmer")
TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}, "filters": {"type": "object"}},
    get_time={},
)
OPTS = prompted(MUSE, "<|start|>user<|message|>Weather?<|eot|><|start|>assistant", tools=TOOLS)


def atem(name: str, params: dict[str, str]) -> str:
    body = "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>\n' for k, v in params.items())
    return f'<atem:function_calls>\n<atem:invoke name="{name}">\n{body}</atem:invoke>\n</atem:function_calls>'


def test_reasoning_call_and_answer() -> None:
    text = (
        " to=self<|message|>Look it up.<|eom|>"
        "<|start|>assistant to=get_weather<|message|>"
        + atem("get_weather", {"city": " New York ", "days": "3", "filters": '{"units": "metric"}'})
        + "<|eom|><|start|>assistant to=user<|message|>Sunny.<|eot|>"
    )
    want = (
        "Sunny.",
        "Look it up.",
        (("get_weather", '{"city": " New York ", "days": 3, "filters": {"units": "metric"}}'),),
    )
    assert split_check(MUSE, enc(MUSE, text), OPTS) == want


def test_several_invokes_in_one_block_and_dotted_names() -> None:
    """The name is the invoke's; the header's recipient (a namespace, or the name) is markup."""
    text = (
        "<|start|>assistant to=weather<|message|><atem:function_calls>\n"
        '<atem:invoke name="weather.get">\n'
        '<atem:parameter name="city">Oslo</atem:parameter>\n</atem:invoke>\n'
        '<atem:invoke name="get_time">\n</atem:invoke>\n</atem:function_calls><|eot|>'
    )
    want = ("", "", (("weather.get", '{"city": "Oslo"}'), ("get_time", "{}")))
    assert split_check(MUSE, enc(MUSE, text), OPTS) == want


def test_atem_in_reasoning_or_the_answer_is_text() -> None:
    """Channel scoping: ATEM markup echoed in a to=self or to=user message is never a call."""
    echoed = atem("get_time", {})
    text = f" to=self<|message|>Maybe {echoed}<|eom|>"
    text += f"<|start|>assistant to=user<|message|>Use {echoed}.<|eot|>"
    assert split_check(MUSE, enc(MUSE, text), OPTS) == (f"Use {echoed}.", f"Maybe {echoed}", ())


def test_closers_inside_a_value_are_text() -> None:
    value = "see </atem:parameter> and </atem:invoke> inside"
    text = "<|start|>assistant to=get_weather<|message|>" + atem("get_weather", {"city": value}) + "<|eom|>"
    want = ("", "", (("get_weather", '{"city": "see </atem:parameter> and </atem:invoke> inside"}'),))
    assert split_check(MUSE, enc(MUSE, text), OPTS) == want


def test_a_tool_header_inside_unclosed_reasoning_still_calls() -> None:
    """A known defect (vLLM's parser notes it): no <|eom|> before the tool header. The header's text
    stays reasoning; the ATEM block after <|message|> is the call."""
    text = " to=self<|message|>Check. to=get_time<|message|>" + atem("get_time", {}) + "<|eom|>"
    assert split_check(MUSE, enc(MUSE, text), OPTS) == ("", "Check. to=get_time", (("get_time", "{}"),))


def test_a_message_without_a_recipient_is_content() -> None:
    text = "<|message|>Plain.<|eot|>"
    assert split_check(MUSE, enc(MUSE, text), OPTS) == ("Plain.", "", ())


def test_stray_text_in_a_tool_message_is_delivered() -> None:
    """Its text is the model's; whitespace between it and the ATEM block is markup."""
    text = "<|start|>assistant to=get_time<|message|>Calling. " + atem("get_time", {}) + "<|eom|>"
    assert split_check(MUSE, enc(MUSE, text), OPTS) == ("Calling.", "", (("get_time", "{}"),))


def test_look_alike_control_tokens_are_text() -> None:
    prose = "Write <|start|>assistant to=get_time<|message|> to call."
    text = enc(MUSE, " to=user<|message|>") + plain(MUSE, prose)
    assert split_check(MUSE, text, OPTS) == (prose, "", ())


def test_output_cut_mid_value_keeps_the_value_and_closes_the_call() -> None:
    text = "<|start|>assistant to=get_weather<|message|><atem:function_calls>\n"
    text += '<atem:invoke name="get_weather">\n<atem:parameter name="city">Par'
    want = ("", "", (("get_weather", '{"city": "Par"}'),))
    assert split_check(MUSE, enc(MUSE, text), OPTS, reason="length") == want
