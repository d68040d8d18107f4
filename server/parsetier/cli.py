"""The ``parsetier`` command: ``serve`` runs the gRPC server, ``replay`` is the client-side
debugging tool (implemented in ``parsetier_client.replay``; the server only dispatches to it)."""

from __future__ import annotations

import argparse
import asyncio
import sys

DEFAULT_PORT = 50051


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from parsetier.service.limits import Limits

    defaults = Limits()
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0 for all)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port (logged)")
    parser.add_argument("--config", help="models TOML file; without it the embedded Qwen3 presets are served")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds open sessions get after SIGTERM")
    parser.add_argument("--max-sessions", type=int, default=defaults.max_sessions)
    parser.add_argument("--max-message-bytes", type=int, default=defaults.max_message_bytes)
    parser.add_argument("--max-steps-per-message", type=int, default=defaults.max_steps_per_message)
    parser.add_argument("--max-tokens-per-session", type=int, default=defaults.max_tokens_per_session)
    parser.add_argument("--idle-timeout", type=float, default=defaults.idle_timeout, help="seconds")
    parser.add_argument(
        "--preload",
        default="all",
        help="models to load in the background once listening: all (default), none, or NAME,NAME...; "
        "others load on their first request",
    )
    parser.add_argument("--log-level", default="INFO")


def _serve(args: argparse.Namespace) -> int:
    from parsetier.models import ModelRegistry
    from parsetier.service import Limits, logs, serve
    from parsetier.service.logs import SERVER_LOG

    logs.configure(args.log_level)
    registry = ModelRegistry.from_config(args.config)
    if args.preload == "all":
        preload = [info.name for info in registry.describe() if info.tokenizer_available]
    elif args.preload == "none":
        preload = []
    else:
        preload = [name.strip() for name in args.preload.split(",") if name.strip()]
        unknown = sorted(set(preload) - set(registry.names()))
        if unknown:
            SERVER_LOG.error("unknown models in --preload", extra={"fields": {"models": unknown}})
            return 2
    limits = Limits(
        max_message_bytes=args.max_message_bytes,
        max_steps_per_message=args.max_steps_per_message,
        max_tokens_per_session=args.max_tokens_per_session,
        max_sessions=args.max_sessions,
        idle_timeout=args.idle_timeout,
    )
    clean = asyncio.run(serve(registry, limits, args.host, args.port, args.grace, preload=preload))
    return 0 if clean else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="parsetier", description="LLM output parse tier (gRPC).")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the gRPC server")
    _serve_arguments(serve_parser)
    replay_parser = commands.add_parser("replay", help="stream JSON-lines steps from stdin through a server")
    from parsetier_client import replay

    replay.add_arguments(replay_parser)
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return replay.run(args)


if __name__ == "__main__":
    sys.exit(main())
