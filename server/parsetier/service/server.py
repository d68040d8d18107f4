"""Server assembly: the Parser service plus health and reflection on one ``grpc.aio`` server,
and the drain that SIGTERM starts.

Drain order matters for load balancers: health flips to NOT_SERVING first (so probes stop
routing here), new sessions are refused with UNAVAILABLE (so clients retry elsewhere), open
sessions get ``grace`` seconds to finish, and only then is the server stopped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from parsetier import native
from parsetier.models import ModelRegistry
from parsetier.service import collector, metrics, reflection
from parsetier.service.accepts import ExtraAccepts
from parsetier.service.admission import CountedHealthServicer, StreamCount
from parsetier.service.budget import STREAM_WINDOW
from parsetier.service.decoding import add_servicer
from parsetier.service.heap import HeapTrimmer
from parsetier.service.limits import Limits
from parsetier.service.logs import SERVER_LOG
from parsetier.service.security import AuthInterceptor, Security, SecurityState
from parsetier.service.servicer import ParserServicer
from parsetier_api.v1 import parsetier_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ParserService"].full_name


@dataclass(slots=True)
class ServerHandle:
    """A started server: its port, and the pieces the drain needs."""

    server: grpc.aio.Server
    port: int
    servicer: ParserServicer
    health: health.aio.HealthServicer
    reflection: bool = False
    security: SecurityState | None = None
    heap: HeapTrimmer | None = None

    @property
    def transport(self) -> str:
        """``plaintext``, ``TLS`` or ``mutual TLS``."""
        tls = self.security.security.tls if self.security is not None else None
        if tls is None:
            return "plaintext"
        return "mutual TLS" if tls.client_ca is not None else "TLS"

    async def drain(self, grace: float) -> bool:
        """Stop taking sessions, hand resumable ones off at once (``Open.resumable``: their
        clients resume elsewhere), let the others finish for up to ``grace`` s, stop the server.

        True when every open session finished within the grace."""
        self.servicer.gate.draining = True
        metrics.draining()
        await self.health.enter_graceful_shutdown()
        open_sessions = self.servicer.gate.active
        handed_off = self.servicer.handoff.begin()  # resumable sessions move now; the rest get the grace
        SERVER_LOG.info(
            "draining",
            extra={"fields": {"open_sessions": open_sessions, "handed_off": handed_off, "grace_s": grace}},
        )
        clean = await self.servicer.gate.wait_idle(grace)
        cut = self.servicer.gate.active  # counted before stop(): cancelled sessions leave the gate
        if clean:
            # The last session's trailers are out, but a proxy such as nginx may not have finished
            # its stream yet: stopping now would send GOAWAY + PING and close the connection while
            # nginx still owes the PING's ACK, and it would turn the finished stream into a reset
            # (the client sees INTERNAL after its final reply). Let the streams settle first; then
            # stop() has only idle connections to close. stop()'s own grace covers streams that
            # arrive meanwhile (refused, as draining).
            await asyncio.sleep(STOP_SETTLE)
        # Not idle: the grace is spent, cut the stragglers now.
        await self.server.stop(STOP_GRACE if clean else 0)
        if self.heap is not None:
            await self.heap.stop()
        if self.security is not None:
            await self.security.stop()
        fields = {"clean": clean, "cut_sessions": cut, "handed_off": self.servicer.handoff.count}
        SERVER_LOG.info("stopped", extra={"fields": fields})
        return clean


class ListenError(OSError):
    """The listen address could not be bound."""


def check_bindable(host: str, port: int, reuse_port: bool = False) -> None:
    """Bind (and release) the address with a plain socket first, so a bad ``--host`` or a port in
    use is reported as the OS's reason, in one line, rather than grpc's generic bind failure.
    ``reuse_port``: probe with SO_REUSEPORT, as processes sharing one port bind it."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot resolve {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


STOP_SETTLE = 0.5
"""Seconds a clean drain waits, once no session is left, before it stops the server: the last
streams' trailers reach the clients (through proxies) before the connections are closed."""
STOP_GRACE = 2.0
"""Seconds ``stop`` gives calls still in flight (refusals) once the server stops."""

HANDSHAKE_TIMEOUT = 60.0
"""Seconds a new connection has to complete its handshake (TLS, then the HTTP/2 preface and the
client's SETTINGS) and, later, to acknowledge each SETTINGS frame the server sends; a connection
that stays silent or stops half-way is closed then (``--handshake-timeout``). grpc's core applies
it as ``grpc.server_handshake_timeout_ms`` (the handshake, TLS included; its own default is 120 s)
and ``grpc.http2.settings_timeout`` (the SETTINGS acknowledgement; its default is 60 s, twice the
keepalive timeout at least)."""

ADMITTED_RPCS = ("Parse", "ParseOnce", "ParseBatch", "BuildConstraint")
"""The RPCs admission refuses under load: while it does, they get extra accepts."""


