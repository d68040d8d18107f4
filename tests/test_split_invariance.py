"""Split invariance, regression cases: five ``Parse`` streams an outside fuzz found (issue 27) whose
final message differed from ``ParseOnce`` of the same output, replayed through a live server, and
the two mechanisms behind them on the engine alone.

``split_invariance_cases.json`` is a copy of the reported data: each case's client messages of the
``Parse`` stream (serialized ``ParseRequest``, base64), the first carrying the ``Open``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import grpc
import pytest

from engine_helpers import QWEN3, enc, run, tools
from parsetier.messages import SessionOptions
from parsetier.models import ModelRegistry
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
    glm = ModelRegistry().get("glm-4.5")
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
        opts = SessionOptions(tools=options.tools, complete_tool_calls=complete)
        together = run(QWEN3, [head + tail], opts, "stop").final.message
        apart = run(QWEN3, [head, tail], opts, "stop").final.message
        one_by_one = run(QWEN3, [[i] for i in head + tail], opts, "stop").final.message
        assert together == apart == one_by_one
        assert together.content == "Sure.\n阀门 more"
        assert [c.name for c in together.tool_calls] == ["get_weather"]
