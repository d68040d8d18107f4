"""``SessionProtocol.receive_serialized``: the ``Parse`` stream's plain messages answered by the
core as ``ParseResponse`` bytes (``_core.step_reply``) mean the same reply, counts and state as
``receive`` building the message in Python, on a real model's output with reasoning and tool
calls, for every ``Open.output``; so do plain Finishes (``_core.finish_reply``);
what the core leaves (a bad id, the token limit, a wire dialect, a Finish whose final result needs
Python) goes to ``receive``'s rules unchanged."""

from __future__ import annotations

import json

import pytest

from parsetier import native
from parsetier.protocol.rules import Limits, State
from parsetier.protocol.session import SessionProtocol
from parsetier.status import Code, StatusError
from parsetier_api.v1 import parsetier_pb2 as pb

OUTPUT = (
    "<think>\nTwo lookups.\n</think>\n\nLet me check."
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)
TOOLS = json.dumps(
    [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
)


def _native(protocol: SessionProtocol) -> bool:
    """The session is on the native core (on the reference engine, or a model left on it, every
    message is ``receive``'s: no core writes a reply)."""
    return isinstance(protocol.session, native.NativeSession)


@pytest.fixture(scope="module")
def qwen3(registry):
    return registry.get("qwen3")


def _opened(qwen3, limits: Limits | None = None, **open_fields) -> SessionProtocol:
    protocol = SessionProtocol(limits or Limits())
    open_ = pb.Open(model="qwen3", tools_json=TOOLS, request_id="req-1", **open_fields)
    protocol.receive(pb.ParseRequest(open=open_))
    protocol.supply_model(qwen3)
    return protocol


def _step(*ids: int) -> pb.ParseRequest:
    return pb.ParseRequest(steps=[pb.Step(token_ids=list(ids))])


def _as_message(response) -> pb.ParseResponse | None:
    if response is None:
        return None
    if isinstance(response, bytes):
        return pb.ParseResponse.FromString(response)
    return response


@pytest.mark.parametrize(
    "output",
    [
        pb.OUTPUT_KIND_DELTAS,
        pb.OUTPUT_KIND_EVENTS,
        pb.OUTPUT_KIND_DELTAS_AND_EVENTS,
        pb.OUTPUT_KIND_FINAL_ONLY,
    ],
)
@pytest.mark.parametrize("per_message", [1, 3])
def test_serialized_replies_equal_the_python_ones(qwen3, output, per_message):
    ids = qwen3.tokenizer.encode(OUTPUT, add_special_tokens=False).ids
    python, core = _opened(qwen3, output=output), _opened(qwen3, output=output)
    served = 0
    for at in range(0, len(ids), per_message):
        message = _step(*ids[at : at + per_message])
        want = python.receive(message)
        got = core.receive_serialized(message)
        served += isinstance(got.response, bytes)
        assert _as_message(got.response) == _as_message(want.response)
        assert (got.opened, got.finished) == (want.opened, want.finished)
    assert bool(served) is (_native(core) and output != pb.OUTPUT_KIND_FINAL_ONLY)  # the core wrote them
    finish = pb.ParseRequest(finish=pb.Finish())
    got, want = core.receive_serialized(finish), python.receive(finish)
    assert isinstance(got.response, bytes) is _native(core)  # the core answered the plain Finish
    assert _as_message(got.response) == want.response
    assert (got.finished, core.state, core.counts.finish_reason) == (True, State.FINISHED, "tool_calls")
    assert python.counts.finish_reason == "tool_calls"
    assert (core.counts.tokens, core.counts.client_messages, core.counts.server_messages) == (
        python.counts.tokens,
        python.counts.client_messages,
        python.counts.server_messages,
    )
    assert (core.counts.deltas, core.counts.events, core.ledger.digest) == (
        python.counts.deltas,
        python.counts.events,
        python.ledger.digest,
    )


@pytest.mark.parametrize(
    "finish",
    [
        pb.Finish(reason=pb.FINISH_REASON_LENGTH),
        pb.Finish(reason=pb.FINISH_REASON_ABORT),
        pb.Finish(stop_token_id=151645),
        pb.Finish(stop_string="STOP"),
    ],
)
@pytest.mark.parametrize("include_stop_text", [False, True])
@pytest.mark.parametrize("cut", [5, 20])
def test_a_plain_finish_answered_by_the_core_is_the_python_reply(qwen3, finish, include_stop_text, cut):
    """The same reply, counts and final result, mid-reasoning or mid-call; a matched
    stop the final result shows (``include_stop_text``) stays Python's."""
    ids = qwen3.tokenizer.encode(OUTPUT, add_special_tokens=False).ids[:cut]
    python = _opened(qwen3, include_stop_text=include_stop_text)
    core = _opened(qwen3, include_stop_text=include_stop_text)
    for protocol in (python, core):
        protocol.receive(_step(*ids))
    message = pb.ParseRequest(finish=finish)
    got, want = core.receive_serialized(message), python.receive(message)
    shown_stop = include_stop_text and finish.WhichOneof("matched_stop") is not None
    assert isinstance(got.response, bytes) is (_native(core) and not shown_stop)
    assert _as_message(got.response) == want.response
    assert got.finished and want.finished and core.state is State.FINISHED
    assert core.counts.finish_reason == python.counts.finish_reason
    assert (core.counts.client_messages, core.counts.server_messages, core.ledger.digest) == (
        python.counts.client_messages,
        python.counts.server_messages,
        python.ledger.digest,
    )
    with pytest.raises(StatusError):  # finished: nothing more
        core.receive_serialized(_step(9707))


def test_a_finish_after_a_text_step_or_logprobs_is_answered_in_python(qwen3):
    text = _opened(qwen3)
    text.receive(pb.ParseRequest(steps=[pb.Step(text="Hello", text_tokens=1)]))
    reply = text.receive_serialized(pb.ParseRequest(finish=pb.Finish()))
    assert isinstance(reply.response, pb.ParseResponse) and reply.response.final.message.content == "Hello"
    collected = _opened(qwen3, output=pb.OUTPUT_KIND_FINAL_ONLY)
    step = pb.Step(token_ids=[9707])
    step.logprobs.token_logprobs.append(-0.5)
    collected.receive(pb.ParseRequest(steps=[step]))
    reply = collected.receive_serialized(pb.ParseRequest(finish=pb.Finish()))
    assert isinstance(reply.response, pb.ParseResponse) and len(reply.response.final.logprobs) == 1


def test_what_the_core_leaves_follows_receives_rules(qwen3):
    protocol = _opened(qwen3, limits=Limits(max_tokens_per_session=3))
    assert isinstance(
        protocol.receive_serialized(_step(9707)).response, bytes if _native(protocol) else pb.ParseResponse
    )
    with pytest.raises(StatusError) as bad:
        protocol.receive_serialized(_step(10**9))  # not in the vocabulary
    assert bad.value.code is Code.INVALID_ARGUMENT and protocol.state is State.FAILED
    limited = _opened(qwen3, limits=Limits(max_tokens_per_session=3))
    limited.receive_serialized(_step(9707, 9707))
    with pytest.raises(StatusError) as over:
        limited.receive_serialized(_step(9707, 9707))
    assert over.value.code is Code.RESOURCE_EXHAUSTED and limited.state is State.FAILED


def test_a_wire_dialect_session_is_answered_in_python(qwen3):
    wire = pb.WireOptions(dialect=pb.WIRE_DIALECT_OPENAI_CHAT, response_id="r-1", model="m", stream=True)
    protocol = _opened(qwen3, wire=wire)
    reply = protocol.receive_serialized(_step(9707))
    assert isinstance(reply.response, pb.ParseResponse) and reply.response.wire
