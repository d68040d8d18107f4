"""The ``parsetier`` command: ``serve`` runs the gRPC server. The client's tools (``replay``,
``health``) are the client package's own command, ``parsetier-client`` (``parsetier_client.cli``):
the server does not depend on the client."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any

from parsetier_args import (
    OneLineParser,
    UsageError,
    count,
    fail,
    non_negative_float,
    port_number,
    positive_float,
)

DEFAULT_PORT = 50051
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
REFLECTION = {"auto": None, "on": True, "off": False}


MIN_REPLY_BYTES = 4096
"""The least ``--max-reply-bytes``: larger replies go in parts of about that size, and smaller
parts would cost a message each for almost nothing."""


LIMIT_FLAGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "max_sessions": (count, "open sessions at once; more are refused"),
    "max_sessions_per_stream": (count, "open sessions on one ParseBatch stream; an open past it is refused"),
    "max_items_per_message": (
        count,
        "session entries and packed items in one ParseBatch message; more end the stream",
    ),
    "max_message_bytes": (count, "largest client message; larger ones get RESOURCE_EXHAUSTED"),
    "max_reply_bytes": (int, "largest message the server sends; clients must accept as much"),
    "max_steps_per_message": (count, "steps in one client message"),
    "max_tokens_per_session": (count, "output token ids one session may feed (the prompt tail too)"),
    "idle_timeout": (positive_float, "seconds a session may go without a message"),
    "max_tools": (count, "tools in one request; more are INVALID_ARGUMENT"),
    "max_schema_bytes": (
        count,
        "bytes of one tool's JSON (its parameters schema); larger is INVALID_ARGUMENT",
    ),
    "constraint_timeout": (positive_float, "seconds a BuildConstraint may take (DEADLINE_EXCEEDED beyond)"),
    "max_watch_streams": (count, "Health.Watch streams, and reflection streams, open at once"),
    "max_prompt_tokens": (count, "longest prompt Render gives; longer ones are INVALID_ARGUMENT"),
}
"""The limit flags that are their ``Limits`` field as it is: ``--NAME`` (dashed) sets field NAME, and
defaults to its default. ``--max-loop-lag-ms`` and ``--max-buffered-bytes`` are the two that are not."""


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from parsetier.service.limits import Limits
    from parsetier.service.server import HANDSHAKE_TIMEOUT

    defaults = Limits()
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for all); default %(default)s"
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help="gRPC port; 0 picks a free one; default %(default)s",
    )
    parser.add_argument("--config", help="models TOML file; without it every built-in preset is served")
    parser.add_argument(
        "--model-dir",
        action="append",
        metavar="[NAME=]DIR",
        help="serve a Hugging Face tokenizer directory whose tokenizer_config.json has a "
        "response_template, as NAME (default: the directory's name); repeatable",
    )
    parser.add_argument(
        "--engine",
        choices=("native", "reference"),
        default="native",
        help="parse engine of chat sessions: the native core, or the Python reference engine (a model "
        "the core cannot serve falls back to it, logged once); default %(default)s",
    )
    parser.add_argument(
        "--grace",
        type=non_negative_float,
        default=30.0,
        help="seconds open sessions get after SIGTERM; default %(default)s",
    )
    for name, (kind, help) in LIMIT_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(
            flag, type=kind, default=getattr(defaults, name), help=f"{help}; default %(default)s"
        )
    parser.add_argument(
        "--max-loop-lag-ms",
        type=non_negative_float,
        default=defaults.max_loop_lag * 1000,
        help="refuse new sessions (UNAVAILABLE) while the event loop runs this far behind; 0 never; "
        "default %(default)g",
    )
    parser.add_argument(
        "--max-buffered-bytes",
        type=count,
        default=None,
        help="bytes of client input and unsent replies a worker holds across its streams; a stream "
        "past it gets RESOURCE_EXHAUSTED; default: a quarter of the memory, shared by the workers",
    )
    parser.add_argument(
        "--trust-request-templates",
        action="store_true",
        help="let Render requests bring their own chat template (sandboxed and bounded); default off",
    )
    parser.add_argument(
        "--preload",
        default="all",
        help="models to load in the background once listening: all (default), none, or NAME,NAME...; "
        "others load on their first request",
    )
    parser.add_argument(
        "--workers",
        type=count,
        default=None,
        help="server processes sharing the port (SO_REUSEPORT), each on its own core; "
        "default: the number of cores; 1 serves in this process",
    )
    parser.add_argument(
        "--reflection",
        choices=("auto", "on", "off"),
        default="auto",
        help="gRPC server reflection (v1 and v1alpha); auto: on only when --host is a loopback address",
    )
    parser.add_argument("--tls-cert", help="PEM certificate chain: serve TLS (with --tls-key)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--tls-client-ca", help="PEM CA bundle: require client certificates it signed (mTLS)")
    parser.add_argument(
        "--tls-client-names",
        help="NAME,NAME...: accept only client certificates with one of these subject CNs or SANs",
    )
    parser.add_argument(
        "--auth-tokens", help="file of accepted bearer tokens, one per line (# comments); health stays open"
    )
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve Prometheus metrics over HTTP on this port (0: a free one); default off",
    )
    parser.add_argument("--metrics-host", help="address for --metrics-port; default: --host")
    parser.add_argument(
        "--otel",
        action="store_true",
        help="OpenTelemetry tracing, one span per session (needs parsetier[otel]; OTEL_* variables)",
    )
    # Connections (issue 37): how long a connection may take to say anything.
    parser.add_argument(
        "--handshake-timeout",
        type=positive_float,
        default=HANDSHAKE_TIMEOUT,
        help="seconds a new connection has to finish its TLS handshake and HTTP/2 preface, and any "
        "connection to acknowledge the server's settings; silent ones are closed; default %(default)g",
    )
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="default %(default)s"
    )


def _registry(config: str | None):
    """The models; a config that cannot be read or does not parse is the ``--config`` flag's error."""
    from parsetier.models import ModelRegistry

    try:
        return ModelRegistry.from_config(config)
    except FileNotFoundError:
        raise UsageError("--config", f"no such file: {config}") from None
    except KeyError as exc:
        raise UsageError("--config", f"{config}: a model entry lacks the key {exc}") from None
    except Exception as exc:  # TOML syntax, unknown format, bad format file: all the file's fault
        raise UsageError("--config", f"{config}: {type(exc).__name__}: {exc}") from None


