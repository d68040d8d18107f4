"""A session that ends with a status, forwarded in its dialect: the official SDKs, reading the
bytes a gateway forwards from a live server (``Parse`` trailers, ``ParseBatch``'s
``SessionStatus.wire``, ``ParseOnce``), raise or report the server's error with its message;
and ``n`` > 1 choices joined by the client's ``WireJoin`` read as one response."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import grpc
import openai
import pytest

import test_dialects as td
from parsetier.engine.wire import WireRequest, native_renderer, python_renderer
from parsetier.engine.wire.errors import error_bytes, http_status
from parsetier.messages import Delta, ToolCallDelta
from parsetier.protocol.rules import Limits
from parsetier.protocol.session import SessionProtocol
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import WireJoin, wire_error, wire_of
from parsetier_client.requests import open_message, wire_options

BAD_ID = 10_000_000
GOOD = [785, 4226, 374]
"""A few ids of qwen3's vocabulary ("The answer is"), then one that is not in it."""


def failed_stream(client, dialect: str, stream: bool) -> tuple[bytes, grpc.RpcError]:
    """A Parse stream fed a bad id after some output: every byte ``wire()`` gave, and the error."""
    session = client.open(
        "qwen3",
        output="final",
        wire=td.wire(dialect, stream),
        completion=dialect == "openai_completions",
    )
    for tid in [*GOOD, BAD_ID]:
        session.send([tid])
    pieces = []
    with pytest.raises(grpc.RpcError) as error:
        for piece in session.wire():
            pieces.append(piece)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return b"".join(pieces), error.value


def sdk_error(
    dialect: str, sdks: tuple, loopback: td.Loopback, body: bytes, stream: bool, status: int = 200
) -> tuple[str, Any]:
    """What the dialect's SDK makes of ``body`` (served with HTTP ``status``): the message of the
    error it raised or reported, and the exception or event."""
    oai, ant = sdks
    loopback.serve(body, stream, status)
    if dialect == "anthropic_messages":
        request = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        with pytest.raises(anthropic.APIStatusError) as raised:
            if stream:
                with ant.messages.stream(**request) as events:
                    for _ in events:
                        pass
            else:
                ant.messages.create(**request)
        return raised.value.body["error"]["message"], raised.value
    if dialect == "openai_responses" and stream:
        with oai.responses.stream(model="m", input="hi") as events:
            seen = [event for event in events if event.type == "error"]
            with pytest.raises(RuntimeError):  # no response.completed: the SDK has no response
                events.get_final_response()
        (event,) = seen
        return event.message, event
    with pytest.raises(openai.APIError) as raised:
        if dialect == "openai_responses":
            oai.responses.create(model="m", input="hi")
        elif dialect == "openai_completions" and stream:
            for _ in oai.completions.create(model="m", prompt="hi", stream=True):
                pass
        elif dialect == "openai_completions":
            oai.completions.create(model="m", prompt="hi")
        elif stream:
            for _ in oai.chat.completions.create(model="m", messages=[], stream=True):
                pass
        else:
            oai.chat.completions.create(model="m", messages=[])
    return raised.value.body["message"], raised.value  # the SDK's body: the error object


@pytest.fixture(scope="module")
def sdks(oai, ant) -> tuple:
    return oai, ant


oai = td.oai
ant = td.ant
loopback = td.loopback

