"""Prometheus metrics, served as text on their own HTTP port (``--metrics-port``).

Everything is measured by ``MetricsInterceptor`` around the ParserService RPCs, so the servicer
needs no metrics code; the few events an interceptor cannot see are one-line hook calls
(``draining``, ``session_ended`` for sessions multiplexed inside one RPC). With metrics off the
interceptor is not installed and the hooks return at their first line.

Workers: every series carries a ``worker`` label. With several worker processes, the parent sets
``PROMETHEUS_MULTIPROC_DIR`` before forking; each worker calls ``enable(worker=...)``, and one
process serves ``serve_http(...)``, which then merges every worker's files (prometheus_client's
multiprocess mode). Names, labels and alert examples: docs/operations.md.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import grpc

from parsetier.service.handlers import observed, parser_rpc
from parsetier_api.v1 import parsetier_pb2 as pb

SESSION_RPCS = frozenset({"Parse", "ParseOnce"})
"""RPCs whose messages are read as ParseRequest / ParseOnceRequest (model, token counts)."""

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
SIZE_BUCKETS = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("parsetier")
    except PackageNotFoundError:
        return "unknown"


class Metrics:
    """The metric objects; made once per process by ``enable``."""

    def __init__(self, worker: str, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = registry if registry is not None else REGISTRY
        self.worker = worker
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

        def metric(kind: Any, name: str, doc: str, labels: tuple[str, ...], **options: Any) -> Any:
            """A ``parsetier_`` metric in ``registry`` whose series carry ``labels`` and the worker's."""
            return kind(name, doc, [*labels, "worker"], registry=registry, namespace="parsetier", **options)

        self.build_info = metric(
            Gauge,
            "build_info",
            "Always 1; the labels say what is running.",
            ("version", "python", "grpc"),
            multiprocess_mode="max",
        )
        self.sessions_open = metric(
            Gauge,
            "sessions_open",
            "Sessions (RPCs) in progress, by RPC and model.",
            ("rpc", "model"),
            multiprocess_mode="livesum",
        )
        self.sessions = metric(
            Counter,
            "sessions",
            "Finished sessions (RPCs), by RPC, model and gRPC status code.",
            ("rpc", "model", "code"),
        )
        self.session_seconds = metric(
            Histogram,
            "session_duration_seconds",
            "Session (RPC) duration, from its start to its status.",
            ("rpc", "model"),
            buckets=DURATION_BUCKETS,
        )
        self.tokens = metric(
            Counter,
            "tokens",
            "Output tokens received (token ids, plus text steps' text_tokens), as each message is read.",
            ("model",),
        )
        self.deltas = metric(
            Counter, "deltas", "Deltas sent to clients, as each message is written.", ("model",)
        )
        self.reply_seconds = metric(
            Histogram,
            "reply_latency_seconds",
            "From reading a client message to writing the reply it produced (server time only).",
            ("rpc", "model"),
            buckets=LATENCY_BUCKETS,
        )
        self.request_bytes = metric(
            Histogram, "request_message_bytes", "Size of each client message.", ("rpc",), buckets=SIZE_BUCKETS
        )
        self.response_bytes = metric(
            Histogram,
            "response_message_bytes",
            "Size of each server message.",
            ("rpc",),
            buckets=SIZE_BUCKETS,
        )
        self.draining = metric(
            Gauge,
            "draining",
            "1 once SIGTERM started the drain (health NOT_SERVING, new sessions refused).",
            (),
            multiprocess_mode="max",
        )
        self.build_info.labels(_version(), platform.python_version(), grpc.__version__, worker).set(1)
        self.draining.labels(worker).set(0)


_active: Metrics | None = None


def enable(worker: str = "0", registry: Any = None) -> Metrics:
    """Create this process's metrics (idempotent). ``registry`` is for tests."""
    global _active
    if _active is None or registry is not None:
        _active = Metrics(worker, registry)
    return _active


def active() -> Metrics | None:
    return _active


def serve_http(host: str, port: int) -> tuple[Any, int]:
    """Serve ``/metrics`` on a daemon thread; returns (server, bound port). Merges the worker
    processes' files when ``PROMETHEUS_MULTIPROC_DIR`` is set."""
    from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server, server.server_port


# --- hooks: one-liners for code the interceptor cannot see ---------------------------------------


def draining(on: bool = True) -> None:
    if _active is not None:
        _active.draining.labels(_active.worker).set(1 if on else 0)


def session_ended(rpc: str, model: str, code: str, tokens: int, deltas: int, seconds: float) -> None:
    """For a session that is not an RPC of its own (one of several multiplexed in one stream).
    Its tokens and deltas are counted here, at its end: counting them per item in the
    interceptor would read every item's fields a second time (about 4 µs per item, a tenth of a
    ParseBatch item's cost; bench figures in docs/operations.md)."""
    sessions_ended(rpc, [(model, code, tokens, deltas, seconds)])


