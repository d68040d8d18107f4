"""Cohere Command (``command-a``) through its marker tokenizer: no Command vocabulary is on PyPI, so
its control tokens sit at synthetic ids. Outputs as Cohere's own templates (cohere-melody) write
them: ``<|START_THINKING|>`` plans, ``<|START_ACTION|>`` JSON call lists with ``tool_call_id`` /
``tool_name`` / ``parameters``, ``<|START_RESPONSE|>`` (Command 3) or ``<|START_TEXT|>`` (Command 4)
answers. Exact outputs, split invariance.
"""

from __future__ import annotations

import llguidance

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, plain, split_check
from marker_tokenizers import MARKERS
from parsetier.constraints.build import ConstraintRequest, derive
from parsetier.constraints.ir import to_lark
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions

COMMAND = marker_tokenizers.registry().get("command-a")
EOT = MARKERS["cohere-command"]["<|END_OF_TURN_TOKEN|>"]
TOOLS = tools(get_weather={"city": {"type": "string"}}, get_time={})
OPTS = SessionOptions(tools=TOOLS, request_id="r1")

ACTION = (
    "<|START_ACTION|>[\n"
    '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris <|END_ACTION|>"}},\n'
    '    {"tool_call_id": "1", "tool_name": "get_time", "parameters": {}}\n'
    "]<|END_ACTION|>"
)


def test_plan_and_parallel_calls() -> None:
    text = "<|START_THINKING|>Weather, then time.<|END_THINKING|>" + ACTION
    want = (
        "",
        "Weather, then time.",
        (("get_weather", '{"city": "Paris <|END_ACTION|>"}'), ("get_time", "{}")),
    )
    assert split_check(COMMAND, [*enc(COMMAND, text), EOT], OPTS) == want


def test_the_models_call_numbers_are_skipped_for_derived_ids() -> None:
    message, _, _ = parse(COMMAND, OPTS, enc(COMMAND, ACTION))
    assert [c.id[:14] for c in message.tool_calls] == ["chatcmpl-tool-"] * 2
    assert len({c.id for c in message.tool_calls}) == 2


def test_response_and_text_answers() -> None:
    for opener, closer in (("<|START_RESPONSE|>", "<|END_RESPONSE|>"), ("<|START_TEXT|>", "<|END_TEXT|>")):
        text = f"<|START_THINKING|><|END_THINKING|>{opener}Hello there.{closer}"
        assert split_check(COMMAND, [*enc(COMMAND, text), EOT], OPTS) == ("Hello there.", "", ())


def test_arguments_before_the_name_and_lookalikes_as_text() -> None:
    text = '<|START_ACTION|>[{"parameters": {"city": "Oslo"}, "tool_name": "get_weather"}]<|END_ACTION|>'
    assert split_check(COMMAND, enc(COMMAND, text), OPTS) == ("", "", (("get_weather", '{"city": "Oslo"}'),))
    prose = "Write <|START_ACTION|>[...] to act."
    assert split_check(COMMAND, plain(COMMAND, prose), OPTS) == (prose, "", ())


def test_a_derived_constraint_writes_cohere_s_own_list() -> None:
    """The format file names what the model writes (``keys``, ``write_list``): a constrained engine
    generates one ``[{"tool_call_id", "tool_name", "parameters"}, …]`` list closed by
    ``<|END_ACTION|>``, which parses back into the calls."""

    def matcher(parallel: bool = True) -> llguidance.LLMatcher:
        root = derive(COMMAND.grammar, ConstraintRequest(TOOLS, "required", None, parallel, "off"))
        m = llguidance.LLMatcher(tokenizer, to_lark(root), log_level=0)
        assert not m.is_error(), m.get_error()
        return m

    tokenizer = llguidance.LLTokenizer(COMMAND.tokenizer.to_str(), n_vocab=COMMAND.vocab_size)
    one = '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}'
    call = f"<|START_ACTION|>[{one}]<|END_ACTION|>"
    accepted = matcher()
    assert accepted.consume_tokens(enc(COMMAND, call)) and accepted.is_accepting(), accepted.get_error()
    two = f"<|START_ACTION|>[{one}, {one.replace('0', '1', 1)}]<|END_ACTION|>"
    assert matcher().consume_tokens(enc(COMMAND, two))
    assert not matcher(parallel=False).consume_tokens(enc(COMMAND, two))  # one call when parallel is off
    bare = '<|START_ACTION|>{"tool_name": "get_weather", "parameters": {"city": "Paris"}}<|END_ACTION|>'
    assert not matcher().consume_tokens(enc(COMMAND, bare))
    assert not matcher().consume_tokens(
        enc(COMMAND, '<|START_ACTION|>[{"tool_call_id": "0", "name": "get_weather", "arguments": {}}]')
    )
    assert split_check(COMMAND, enc(COMMAND, call), OPTS) == ("", "", (("get_weather", '{"city": "Paris"}'),))