DIALECTS = [*td.DIALECTS, "openai_completions"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_failed_stream_ends_in_its_dialect(dialect, stream, client, sdks, loopback) -> None:
    """Output, then a bad token id: the bytes forwarded (the output's, then the trailer's error)
    make the SDK raise (or, Responses streamed, report) the server's message."""
    body, error = failed_stream(client, dialect, stream)
    trailer = wire_error(error)
    assert trailer and body.endswith(trailer)
    if not stream:
        assert body == trailer  # nothing else was rendered: the body is the error body
    status = 200 if stream else http_status("INVALID_ARGUMENT")
    message, raised = sdk_error(dialect, sdks, loopback, body, stream, status)
    assert message == error.details() and "10000000 is not in the vocabulary" in message
    if not stream and dialect != "anthropic_messages":
        assert isinstance(raised, openai.BadRequestError)
    if not stream and dialect == "anthropic_messages":
        assert isinstance(raised, anthropic.BadRequestError)


def test_responses_error_event_goes_on_with_the_stream_numbers(client, oai, loopback) -> None:
    """Responses, failed after output: the error event and ``response.failed`` (the open item
    closed ``incomplete``, the output so far) go on with the stream's numbers; the SDK's
    accumulator reports the failed response with the server's message."""
    body, error = failed_stream(client, "openai_responses", True)
    data = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: ")]
    numbers = [event["sequence_number"] for event in data]
    assert len(numbers) > 3 and numbers == sorted(set(numbers))
    names = [event["type"] for event in data]
    assert "error" in names and names[-1] == "response.failed"
    assert names[names.index("error") + 1 :] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    failed = data[-1]["response"]
    assert failed["status"] == "failed" and failed["usage"] is None
    assert failed["error"] == {"code": "invalid_prompt", "message": error.details()}
    assert [item["status"] for item in failed["output"]] == ["incomplete"]
    loopback.serve(body, True)
    with oai.responses.stream(model="m", input="hi") as events:
        seen = [event for event in events if event.type == "response.failed"]
    (event,) = seen
    assert event.response.error.message == error.details()
    assert (
        "".join(c.text for c in event.response.output[0].content) == failed["output"][0]["content"][0]["text"]
    )


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_unknown_model_is_an_error_in_the_dialect(dialect, client, sdks, loopback) -> None:
    """Refused at its Open (NOT_FOUND, before any output): the trailer holds the whole error."""
    session = client.open("no-such-model", output="final", wire=td.wire(dialect, False))
    session.finish("stop")
    with pytest.raises(grpc.RpcError) as error:
        list(session.wire())
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    body = wire_error(error.value)
    message, raised = sdk_error(dialect, sdks, loopback, body, False, http_status("NOT_FOUND"))
    assert message == error.value.details()
    assert isinstance(raised, (openai.NotFoundError, anthropic.NotFoundError))


def test_parse_once_carries_the_error_in_its_trailer(client) -> None:
    with pytest.raises(grpc.RpcError) as error:
        client.parse_once("qwen3", [*GOOD, BAD_ID], wire=td.wire("anthropic_messages", True))
    data = wire_error(error.value)
    assert data.startswith(b"event: error\ndata: ") and b'"invalid_request_error"' in data


def test_no_wire_no_trailer_and_an_unset_dialect_has_none(client) -> None:
    for wire in (None, pb.WireOptions(model="x")):
        with pytest.raises(grpc.RpcError) as error:
            client.parse_once("qwen3", [BAD_ID], **({"wire": wire} if wire is not None else {}))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and wire_error(error.value) == b""


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_batch_session_ends_in_its_dialect(dialect, client, sdks, loopback) -> None:
    """ParseBatch: the session's status carries the error (``SessionStatus.wire``) and
    ``wire_of`` forwards it after the output; other sessions of the stream go on."""
    outputs: list[pb.SessionOutput] = []
    with client.batch() as batch:
        options = {"completion": dialect == "openai_completions"}
        batch.open("bad", "qwen3", output="final", wire=td.wire(dialect, True), **options)
        batch.open("good", "qwen3", output="final", wire=td.wire(dialect, True), **options)
        for tid in GOOD:
            batch.feed("bad", [tid])
            batch.feed("good", [tid])
            outputs += [o for k, o in batch.step().items() if k == "bad"]
        batch.feed("bad", [BAD_ID])
        batch.finish("good", "stop")
        replies = batch.step()
        outputs.append(replies["bad"])
        assert replies["good"].HasField("final")
    last = outputs[-1]
    assert last.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and last.status.wire
    assert wire_error(last) == last.status.wire
    body = wire_of(outputs)
    assert body.endswith(last.status.wire)
    message, _ = sdk_error(dialect, sdks, loopback, body, True)
    assert message == last.status.message


def test_refused_batch_open_has_its_error_in_the_dialect(client) -> None:
    """A session refused at its Open on a ParseBatch stream (an unknown model)."""
    with client.batch() as batch:
        batch.open("x", "no-such-model", output="final", wire=td.wire("openai_chat", False))
        out = batch.step()["x"]
    assert out.status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert json.loads(out.status.wire)["error"]["type"] == "not_found_error"


# -------------------------------------------------------------------------------- the rule, in unit
def test_error_bytes_per_dialect_and_code() -> None:
    chat = WireRequest("openai_chat", stream=True)
    assert error_bytes(chat, "RESOURCE_EXHAUSTED", "too many").endswith(b"data: [DONE]\n\n")
    body = json.loads(error_bytes(WireRequest("openai_chat", stream=False), "NOT_FOUND", "m"))
    assert body == {"error": {"message": "m", "type": "not_found_error", "param": None, "code": "not_found"}}
    anth = error_bytes(WireRequest("anthropic_messages", stream=False), "UNAVAILABLE", "draining")
    assert json.loads(anth) == {"type": "error", "error": {"type": "overloaded_error", "message": "draining"}}
    assert http_status("INTERNAL") == 500 == http_status("DATA_LOSS") and http_status("UNAVAILABLE") == 503
    long = error_bytes(WireRequest("openai_chat", stream=False), "INTERNAL", "x" * 5000)
    assert len(json.loads(long)["error"]["message"]) == 1024


def test_the_clients_http_status_is_the_servers() -> None:
    """A gateway sends an error body with ``parsetier_client.http_status``: the server's table."""
    from parsetier_client import http_status as client_http_status

    for code in grpc.StatusCode:
        assert client_http_status(code) == client_http_status(code.name) == http_status(code.name), code


def _protocol(open_: pb.Open) -> SessionProtocol:
    protocol = SessionProtocol(Limits())
    protocol.receive(pb.ParseRequest(open=open_))
    return protocol


def test_no_bytes_for_a_cancel_or_a_hand_off() -> None:
    open_ = open_message("qwen3", wire=wire_options(td.wire("openai_chat", True)))
    protocol = _protocol(open_)
    assert protocol.error_wire("INVALID_ARGUMENT", "bad")
    assert protocol.error_wire("CANCELLED", "gone") == b""
    assert protocol.error_wire("UNAVAILABLE", "draining")  # not resumable: an error
    open_.resumable = True
    assert _protocol(open_).error_wire("UNAVAILABLE", "draining") == b""  # handed off: resumed
    assert _protocol(open_message("qwen3")).error_wire("INVALID_ARGUMENT", "bad") == b""


def test_the_native_renderer_counts_sequence_numbers_as_python_does() -> None:
    """The Responses error event's number is the renderer's next: both engines' renderers agree."""
    request = WireRequest("openai_responses", "resp_1", "m", 1, True)
    deltas = [
        Delta(reasoning="Let me see."),
        Delta(content="Here: é"),
        Delta(tool_calls=(ToolCallDelta(0, '{"a": 1}', "chatcmpl-tool-1", "f"),)),
        Delta(tool_calls=(ToolCallDelta(0, "", None, None),)),
    ]
    python, native = python_renderer(request), native_renderer(request)
    assert python.sequence == native.sequence == 0
    for delta in deltas:
        assert python.step([delta]) == native.step([delta])
        assert python.sequence == native.sequence
    assert python.sequence > len(deltas)
    failed = python.fail("invalid_argument", "bad \u2028 é", "invalid_prompt")
    assert failed == native.fail("invalid_argument", "bad \u2028 é", "invalid_prompt")
    names = [line for line in failed.decode().splitlines() if line.startswith("event: ")]
    assert names == [
        "event: error",
        "event: response.function_call_arguments.done",  # the open call closed, cut short
        "event: response.output_item.done",
        "event: response.failed",
    ]
    for at in range(len(deltas) + 1):  # failed after any step (before any: the error event alone)
        python, native = python_renderer(request), native_renderer(request)
        for delta in deltas[:at]:
            python.step([delta])
            native.step([delta])
        assert python.fail("internal", "x", "server_error") == native.fail("internal", "x", "server_error")
    assert python_renderer(request).fail("internal", "x", "server_error").count(b"event: ") == 1


# ------------------------------------------------------------------------------------- n > 1 joined
def _choice_replies(client, dialect: str, stream: bool, cases: list[td.Case]) -> list[list[Any]]:
    """Each choice's replies over its own Parse stream, the last one finished with the others'
    usage (as a gateway sends it)."""
    out: list[list[Any]] = []
    finals: list[pb.Final] = []
    for i, case in enumerate(cases):
        others = td.other_usage(finals) if i == len(cases) - 1 else None
        result = client.parse_stream(
            case.model, case.groups, case.finish, output="final", other_choices_usage=others,
            request_id="req-join", choice_index=i, wire=td.wire(dialect, stream), **case.options,
        )  # fmt: skip
        out.append(result.messages)
        finals.append(result.final)
    return out


def _interleaved(replies: list[list[Any]]) -> list[tuple[int, Any]]:
    """The choices' replies in an order a gateway may see them: later choices first, each reply
    of choice k before the same-numbered reply of choice k-1, the last choice finishing last."""
    order = []
    longest = max(len(r) for r in replies)
    for at in range(longest):
        for choice in reversed(range(len(replies))):
            if at < len(replies[choice]) and not (
                choice == len(replies) - 1 and at == len(replies[choice]) - 1
            ):
                order.append((choice, replies[choice][at]))
    order.append((len(replies) - 1, replies[-1][-1]))
    return order


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_wire_join_makes_one_response_of_n_choices(stream, registry, client, oai, loopback) -> None:
    """Two chat choices' replies, fed to ``WireJoin`` in an adverse order: the SDK reads one
    completion with both choices at their indexes, usage counting both."""
    cases = td._logprob_cases(registry)
    replies = _choice_replies(client, "openai_chat", stream, cases)
    join = WireJoin(len(cases), stream)
    body = b"".join(join.add(choice, reply) for choice, reply in _interleaved(replies))
    assert join.ended
    finals = [r[-1].final for r in replies]
    td.check_chat(oai, loopback, body, finals[-1], stream, finals)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_wire_join_passes_one_choice_through(dialect, stream, client) -> None:
    """n = 1, any dialect: the joined bytes are the session's own."""
    result = client.parse_stream(
        "qwen3", [[t] for t in GOOD], output="final", wire=td.wire(dialect, stream),
        completion=dialect == "openai_completions",
    )  # fmt: skip
    join = WireJoin(1, stream)
    assert b"".join(join.add(0, reply) for reply in result.messages) == result.wire and join.ended


def test_wire_join_ends_with_a_failed_choice(client, oai, loopback) -> None:
    join = WireJoin(2, True)
    ok = client.parse_stream("qwen3", [[t] for t in GOOD], output="final", wire=td.wire("openai_chat", True))
    out = [join.add(0, ok.messages[0])]
    _, error = failed_stream(client, "openai_chat", True)
    out.append(join.fail(error))
    assert join.ended and join.add(0, ok.messages[-1]) == b""
    loopback.serve(b"".join(out), True)
    with pytest.raises(openai.APIError, match="is not in the vocabulary"):
        for _ in oai.chat.completions.create(model="m", messages=[], stream=True):
            pass


def test_a_session_refused_before_its_open_is_read_ends_in_its_dialect(registry) -> None:
    """The server full (RESOURCE_EXHAUSTED before the Open is applied): Parse and ParseOnce still
    carry the error in the Open's dialect."""
    from grpc_servers import ThreadServer
    from parsetier.service import Limits
    from parsetier_client import Client

    limits = Limits(max_sessions=1, idle_timeout=60.0)
    with ThreadServer(registry, limits) as server, Client(server.target, timeout=30, resume=False) as client:
        held = client.open("qwen3")
        held.send([GOOD[0]])
        next(iter(held))  # the first session is open on the server
        # The server waits a moment for the Open it refuses: on a loaded machine, try again.
        for _ in range(3):
            refused = client.open("qwen3", wire=td.wire("anthropic_messages", True))
            refused.finish("stop")
            with pytest.raises(grpc.RpcError) as error:
                list(refused.wire())
            assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            event = wire_error(error.value)
            if event:
                break
        assert event.startswith(b"event: error\n") and b'"rate_limit_error"' in event
        with pytest.raises(grpc.RpcError) as error:
            client.parse_once("qwen3", GOOD, wire=td.wire("openai_chat", False))
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert json.loads(wire_error(error.value))["error"]["type"] == "rate_limit_error"
        held.finish("stop")
        assert list(held)[-1].HasField("final")


@pytest.mark.parametrize("dialect", ["openai_chat", "anthropic_messages"])
def test_a_long_non_ascii_message_keeps_the_trailers_within_what_clients_take(dialect, client) -> None:
    """An unknown model named in 2,000 CJK characters: its status message (percent-encoded,
    9 bytes a character) and its error in the dialect stay within the 8 KiB of trailers a gRPC
    client takes, so the client sees NOT_FOUND and the bytes, never RESOURCE_EXHAUSTED."""
    for _ in range(3):  # past 8 KiB, clients refuse some of the time
        with pytest.raises(grpc.RpcError) as error:
            client.parse_once("東" * 2000, [1], wire=td.wire(dialect, False))
        assert error.value.code() == grpc.StatusCode.NOT_FOUND, error.value.details()
        assert error.value.details().startswith("unknown model") and error.value.details().endswith("…")
        body = json.loads(wire_error(error.value))
        assert body["error"]["message"].startswith("unknown model '東東")
        assert len(wire_error(error.value)) <= 3072