def _model_dirs(registry, values: list[str]) -> None:
    """``--model-dir [NAME=]DIR``: each directory is a model served from its response_template."""
    from pathlib import Path

    for value in values:
        name, sep, directory = value.partition("=")
        if not sep or not name or "/" in name:
            name, directory = "", value
        try:
            registry.add_model_dir(Path(directory), name or None)
        except Exception as exc:  # no tokenizer, no template, a template that cannot be served
            raise UsageError("--model-dir", str(exc)) from None


def _preload(value: str, registry) -> list[str]:
    if value == "all":
        return [info.name for info in registry.describe() if info.tokenizer_available]
    if value == "none":
        return []
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(registry.names()))
    if unknown:
        known = ", ".join(registry.names())
        raise UsageError("--preload", f"unknown models {', '.join(unknown)}; known: {known}")
    return names


def _select_engine(engine: str, registry, preload: list[str]) -> None:
    """``--engine``: set before any worker forks; preloaded models also get their native tables
    (vocabulary, described grammar) now, so workers share them and no first request pays."""
    from parsetier import native

    native.set_engine(engine)
    if engine == "native":
        for name in preload:
            try:
                model = registry.get(name)
            except Exception:
                continue
            native.native_parts(model)


def _security(args: argparse.Namespace):
    """The ``Security`` the TLS and auth flags describe, or None for a plaintext, open server."""
    from pathlib import Path

    from parsetier.service.security import Security, TlsFiles

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert/--tls-key", "give both, or neither")
    if not args.tls_cert and (args.tls_client_ca or args.tls_client_names):
        raise UsageError("--tls-client-ca", "client certificates need TLS: add --tls-cert and --tls-key")
    if args.tls_client_names and not args.tls_client_ca:
        raise UsageError("--tls-client-names", "needs --tls-client-ca, which verifies the names")
    tls = None
    if args.tls_cert:
        names = frozenset(n.strip() for n in (args.tls_client_names or "").split(",") if n.strip())
        tls = TlsFiles(
            Path(args.tls_cert),
            Path(args.tls_key),
            Path(args.tls_client_ca) if args.tls_client_ca else None,
            names,
        )
    if tls is None and args.auth_tokens is None:
        return None
    return Security(tls=tls, tokens=Path(args.auth_tokens) if args.auth_tokens else None)


def _check_tracing(on: bool) -> None:
    if not on:
        return
    from parsetier.service.tracing import TracingUnavailable, check_environment

    try:
        check_environment()
    except TracingUnavailable as exc:
        raise UsageError("--otel", str(exc)) from None


def _start_metrics(args: argparse.Namespace) -> Any:
    """Start the Prometheus endpoint when --metrics-port is given: its HTTP server, else None."""
    if args.metrics_port is None:
        return None
    from parsetier.service import metrics
    from parsetier.service.logs import SERVER_LOG

    host = args.metrics_host or args.host
    metrics.enable()
    try:
        server, port = metrics.serve_http(host, args.metrics_port)
    except OSError as exc:
        problem = f"cannot listen on {host}:{args.metrics_port}: {exc.strerror}"
        raise UsageError("--metrics-port", problem) from None
    SERVER_LOG.info("metrics listening", extra={"fields": {"host": host, "port": port, "path": "/metrics"}})
    print(f"parsetier: Prometheus metrics on http://{host}:{port}/metrics", flush=True)
    return server


