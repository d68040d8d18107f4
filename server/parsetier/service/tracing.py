"""Optional OpenTelemetry tracing (``--otel``; ``pip install 'parsetier[otel]'``): one server span
per ParserService RPC — one per session for Parse — continuing the caller's trace from the W3C
``traceparent`` / ``tracestate`` metadata, with the model, token count and outcome as attributes.

Off by default, and then nothing of it runs: the interceptor is not installed and OpenTelemetry is
not imported (bench/observability_overhead.py measures both states).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from parsetier.service.handlers import SERVICE_PREFIX, observed, parser_rpc
from parsetier.service.metrics import SESSION_RPCS, tokens_of

SERVICE = SERVICE_PREFIX.strip("/")


class TracingUnavailable(RuntimeError):
    """``--otel`` without the OpenTelemetry packages, or with an exporter that is not installed."""


def check_environment() -> None:
    """Raise ``TracingUnavailable`` now (at start-up, before any worker is forked) if
    ``tracer_from_environment`` would."""
    import importlib.util
    import os

    if importlib.util.find_spec("opentelemetry.sdk") is None:
        raise TracingUnavailable("OpenTelemetry is not installed: pip install 'parsetier[otel]'")
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    if name not in ("otlp", "console"):
        raise TracingUnavailable(f"OTEL_TRACES_EXPORTER={name!r}: parsetier knows otlp and console")
    if name == "otlp" and importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None:
        raise TracingUnavailable(
            "OTEL_TRACES_EXPORTER=otlp needs pip install opentelemetry-exporter-otlp-proto-grpc "
            "(or set OTEL_TRACES_EXPORTER=console)"
        )


def shutdown() -> None:
    """Export the spans still buffered (the SDK provider batches them)."""
    from opentelemetry import trace

    stop = getattr(trace.get_tracer_provider(), "shutdown", None)
    if stop is not None:
        stop()


def tracer_from_environment() -> Any:
    """A tracer on an SDK provider whose exporter ``OTEL_TRACES_EXPORTER`` names: ``otlp``
    (default; needs opentelemetry-exporter-otlp, configured by the usual ``OTEL_EXPORTER_OTLP_*``
    variables) or ``console``. A provider the host application already set globally is used as is."""
    import os

    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise TracingUnavailable("OpenTelemetry is not installed: pip install 'parsetier[otel]'") from None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return trace.get_tracer("parsetier")
    name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
    if name == "console":
        exporter = ConsoleSpanExporter()
    elif name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise TracingUnavailable(
                "OTEL_TRACES_EXPORTER=otlp needs pip install opentelemetry-exporter-otlp-proto-grpc "
                "(or set OTEL_TRACES_EXPORTER=console)"
            ) from None
        exporter = OTLPSpanExporter()
    else:
        raise TracingUnavailable(f"OTEL_TRACES_EXPORTER={name!r}: parsetier knows otlp and console")
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "parsetier")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("parsetier")


@dataclass(slots=True)
class _Span:
    """One RPC's span, filled in from the messages it reads."""

    span: Any
    token: Any
    sessions: bool
    opened: bool = False
    tokens: int = 0

    def received(self, message: Any) -> None:
        if not self.sessions:
            return
        if not self.opened and message.HasField("open"):
            self.opened = True
            self.span.set_attribute("parsetier.model", message.open.model)
            if message.open.request_id:
                self.span.set_attribute("parsetier.request_id", message.open.request_id)
        self.tokens += tokens_of(message)

    def sent(self, message: Any) -> None:
        pass


class TracingInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, tracer: Any) -> None:
        from opentelemetry import context
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self._context = context
        self._in_context = set_span_in_context
        self._kind = SpanKind.SERVER
        self._status, self._error = Status, StatusCode.ERROR
        self._propagator = TraceContextTextMapPropagator()

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        rpc = parser_rpc(handler, handler_call_details)
        if rpc is None:
            return handler
        metadata = handler_call_details.invocation_metadata or ()
        carrier = {key: value for key, value in metadata if isinstance(value, str)}

        def start() -> _Span:
            parent = self._propagator.extract(carrier)
            span = self.tracer.start_span(
                f"{SERVICE}/{rpc}",
                context=parent,
                kind=self._kind,
                attributes={"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": rpc},
            )
            token = self._context.attach(self._in_context(span, parent))
            return _Span(span, token, rpc in SESSION_RPCS)

        return observed(handler, start, self._finish)

    def _finish(self, state: _Span, code: grpc.StatusCode, seconds: float) -> None:
        span = state.span
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        span.set_attribute("parsetier.outcome", code.name)
        if state.sessions:
            span.set_attribute("parsetier.tokens", state.tokens)
        if code is not grpc.StatusCode.OK:
            span.set_status(self._status(self._error, code.name))
        span.end()
        self._context.detach(state.token)
