"""OpenTelemetry tracing against a live server: the caller's W3C trace context continues into one
server span per session, which records the model, the tokens and the outcome."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from grpc_servers import ProcessServer, ThreadServer, subprocess_env
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client import Client
from parsetier_client.requests import finish_message, open_message, step_message

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"


@pytest.fixture(scope="module")
def traced(registry):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with ThreadServer(registry, tracer=provider.get_tracer("test")) as server:
        yield server, exporter


def spans_of(exporter: InMemorySpanExporter, name: str, count: int = 1):
    """The finished spans called ``name``, once there are ``count``: a span ends just after the
    RPC's status went out, so it can trail the client's answer by a moment."""
    deadline = time.monotonic() + 10
    while True:
        spans = [span for span in exporter.get_finished_spans() if span.name == name]
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.01)


def test_parse_span_continues_the_callers_trace(traced):
    server, exporter = traced
    exporter.clear()
    messages = [
        pb.ParseRequest(open=open_message("qwen3", request_id="traced-1")),
        pb.ParseRequest(steps=[step_message([9707])]),
        pb.ParseRequest(steps=[step_message([0])], finish=finish_message("stop")),
    ]
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.ParserServiceStub(channel)
        replies = list(stub.Parse(iter(messages), metadata=[("traceparent", TRACEPARENT)], timeout=30))
    assert replies[-1].final.message.content == "Hello!"
    (span,) = spans_of(exporter, "parsetier.v1.ParserService/Parse")
    assert span.kind == SpanKind.SERVER
    assert span.context.trace_id == TRACE_ID
    assert span.parent is not None and span.parent.span_id == PARENT_ID and span.parent.is_remote
    assert span.attributes["parsetier.model"] == "qwen3"
    assert span.attributes["parsetier.request_id"] == "traced-1"
    assert span.attributes["parsetier.tokens"] == 2
    assert span.attributes["parsetier.outcome"] == "OK"
    assert span.attributes["rpc.grpc.status_code"] == 0
    assert span.status.status_code == StatusCode.UNSET


def test_failed_session_span_has_the_status_and_a_new_trace_without_parent(traced):
    server, exporter = traced
    exporter.clear()
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.ParserServiceStub(channel)
        request = pb.ParseOnceRequest(open=open_message("no-such-model"), token_ids=[1])
        with pytest.raises(grpc.RpcError) as failure:
            stub.ParseOnce(request, timeout=30)
    assert failure.value.code() == grpc.StatusCode.NOT_FOUND
    (span,) = spans_of(exporter, "parsetier.v1.ParserService/ParseOnce")
    assert span.parent is None
    assert span.attributes["parsetier.outcome"] == "NOT_FOUND"
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert span.status.status_code == StatusCode.ERROR


def test_otel_flag_exports_spans(monkeypatch):
    """`parsetier serve --otel` with the console exporter: the spans are printed by shutdown."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    with ProcessServer("--otel", "--preload", "qwen3") as server:
        with Client(server.target, timeout=30) as client:
            assert client.parse_once("qwen3", [9707, 0]).final.message.content == "Hello!"
        server.terminate()
        assert server.wait(30) == 0
    printed = "\n".join(server.stdout)
    assert '"name": "parsetier.v1.ParserService/ParseOnce"' in printed
    assert '"parsetier.outcome": "OK"' in printed


def test_otel_without_an_exporter_is_a_flag_error(monkeypatch):
    from test_cli import parsetier

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    done = parsetier("serve", "--otel", "--preload", "none")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("parsetier serve: --otel: ") and "zipkin" in line


SERVE_AND_PROBE = """
import json, os, signal, socket, sys, threading, time
from parsetier import cli
from parsetier_client import Client
probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
def call():
    deadline = time.monotonic() + 60
    while True:
        try:
            with Client(f"127.0.0.1:{port}", timeout=30) as client:
                content = client.parse_once("qwen3", [9707, 0]).final.message.content
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    otel = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(json.dumps({"content": content, "otel": otel}), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=call, daemon=True).start()
serve = ["serve", "--port", str(port), "--workers", "1", "--preload", "qwen3", "--grace", "1"]
sys.exit(cli.main([*serve, *sys.argv[1:]]))
"""


@pytest.mark.parametrize("otel", [False, True])
def test_without_otel_opentelemetry_is_never_imported(otel):
    """Off costs nothing: a `parsetier serve` process that served a session without --otel has not
    imported OpenTelemetry at all; with --otel (the control) it has."""
    env = dict(subprocess_env(), OTEL_TRACES_EXPORTER="console")
    argv = [sys.executable, "-c", SERVE_AND_PROBE, *(["--otel"] if otel else [])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (report,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"content"')]
    assert report["content"] == "Hello!"
    assert bool(report["otel"]) is otel, report["otel"]
