"""A failed ``Render`` carries its error in the request's dialect (the ``parsetier-wire-bin``
trailer, as a failed session does): the API's error body, which a gateway forwards with the code's
HTTP status, so it writes no error body of its own (docs/render.md, "Limits and errors")."""

from __future__ import annotations

import json

import grpc
import pytest

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


@pytest.fixture(scope="module")
def stub(grpc_server):
    with grpc.insecure_channel(grpc_server.target) as channel:
        yield pb_grpc.ParserServiceStub(channel)


def render_error(stub, model: str, dialect: int, body: dict | bytes) -> tuple[grpc.StatusCode, str, bytes]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(grpc.RpcError) as caught:
        stub.Render(pb.RenderRequest(model=model, dialect=dialect, request_json=data), timeout=60)
    trailer = dict(caught.value.trailing_metadata() or ())
    return caught.value.code(), caught.value.details(), trailer.get("parsetier-wire-bin", b"")


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_an_openai_request_the_tier_refuses_gets_openais_error_body(stub, stream) -> None:
    """Streamed or not, nothing went out yet: the error is a body (for an HTTP error status)."""
    body = {"messages": [{"role": "user", "content": [IMAGE]}], "stream": stream}
    code, details, wire = render_error(stub, "qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, body)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    error = json.loads(wire)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_argument"
    assert error["message"] == details and "messages[0].content[0]" in details


def test_an_anthropic_request_gets_anthropics_error_body(stub) -> None:
    body = {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "stream": True}
    code, details, wire = render_error(stub, "no-such-model", pb.WIRE_DIALECT_ANTHROPIC_MESSAGES, body)
    assert code == grpc.StatusCode.NOT_FOUND
    assert json.loads(wire) == {"type": "error", "error": {"type": "not_found_error", "message": details}}


def test_malformed_json_and_an_unset_dialect(stub) -> None:
    """Malformed JSON still gets its dialect's body; an unset dialect (the error itself) none."""
    code, _, wire = render_error(stub, "qwen3", pb.WIRE_DIALECT_OPENAI_RESPONSES, b"{not json")
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert json.loads(wire)["error"]["code"] == "invalid_argument"
    code, _, wire = render_error(stub, "qwen3", pb.WIRE_DIALECT_UNSPECIFIED, b"{}")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and wire == b""


def test_the_python_client_reads_a_failed_renders_error_body(grpc_server) -> None:
    """``wire_error`` and ``http_status`` read a failed ``render`` as they read a failed session."""
    from parsetier_client import Client, http_status, wire_error

    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]}
    with Client(grpc_server.target, timeout=60) as client, pytest.raises(grpc.RpcError) as caught:
        client.render("qwen3", body, "anthropic_messages")
    error = json.loads(wire_error(caught.value))
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert http_status(caught.value.code()) == 400
