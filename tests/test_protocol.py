"""The sans-IO session protocol on its own: order rules, counting, limits and replies, with a real
model and no network. The servicer tests check the same rules through gRPC."""

from __future__ import annotations

import pytest

from parsetier.protocol.framing import once_request, once_response
from parsetier.protocol.rules import Limits, State
from parsetier.protocol.session import NeedModel, Reply, SessionProtocol
from parsetier.status import Code, StatusError
from parsetier_api.v1 import parsetier_pb2 as pb

HELLO = 9707


@pytest.fixture(scope="module")
def qwen3(registry):
    return registry.get("qwen3")


def _open(**kwargs) -> pb.ParseRequest:
    return pb.ParseRequest(open=pb.Open(model="qwen3", **kwargs))


def _steps(*steps: list[int]) -> pb.ParseRequest:
    return pb.ParseRequest(steps=[pb.Step(token_ids=s) for s in steps])


FINISH = pb.ParseRequest(finish=pb.Finish())


def _opened(qwen3, limits: Limits | None = None, **kwargs) -> SessionProtocol:
    protocol = SessionProtocol(limits or Limits())
    need = protocol.receive(_open(**kwargs))
    assert need == NeedModel("qwen3")
    reply = protocol.supply_model(qwen3)
    assert reply.opened and reply.response is None
    return protocol


def _code(fn) -> Code:
    with pytest.raises(StatusError) as info:
        fn()
    return info.value.code


def test_open_steps_finish_counts_and_sequences(qwen3):
    protocol = _opened(qwen3)
    first = protocol.receive(_steps([HELLO], [HELLO]))
    assert isinstance(first, Reply) and first.response is not None
    assert (first.response.sequence, first.response.client_messages) == (1, 2)
    assert protocol.receive(pb.ParseRequest()).response is None  # a keep-alive: counted, no reply
    last = protocol.receive(FINISH)
    assert last.finished and last.response.sequence == 2 and last.response.client_messages == 4
    assert last.response.final.usage.completion_tokens == 2
    counts = protocol.counts
    assert (counts.client_messages, counts.server_messages, counts.tokens) == (4, 2, 2)
    assert counts.model == "qwen3" and counts.finish_reason == "stop"
    protocol.receive_eof()  # closing after Finish is fine
    protocol.idle()


@pytest.mark.parametrize(
    "messages",
    [
        [_steps([HELLO])],  # steps before open
        [FINISH],  # finish before open
        ["open", _open()],  # a second open
        ["open", FINISH, _steps([HELLO])],  # data after finish
    ],
)
def test_order_errors_fail_the_session(qwen3, messages):
    protocol = SessionProtocol(Limits())
    for message in messages[:-1]:
        if message == "open":
            protocol.receive(_open())
            protocol.supply_model(qwen3)
        else:
            protocol.receive(message)
    assert _code(lambda: protocol.receive(messages[-1])) == Code.FAILED_PRECONDITION
    assert protocol.state is State.FAILED
    assert _code(lambda: protocol.receive(pb.ParseRequest())) == Code.FAILED_PRECONDITION


def test_eof_and_idle_before_finish_are_errors(qwen3):
    assert _code(_opened(qwen3).receive_eof) == Code.FAILED_PRECONDITION
    assert _code(_opened(qwen3).idle) == Code.DEADLINE_EXCEEDED


def test_session_errors_carry_their_status(qwen3):
    protocol = _opened(qwen3)
    assert _code(lambda: protocol.receive(_steps([HELLO, 10_000_000]))) == Code.INVALID_ARGUMENT
    assert protocol.state is State.FAILED
    bad_tools = SessionProtocol(Limits())
    bad_tools.receive(pb.ParseRequest(open=pb.Open(model="qwen3", tools_json="[")))
    assert _code(lambda: bad_tools.supply_model(qwen3)) == Code.INVALID_ARGUMENT


def test_limits(qwen3):
    limits = Limits(max_steps_per_message=2, max_tokens_per_session=3, max_text_bytes_per_session=4)
    assert _code(lambda: _opened(qwen3, limits).receive(_steps([1], [1], [1]))) == Code.RESOURCE_EXHAUSTED
    protocol = _opened(qwen3, limits)
    protocol.receive(_steps([HELLO] * 3))
    assert _code(lambda: protocol.receive(_steps([HELLO]))) == Code.RESOURCE_EXHAUSTED
    text = _opened(qwen3, limits)
    five_bytes = pb.ParseRequest(steps=[pb.Step(text="hello")])
    assert _code(lambda: text.receive(five_bytes)) == Code.RESOURCE_EXHAUSTED
    # The prompt tail is held to the token limit on its own, not added to the output.
    prompt = SessionProtocol(limits)
    prompt.receive(_open(prompt_token_ids=[HELLO] * 3))
    prompt.supply_model(qwen3)
    prompt.receive(_steps([HELLO] * 3))
    long_prompt = SessionProtocol(limits)
    long_prompt.receive(_open(prompt_token_ids=[HELLO] * 4))
    assert _code(lambda: long_prompt.supply_model(qwen3)) == Code.RESOURCE_EXHAUSTED


def test_parse_once_is_a_one_message_session(qwen3):
    """Same reply and same limit semantics as a stream sent open + all steps + finish at once."""
    limits = Limits(max_tokens_per_session=3)
    request = pb.ParseOnceRequest(
        open=pb.Open(model="qwen3", prompt_token_ids=[HELLO] * 3, output=pb.OUTPUT_KIND_DELTAS),
        token_ids=[HELLO] * 3,
    )
    once = SessionProtocol(limits, unary=True)
    assert once.receive(once_request(request)) == NeedModel("qwen3")
    response = once_response(once.supply_model(qwen3))

    stream = SessionProtocol(limits)
    stream.receive(
        pb.ParseRequest(open=request.open, steps=[pb.Step(token_ids=[HELLO] * 3)], finish=pb.Finish())
    )
    reply = stream.supply_model(qwen3).response
    assert list(response.deltas) == list(reply.deltas) and response.final == reply.final

    unary_default = SessionProtocol(limits, unary=True)
    unary_default.receive(once_request(pb.ParseOnceRequest(open=pb.Open(model="qwen3"), token_ids=[HELLO])))
    assert not once_response(unary_default.supply_model(qwen3)).deltas  # FINAL_ONLY by default
    too_long = SessionProtocol(limits, unary=True)
    too_long.receive(once_request(pb.ParseOnceRequest(open=pb.Open(model="qwen3"), token_ids=[HELLO] * 4)))
    assert _code(lambda: too_long.supply_model(qwen3)) == Code.RESOURCE_EXHAUSTED
