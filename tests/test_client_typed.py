"""The Python clients' typed results: the finish reason prints its name, finals and deltas are
immutable records, and the raw proto stays within reach (``Final.proto``, the raw replies)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import Delta, Final, FinishReason, Message, ToolCall, ToolCallDelta, Usage, final_dict
from parsetier_client.result import delta_dict


def _final(reason: int = pb.FINISH_REASON_TOOL_CALLS) -> pb.Final:
    call = pb.ToolCall(id="call-1", name="get_weather", arguments='{"city": "Paris"}')
    message = pb.AssistantMessage(content="Checking.", reasoning="Need weather.", tool_calls=[call])
    return pb.Final(
        finish_reason=reason,
        usage=pb.Usage(completion_tokens=12, reasoning_tokens=4),
        message=message,
        token_ids=[1, 2],
        wire=b"data: [DONE]\n\n",
    )


def test_final_is_typed_and_prints_the_reasons_name() -> None:
    raw = _final()
    final = Final.of(raw)
    assert final.finish_reason is FinishReason.TOOL_CALLS
    assert str(final.finish_reason) == f"{final.finish_reason}" == "tool_calls"
    assert "TOOL_CALLS" in repr(final) and "4" not in str(final.finish_reason)
    assert final.finish_reason == pb.FINISH_REASON_TOOL_CALLS  # the proto's number, still
    assert final.usage == Usage(completion_tokens=12, reasoning_tokens=4)
    assert final.message == Message(
        content="Checking.",
        reasoning="Need weather.",
        tool_calls=(ToolCall(id="call-1", name="get_weather", arguments='{"city": "Paris"}'),),
    )
    assert final.token_ids == (1, 2) and final.wire == b"data: [DONE]\n\n"
    assert final.proto is raw  # the raw message for what the records leave out
    with pytest.raises(dataclasses.FrozenInstanceError):
        final.usage = Usage(0, 0)  # type: ignore[misc]
    assert json.dumps(final_dict(final)) == json.dumps(final_dict(raw))


@pytest.mark.parametrize(
    ("reason", "name"),
    [
        (pb.FINISH_REASON_STOP, "stop"),
        (pb.FINISH_REASON_LENGTH, "length"),
        (pb.FINISH_REASON_ABORT, "abort"),
        (pb.FINISH_REASON_UNSPECIFIED, ""),
    ],
)
def test_every_reason_has_its_name(reason: int, name: str) -> None:
    assert str(Final.of(_final(reason)).finish_reason) == name


def test_a_reason_newer_than_the_client_is_kept_as_its_number() -> None:
    final = Final.of(_final(99))
    assert final.finish_reason == 99 and not isinstance(final.finish_reason, FinishReason)


def test_deltas_are_records_with_the_protos_fields() -> None:
    raw = pb.Delta(
        content="Hi",
        tool_calls=[pb.ToolCallDelta(index=1, id="c", name="f", arguments="{")],
        token_ids=[7],
    )
    delta = Delta.of(raw)
    assert delta == Delta("", "Hi", (ToolCallDelta(1, "c", "f", "{"),), (), (7,))
    assert delta.tool_calls[0].index == 1 and delta.content == "Hi"
    assert delta_dict(delta) == delta_dict(raw)
    # logprobs in the proto's own JSON mapping (OpenAI's shapes are the server's wire dialects')
    lp = pb.TokenLogprob(token_id=7, token="Hi", bytes=b"Hi", logprob=-0.5)
    assert delta_dict(Delta.of(pb.Delta(logprobs=[lp])))["logprobs"] == [
        {"token_id": 7, "token": "Hi", "bytes": "SGk=", "logprob": -0.5}
    ]
    assert Delta.of(pb.Delta(reasoning="r")) == Delta("r", "", (), (), ())
