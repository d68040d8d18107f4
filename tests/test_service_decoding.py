"""Bytes that are not a valid message get INVALID_ARGUMENT on every RPC, logged as the client's
error; a server bug's status never carries exception text; a client that leaves is CANCELLED."""

from __future__ import annotations

import logging

import grpc
import pytest

from grpc_servers import server_logs, wait_for
from parsetier import native
from parsetier.protocol import session as protocol_module
from parsetier.service.errors import FAULT_TRAILER
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import Client, open_message

Code = grpc.StatusCode
SERVICE = "/parsetier.v1.ParserService/"


def _invalid_utf8_open() -> bytes:
    data = pb.ParseRequest(open=pb.Open(model="AAAA")).SerializeToString()
    return data.replace(b"AAAA", b"\xff\xfe\xc0\x80")


GARBAGE = {
    "garbage": b"\xff\xff\xff\xff\x0f\x01\x02",
    "truncated": pb.ParseRequest(open=open_message("qwen3", request_id="r" * 40)).SerializeToString()[:-7],
    "invalid UTF-8 in a string field": _invalid_utf8_open(),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_undecodable_parse_message_is_invalid_argument(grpc_server, case):
    with server_logs() as logs, grpc.insecure_channel(grpc_server.target) as channel:
        call = channel.stream_stream(SERVICE + "Parse", request_serializer=bytes, response_deserializer=bytes)
        with pytest.raises(grpc.RpcError) as info:
            list(call(iter([GARBAGE[case]]), timeout=30))
        assert info.value.code() == Code.INVALID_ARGUMENT, info.value.details()
        assert "not a valid parsetier.v1.ParseRequest" in info.value.details()
        wait_for(lambda: logs.session_ends("Parse"))
        [end] = logs.session_ends("Parse")
        assert end["outcome"] == "INVALID_ARGUMENT"
        assert not [r for r in logs.records if r.levelno >= logging.ERROR or r.exc_info]


def test_undecodable_message_after_a_good_open(grpc_server):
    good = pb.ParseRequest(open=open_message("qwen3")).SerializeToString()
    with grpc.insecure_channel(grpc_server.target) as channel:
        call = channel.stream_stream(SERVICE + "Parse", request_serializer=bytes, response_deserializer=bytes)
        with pytest.raises(grpc.RpcError) as info:
            list(call(iter([good, GARBAGE["garbage"]]), timeout=30))
        assert info.value.code() == Code.INVALID_ARGUMENT


@pytest.mark.parametrize("case", sorted(GARBAGE))
@pytest.mark.parametrize("open_first", [False, True], ids=["alone", "after an open"])
def test_undecodable_parse_batch_message_is_invalid_argument(grpc_server, case, open_first):
    """As ``Parse``: the stream ends INVALID_ARGUMENT, and so does every session open on it; not
    INTERNAL, and nothing at ERROR in the server log."""
    good = pb.ParseBatchRequest(sessions=[pb.SessionInput(key="a", open=open_message("qwen3"))])
    messages = [good.SerializeToString()] * open_first + [GARBAGE[case]]
    with server_logs() as logs, grpc.insecure_channel(grpc_server.target) as channel:
        call = channel.stream_stream(
            SERVICE + "ParseBatch", request_serializer=bytes, response_deserializer=bytes
        )
        with pytest.raises(grpc.RpcError) as info:
            list(call(iter(messages), timeout=30))
        assert info.value.code() == Code.INVALID_ARGUMENT, info.value.details()
        assert "not a valid parsetier.v1.ParseBatchRequest" in info.value.details()
        if open_first:
            wait_for(lambda: logs.session_ends("ParseBatch"))
            [end] = logs.session_ends("ParseBatch")
            assert end["outcome"] == "INVALID_ARGUMENT", end
        assert not [r for r in logs.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize(
    ("method", "case"),
    [(m, c) for m in ("ParseOnce", "BuildConstraint") for c in sorted(GARBAGE)]
    + [("ListModels", "garbage"), ("ListModels", "truncated")],  # it has no string field
)
def test_undecodable_unary_request_is_invalid_argument(grpc_server, method, case):
    with server_logs() as logs, grpc.insecure_channel(grpc_server.target) as channel:
        call = channel.unary_unary(SERVICE + method, request_serializer=bytes, response_deserializer=bytes)
        with pytest.raises(grpc.RpcError) as info:
            call(GARBAGE[case], timeout=30)
        assert info.value.code() == Code.INVALID_ARGUMENT, info.value.details()
        assert not [r for r in logs.records if r.levelno >= logging.ERROR or r.exc_info]


def test_internal_errors_do_not_leak_exception_text(grpc_server, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("secret internals at 0xdeadbeef")

    # Both engines' sessions (the server runs the native one by default).
    monkeypatch.setattr(protocol_module.core.Session, "finish", broken)
    monkeypatch.setattr(native.NativeSession, "finish", broken)
    with server_logs() as logs, Client(grpc_server.target, timeout=30) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.parse_once("qwen3", [9707])
        assert info.value.code() == Code.INTERNAL
        assert "secret" not in info.value.details() and "RuntimeError" not in info.value.details()
        assert FAULT_TRAILER[0] in tuple(info.value.trailing_metadata())  # the server's own fault
        wait_for(lambda: logs.session_ends("ParseOnce"))
        assert any(r.exc_info for r in logs.records)  # the server log keeps the traceback


def test_the_servers_own_fault_is_marked_and_never_resumed(grpc_server, monkeypatch):
    """A bug in a resumable ``Parse`` session ends it with INTERNAL and the ``parsetier-fault``
    trailer; the client (resume on) surfaces it at once instead of replaying the session."""
    monkeypatch.setattr(protocol_module.core.Session, "finish", _broken)
    monkeypatch.setattr(native.NativeSession, "finish", _broken)
    with server_logs() as logs, Client(grpc_server.target, timeout=30) as client:
        stream = client.open("qwen3")
        stream.finish(steps=[[9707]])
        with pytest.raises(grpc.RpcError) as info:
            list(stream)
        assert info.value.code() == Code.INTERNAL
        assert FAULT_TRAILER[0] in tuple(info.value.trailing_metadata())
        assert stream.resumes == 0
        wait_for(lambda: logs.session_ends("Parse"))
        assert len(logs.session_ends("Parse")) == 1  # one stream: no replay


def _broken(*args, **kwargs):
    raise RuntimeError("a bug")


@pytest.mark.parametrize("when", ["after open", "mid stream", "before finish"])
def test_a_client_that_leaves_is_logged_as_cancelled(grpc_server, when):
    with server_logs() as logs, Client(grpc_server.target, timeout=30) as client:
        stream = client.open("qwen3")
        stream._call.initial_metadata()  # the server has accepted the Open: the session is live
        replies = iter(stream)
        if when != "after open":
            for _ in range(20):
                stream.send([9707], [1879])
            next(replies)
        if when == "before finish":
            for _ in range(200):
                stream.send([9707])
        stream.cancel()
        wait_for(lambda: logs.session_ends("Parse"))
        [end] = logs.session_ends("Parse")
        assert end["outcome"] == "CANCELLED", end
        assert not [r for r in logs.records if r.levelno >= logging.ERROR]