def sessions_ended(rpc: str, ended: list[tuple[str, str, int, int, float]]) -> None:
    """``session_ended`` for several sessions at once (those one ``ParseBatch`` message ended:
    each its model, code, tokens, deltas and seconds): the same counts, each labelled series
    looked up and incremented once per call rather than per session."""
    metrics = _active
    if metrics is None or not ended:
        return
    worker = metrics.worker
    sessions: dict[tuple[str, str], int] = {}
    tokens: dict[str, int] = {}
    deltas: dict[str, int] = {}
    seconds: dict[str, list[float]] = {}
    for model, code, n_tokens, n_deltas, took in ended:
        sessions[model, code] = sessions.get((model, code), 0) + 1
        tokens[model] = tokens.get(model, 0) + n_tokens
        deltas[model] = deltas.get(model, 0) + n_deltas
        seconds.setdefault(model, []).append(took)
    for (model, code), count in sessions.items():
        metrics.sessions.labels(rpc, model, code, worker).inc(count)
    for model, took in seconds.items():
        histogram = metrics.session_seconds.labels(rpc, model, worker)
        for value in took:
            histogram.observe(value)
        if tokens[model]:
            metrics.tokens.labels(model, worker).inc(tokens[model])
        if deltas[model]:
            metrics.deltas.labels(model, worker).inc(deltas[model])


# --- the interceptor -------------------------------------------------------------------------------


def tokens_of(message: Any) -> int:
    """Output tokens in a ParseRequest / ParseOnceRequest (token ids, or a text step's count)."""
    steps = getattr(message, "steps", None)
    if steps is None:  # ParseOnceRequest
        return len(message.token_ids) or message.text_tokens
    return sum(len(step.token_ids) or step.text_tokens for step in steps)


OTHER_MODEL = "other"
"""The ``model`` label of a name the server does not serve: label values stay bounded whatever
clients send."""


def model_label(model: str, models: frozenset[str] | None) -> str:
    return model if models is None or model in models else OTHER_MODEL


class _Call:
    """One RPC being measured. Tokens and deltas are counted as each message goes by, so the
    counters move while a long session runs (``ParseBatch`` sessions are counted by
    ``session_ended``). The labelled series are looked up once per call (the rpc's at its start, the
    model's at its Open), not per message."""

    __slots__ = (
        "_deltas",
        "_reply_seconds",
        "_request_bytes",
        "_response_bytes",
        "_tokens",
        "metrics",
        "model",
        "models",
        "opened",
        "read_at",
        "rpc",
        "sessions",
    )

    def __init__(
        self, metrics: Metrics, rpc: str, sessions: bool, models: frozenset[str] | None = None
    ) -> None:
        self.metrics, self.rpc, self.sessions, self.models = metrics, rpc, sessions, models
        self.model, self.opened, self.read_at = "", False, 0.0
        worker = metrics.worker
        self._request_bytes = metrics.request_bytes.labels(rpc, worker)
        self._response_bytes = metrics.response_bytes.labels(rpc, worker)
        self._reply_seconds: Any = None
        self._tokens: Any = None
        self._deltas: Any = None

    def received(self, message: Any) -> None:
        self._request_bytes.observe(len(message) if type(message) is bytes else message.ByteSize())
        self.read_at = time.perf_counter()
        if self.sessions:
            if not self.opened and message.HasField("open"):
                self.open(message.open.model)
            tokens = tokens_of(message)
            if tokens:
                self._tokens_of_model().inc(tokens)

    def open(self, model: str) -> None:
        model = model_label(model, self.models)
        self.model, self.opened = model, True
        self._reply_seconds = self._tokens = self._deltas = None  # now labelled with the model
        self.metrics.sessions_open.labels(self.rpc, model, self.metrics.worker).inc()

    def _tokens_of_model(self) -> Any:
        if self._tokens is None:
            self._tokens = self.metrics.tokens.labels(self.model, self.metrics.worker)
        return self._tokens

    def sent(self, message: Any) -> None:
        if self.read_at:
            if self._reply_seconds is None:
                self._reply_seconds = self.metrics.reply_seconds.labels(
                    self.rpc, self.model, self.metrics.worker
                )
            self._reply_seconds.observe(time.perf_counter() - self.read_at)
            self.read_at = 0.0
        self._response_bytes.observe(len(message) if type(message) is bytes else message.ByteSize())
        if self.sessions:
            if type(message) is bytes:  # a Parse reply the core wrote (``receive_serialized``)
                message = pb.ParseResponse.FromString(message)
            deltas = len(message.deltas)
            if deltas:
                if self._deltas is None:
                    self._deltas = self.metrics.deltas.labels(self.model, self.metrics.worker)
                self._deltas.inc(deltas)

    def finished(self, code: grpc.StatusCode, seconds: float) -> None:
        """Count the finished call (``observed`` calls it as ``_Call.finished(call, code, s)``)."""
        metrics, worker = self.metrics, self.metrics.worker
        if self.opened:
            metrics.sessions_open.labels(self.rpc, self.model, worker).dec()
        metrics.sessions.labels(self.rpc, self.model, code.name, worker).inc()
        metrics.session_seconds.labels(self.rpc, self.model, worker).observe(seconds)


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Measures every ParserService RPC: open and finished sessions by model and status code,
    tokens, deltas, reply latency and message sizes. ``models``: the names served; any other
    name a client sends is labelled ``other``."""

    def __init__(self, metrics: Metrics, models: frozenset[str] | None = None) -> None:
        self.metrics = metrics
        self.models = models

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        rpc = parser_rpc(handler, handler_call_details)
        if rpc is None:
            return handler
        sessions = rpc in SESSION_RPCS
        metrics, models = self.metrics, self.models
        return observed(handler, lambda: _Call(metrics, rpc, sessions, models), _Call.finished)
