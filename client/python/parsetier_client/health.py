"""``parsetier-client health``: ask a server's ``grpc.health.v1`` service whether it is serving; exit 0
when it is, 1 when it is not or cannot be reached. For container HEALTHCHECKs and scripts (Kubernetes
probes speak gRPC health themselves).
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from parsetier_args import positive_float
from parsetier_client.arguments import add_connection_arguments, connection
from parsetier_client.security import sync_channel, token_metadata


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default="127.0.0.1:50051", help="HOST:PORT; default %(default)s")
    parser.add_argument("--service", default="", help="service to ask about; default: the server as a whole")
    parser.add_argument("--timeout", type=positive_float, default=3.0, help="seconds; default %(default)s")
    add_connection_arguments(parser)


def check(target: str, service: str = "", timeout: float = 3.0, tls=None, token: str | None = None) -> str:
    """The serving status's name (``SERVING``, ``NOT_SERVING``...); raises ``grpc.RpcError``."""
    with sync_channel(target, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=service)
        reply = stub.Check(request, timeout=timeout, metadata=token_metadata(token))
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def run(args: argparse.Namespace) -> int:
    try:
        status = check(args.server, args.service, args.timeout, **connection(args))
    except grpc.RpcError as exc:
        print(f"parsetier-client health: {args.server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    print(status)
    return 0 if status == "SERVING" else 1
