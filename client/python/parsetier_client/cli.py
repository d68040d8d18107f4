"""The ``parsetier-client`` command: the client's own tools, installed beside the server's
``parsetier``. ``replay`` streams a captured token-id output through a server; ``health`` asks a
server's ``grpc.health.v1`` whether it is serving. Nothing here imports the server package
(``parsetier``): a client machine needs only the client."""

from __future__ import annotations

import sys

from parsetier_args import OneLineParser, UsageError, fail
from parsetier_client import health, replay


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="parsetier-client", description="parsetier's client tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    replay_help = "stream JSON-lines steps from stdin through a server"
    replay.add_arguments(commands.add_parser("replay", help=replay_help))
    health_help = "gRPC health check of a server; exit 0 if serving"
    health.add_arguments(commands.add_parser("health", help=health_help))
    args = parser.parse_args(argv)
    try:
        return health.run(args) if args.command == "health" else replay.run(args)
    except UsageError as exc:
        fail(f"{parser.prog} {args.command}", str(exc))


if __name__ == "__main__":
    sys.exit(main())