async def build_server(
    registry: ModelRegistry,
    limits: Limits | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    reflection_on: bool | None = None,
    security: Security | None = None,
    metrics_on: bool = False,
    tracer: Any = None,
    reuse_port: bool = False,
    handshake_timeout: float = HANDSHAKE_TIMEOUT,
) -> ServerHandle:
    """Create, bind and start the server; ``port=0`` picks a free port (see ``handle.port``).

    ``reflection_on`` None means on for loopback listeners only: reflection tells anyone who can
    connect the whole API, which is what a developer on the host wants and an exposed port need not.
    ``security``: TLS / mTLS files and a bearer-token file (``parsetier.service.security``).
    ``metrics_on``: measure RPCs into this process's Prometheus metrics (``metrics.enable``); the
    HTTP endpoint is served separately (``metrics.serve_http``). ``tracer``: an OpenTelemetry tracer
    for one span per RPC (``parsetier.service.tracing``); None leaves tracing out entirely.
    ``reuse_port`` shares the port with other processes (``--workers``); otherwise a port already
    in use is an error. ``handshake_timeout``: see ``HANDSHAKE_TIMEOUT``."""
    limits = limits or Limits()
    guard = SecurityState(security) if security is not None else None
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if tracer is not None:  # imported only when asked for: OpenTelemetry is an optional extra
        from parsetier.service.tracing import TracingInterceptor

        interceptors.append(TracingInterceptor(tracer))
    if metrics_on:  # outermost, so refusals by the auth check are counted too
        interceptors.append(metrics.MetricsInterceptor(metrics.enable(), frozenset(registry.names())))
    if guard is not None and guard.checks_requests:
        interceptors.append(AuthInterceptor(guard))
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.max_send_message_length", limits.max_reply_bytes),
            ("grpc.so_reuseport", 1 if reuse_port else 0),
            ("grpc.server_handshake_timeout_ms", round(handshake_timeout * 1000)),
            ("grpc.http2.settings_timeout", round(handshake_timeout * 1000)),
            # A fixed window per stream: what gRPC holds of a client's unread input is bounded, and
            # counted in the buffer budget (``service/budget.py``). The bandwidth probe grew it to
            # megabytes for a client that writes and stops reading.
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", STREAM_WINDOW),
        ],
    )
    servicer = ParserServicer(registry, limits)
    service = pb.DESCRIPTOR.services_by_name["ParserService"]
    handlers = add_servicer(servicer, server, service)
    health_servicer = CountedHealthServicer(StreamCount(limits.max_watch_streams))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    if reflection_on is None:
        reflection_on = reflection.is_loopback(host)
    if reflection_on:
        reflection.enable(server, (SERVICE_NAME, health.SERVICE_NAME), StreamCount(limits.max_watch_streams))
    check_bindable(host, port, reuse_port)
    credentials = guard.server_credentials() if guard is not None else None
    try:
        if credentials is not None:
            bound = server.add_secure_port(f"{host}:{port}", credentials)
        else:
            bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:  # grpc's "Failed to bind": the pre-check above raced with someone
        raise ListenError(f"cannot listen on {host}:{port}: {exc}") from None
    await server.start()
    shed = {f"/{service.full_name}/{name}": handlers[name] for name in ADMITTED_RPCS}
    servicer.admission.on_refusal = ExtraAccepts(server, shed, interceptors).top_up
    servicer.admission.lag.start()
    heap = HeapTrimmer(servicer.gate)
    heap.start()
    if guard is not None:
        guard.start()
    return ServerHandle(server, bound, servicer, health_servicer, reflection_on, guard, heap)


async def _preload(registry: ModelRegistry, names: Sequence[str]) -> None:
    """Load models one at a time in a worker thread; a failure is logged, not fatal."""
    started = time.monotonic()
    for name in names:
        try:
            await asyncio.to_thread(lambda name=name: native.prepare(registry.get(name)))
        except Exception as exc:
            SERVER_LOG.error("model failed to load", extra={"fields": {"model": name, "error": str(exc)}})
    if names:
        collector.freeze_loaded()
        elapsed = round(time.monotonic() - started, 3)
        SERVER_LOG.info("models loaded", extra={"fields": {"models": len(names), "seconds": elapsed}})


async def serve(
    registry: ModelRegistry,
    limits: Limits | None = None,
    host: str = "127.0.0.1",
    port: int = 50051,
    grace: float = 30.0,
    on_ready: Callable[[ServerHandle], None] | None = None,
    preload: Sequence[str] = (),
    **server_options: Any,
) -> bool:
    """Run until SIGTERM/SIGINT, then drain. Returns whether the drain was clean.

    ``preload`` models are loaded in the background once the server listens, so start-up is
    quick however many models are configured; a request for one not loaded yet loads it.
    ``server_options`` are ``build_server``'s keywords (reflection, TLS, auth, metrics), plus
    ``otel=True``: a tracer from the OTEL_* environment, made here, in the serving process (a
    batching span processor's thread would not survive a fork)."""
    tracing = None
    if server_options.pop("otel", False):
        from parsetier.service import tracing

        server_options["tracer"] = tracing.tracer_from_environment()
    try:
        return await _serve(registry, limits, host, port, grace, on_ready, preload, server_options)
    finally:
        if tracing is not None:
            tracing.shutdown()


async def _serve(
    registry: ModelRegistry,
    limits: Limits | None,
    host: str,
    port: int,
    grace: float,
    on_ready: Callable[[ServerHandle], None] | None,
    preload: Sequence[str],
    server_options: dict[str, Any],
) -> bool:
    handle = await build_server(registry, limits, host, port, **server_options)
    collector.tune()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if handle.security is not None:
        loop.add_signal_handler(signal.SIGHUP, handle.security.request_reload)
    SERVER_LOG.info(
        "listening",
        extra={
            "fields": {
                "host": host,
                "port": handle.port,
                "pid": os.getpid(),
                "models": registry.names(),
                "reflection": handle.reflection,
                "transport": handle.transport,
                "auth": bool(handle.security and handle.security.tokens),
            }
        },
    )
    if on_ready is not None:
        on_ready(handle)
    warm = asyncio.create_task(_preload(registry, preload))
    await stop.wait()
    warm.cancel()
    SERVER_LOG.info("signal received")
    return await handle.drain(grace)
