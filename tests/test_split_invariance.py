"""Split invariance, regression cases: five ``Parse`` streams an outside fuzz found (issue 27) whose
final message differed from ``ParseOnce`` of the same output, replayed through a live server, and
the two mechanisms behind them on the engine alone.

``split_invariance_cases.json`` is a copy of the reported data: each case's client messages of the
``Parse`` stream (serialized ``ParseRequest``, base64), the first carrying the ``Open``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import grpc
import pytest

import marker_tokenizers
from engine_helpers import QWEN3, enc, run, tools
from parsetier.messages import SessionOptions
from parsetier_api.v1 import parsetier_pb2 as pb

SERVICE = "/parsetier.v1.ParserService/"
CASES = json.loads((Path(__file__).parent / "split_invariance_cases.json").read_text())


def _messages(case: dict) -> list[pb.ParseRequest]:
    return [pb.ParseRequest.FromString(base64.b64decode(data)) for data in case["messages_base64"]]


def _once_request(messages: list[pb.ParseRequest]) -> pb.ParseOnceRequest:
    """The same output as one call: the Open, every step's ids joined, the Finish."""
    [finish] = [m.finish for m in messages if m.HasField("finish")]
    ids = [i for m in messages for step in m.steps for i in step.token_ids]
    return pb.ParseOnceRequest(open=messages[0].open, token_ids=ids, finish=finish)


@pytest.fixture(scope="module")
def channel(grpc_server):
    with grpc.insecure_channel(grpc_server.target) as channel:
        yield channel


@pytest.mark.parametrize("case", CASES, ids=[_messages(c)[0].open.model for c in CASES])
@pytest.mark.parametrize("complete", [False, True], ids=["streaming", "complete_tool_calls"])
def test_reported_streams_equal_parse_once(channel, case, complete):
    messages = _messages(case)
    messages[0].open.complete_tool_calls = complete
    parse = channel.stream_stream(
        SERVICE + "Parse",
        request_serializer=pb.ParseRequest.SerializeToString,
        response_deserializer=pb.ParseResponse.FromString,
    )
    once = channel.unary_unary(
        SERVICE + "ParseOnce",
        request_serializer=pb.ParseOnceRequest.SerializeToString,
        response_deserializer=pb.ParseOnceResponse.FromString,
    )
    streamed = list(parse(iter(messages), timeout=60))[-1].final.message
    whole = once(_once_request(messages), timeout=60).final.message
    assert streamed == whole


def test_a_run_ending_in_half_a_character_loses_nothing_at_the_end():
    """``DecodeStream`` answers a step of several ids whose text ends in an incomplete character
    with nothing at all, holding the whole characters before it too; the end of the output now
    settles what it holds (the incomplete bytes as U+FFFD) instead of dropping it, so one run and
    one id at a time give the same message (the GLM-4.5 case: ``word.`` streamed, ``word`` whole)."""
    glm = marker_tokenizers.registry().get("glm-4.5")
    ids = glm.tokenizer.encode("Plain text. 致死", add_special_tokens=False).ids
    half = glm.tokenizer.encode("🦜", add_special_tokens=False).ids[:-1]  # its first bytes
    assert len(half) == 2 and glm.tokenizer.decode(half) == "\ufffd"
    output = ids + half
    options = SessionOptions()
    whole = run(glm, [output], options, "stop").final.message
    one_by_one = run(glm, [[i] for i in output], options, "stop").final.message
    assert whole == one_by_one
    assert whole.content == "Plain text. 致死\ufffd"


def test_whitespace_after_a_bare_call_object_is_kept_however_split():
    """An unclosed Hermes call followed by text: the whitespace between the object and the text is
    the model's (content), whether it arrives with the text or in an earlier piece (the Qwen3 case:
    ``\\n`` dropped when the message boundary fell after ``}}\\n``)."""
    head = enc('Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n')
    tail = enc("阀门 more")
    options = SessionOptions(tools=tools(("get_weather", {"city": {"type": "string"}})))
    for complete in (False, True):
        # A request id seeds the call ids (without one, each session draws its own).
        opts = SessionOptions(tools=options.tools, complete_tool_calls=complete, request_id="r")
        together = run(QWEN3, [head + tail], opts, "stop").final.message
        apart = run(QWEN3, [head, tail], opts, "stop").final.message
        one_by_one = run(QWEN3, [[i] for i in head + tail], opts, "stop").final.message
        assert together == apart == one_by_one
        assert together.content == "Sure.\n阀门 more"
        assert [c.name for c in together.tool_calls] == ["get_weather"]


FOUND_BY_MAKE_FUZZ = {
    # A bracketed JSON list whose call's arguments broke ("arguments": 9{...}): the reader swallowed
    # the rest of the piece it broke in, so a "]" arriving later became content and one arriving
    # with it did not.
    "granite-3": (
        '<|tool_call|>[{"name": "f", "arguments": 9{"a": 1}}]',
        "stop",
    ),
    # Text after a pythonic call, passed through: a newline that ended a piece was held and dropped
    # at the closer, one followed by more text in the same piece was shown.
    "lfm2": (
        '<|tool_call_start|>[f(a=<|tool_call_start|>[f(a=<|im_start|>"Zü\n<|tool_call_end|>rich")]'
        "<|tool_call_end|>",
        "length",
    ),
}


@pytest.mark.parametrize("preset", sorted(FOUND_BY_MAKE_FUZZ))
def test_cases_make_fuzz_found_split_any_way_give_one_final(preset):
    """Two breaks ``make fuzz``'s first long run found (``test_fuzz_model_outputs`` and
    ``test_fuzz_family_output_splits``): every single cut, and one id at a time, give the final of
    one feed."""
    from hostile_outputs import samples

    sample = samples()[preset]
    options = dataclasses.replace(sample.options, request_id="r")  # call ids seeded alike
    text, reason = FOUND_BY_MAKE_FUZZ[preset]
    ids = sample.model.tokenizer.encode(text, add_special_tokens=False).ids
    whole = run(sample.model, [ids], options, reason).final
    assert run(sample.model, [[i] for i in ids], options, reason).final == whole
    for cut in range(1, len(ids)):
        assert run(sample.model, [ids[:cut], ids[cut:]], options, reason).final == whole, cut