def _serve_workers(args: argparse.Namespace, workers: int, registry, limits, preload, security) -> int:
    """``--workers N``: N server processes on one port (``parsetier.service.workers``). Metrics
    are merged over the workers (prometheus_client's multiprocess mode) and served by the
    supervisor."""
    import os
    import tempfile

    from parsetier.service.workers import serve_workers

    metrics_on = args.metrics_port is not None
    if metrics_on:
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="parsetier-metrics-"))
    try:
        return serve_workers(
            workers,
            registry,
            limits,
            args.host,
            args.port,
            args.grace,
            preload,
            args.log_level,
            server_options={
                "reflection_on": REFLECTION[args.reflection],
                "security": security,
                "otel": args.otel,  # each worker makes its tracer: exporter threads do not survive a fork
                "handshake_timeout": args.handshake_timeout,
            },
            metrics_on=metrics_on,
            after_fork=(lambda: [_start_metrics(args).socket]) if metrics_on else None,
            announce=_workers_summary(args, workers, registry, security),
        )
    except OSError as exc:
        problem = f"cannot listen on {args.host}:{args.port}: {exc.strerror}"
        raise UsageError("--host/--port", problem) from None


def _announce(handle, registry, host: str) -> None:
    """The single-process server's summary (see ``_summary``)."""
    auth = ", bearer tokens" if handle.security is not None and handle.security.tokens else ""
    _summary(registry, f"{host}:{handle.port}", f"{handle.transport}{auth}", handle.reflection)


def _summary(registry, address: str, how: str, reflection_on: bool) -> None:
    """One human-readable summary on stdout (the JSON logs go to stderr): where and how the
    server listens, reflection, and which models have their tokenizer installed."""
    infos = registry.describe()
    ready = [info.name for info in infos if info.tokenizer_available]
    missing = [info.name for info in infos if not info.tokenizer_available]
    print(f"parsetier: listening on {address} (gRPC, {how})", flush=True)
    print(f"parsetier: reflection {'on' if reflection_on else 'off'}; health: grpc.health.v1", flush=True)
    print(f"parsetier: models with tokenizers ({len(ready)}): {', '.join(ready) or 'none'}", flush=True)
    if missing:
        print(f"parsetier: models without tokenizers ({len(missing)}): {', '.join(missing)}", flush=True)


def _workers_summary(args: argparse.Namespace, workers: int, registry, security) -> Callable[[int], None]:
    """The supervisor's summary once its workers listen (it has no server of its own)."""
    from parsetier.service.reflection import is_loopback

    tls = security.tls if security is not None else None
    how = "plaintext" if tls is None else "mutual TLS" if tls.client_ca is not None else "TLS"
    if security is not None and security.tokens is not None:
        how += ", bearer tokens"
    reflection_on = REFLECTION[args.reflection]
    if reflection_on is None:
        reflection_on = is_loopback(args.host)
    how += f", {workers} worker processes"
    return lambda port: _summary(registry, f"{args.host}:{port}", how, reflection_on)


def _serve(args: argparse.Namespace) -> int:
    from parsetier.service import Limits, logs, serve
    from parsetier.service.budget import default_budget
    from parsetier.service.security import SecurityConfigError, SecurityState
    from parsetier.service.server import ListenError
    from parsetier.service.workers import default_workers

    logs.configure(args.log_level)
    registry = _registry(args.config)
    _model_dirs(registry, args.model_dir or [])
    preload = _preload(args.preload, registry)
    if args.max_reply_bytes < MIN_REPLY_BYTES:
        problem = f"{args.max_reply_bytes} is too small to send replies in; the least is {MIN_REPLY_BYTES}"
        raise UsageError("--max-reply-bytes", problem)
    workers = args.workers if args.workers is not None else default_workers()
    limits = Limits(
        **{name: getattr(args, name) for name in LIMIT_FLAGS},
        max_loop_lag=args.max_loop_lag_ms / 1000,
        max_buffered_bytes=args.max_buffered_bytes or default_budget(workers),
        trust_request_templates=args.trust_request_templates,
    )
    _check_tracing(args.otel)
    security = _security(args)
    if security is not None:
        try:
            SecurityState(security)  # bad TLS or token files fail here, before any worker forks
        except SecurityConfigError as exc:
            raise UsageError(exc.flag, str(exc)) from None
    _select_engine(args.engine, registry, preload)
    if workers > 1:
        return _serve_workers(args, workers, registry, limits, preload, security)
    metrics_on = _start_metrics(args) is not None
    try:
        clean = asyncio.run(
            serve(
                registry,
                limits,
                args.host,
                args.port,
                args.grace,
                on_ready=lambda handle: _announce(handle, registry, args.host),
                preload=preload,
                reflection_on=REFLECTION[args.reflection],
                security=security,
                metrics_on=metrics_on,
                otel=args.otel,
                handshake_timeout=args.handshake_timeout,
            )
        )
    except ListenError as exc:
        raise UsageError("--host/--port", str(exc)) from None
    except SecurityConfigError as exc:
        raise UsageError(exc.flag, str(exc)) from None
    return 0 if clean else 1


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="parsetier", description="LLM output parse tier (gRPC).")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the gRPC server")
    _serve_arguments(serve_parser)
    args = parser.parse_args(argv)
    try:
        return _serve(args)
    except UsageError as exc:
        fail(f"parsetier {args.command}", str(exc))


if __name__ == "__main__":
    sys.exit(main())
