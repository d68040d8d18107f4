"""The client commands' connection flags (TLS, mutual TLS, a bearer token); the argument types and
one-line errors they share with the server's command are in ``parsetier_args``."""

from __future__ import annotations

import argparse
import os
from typing import Any

from parsetier_args import UsageError
from parsetier_client.security import Tls, read_token


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """How a command reaches a server: TLS, mutual TLS, a bearer token (see ``connection``)."""
    parser.add_argument("--tls", action="store_true", help="connect with TLS (implied by the --tls-* flags)")
    parser.add_argument("--tls-ca", help="PEM CA bundle to verify the server with (default: system roots)")
    parser.add_argument("--tls-cert", help="client certificate chain (PEM) for mutual TLS, with --tls-key")
    parser.add_argument("--tls-key", help="client private key (PEM) for mutual TLS")
    parser.add_argument("--tls-server-name", help="name to verify the server's certificate against")
    parser.add_argument("--token-file", help="file whose first line is the bearer token to send")


def connection(args: argparse.Namespace) -> dict[str, Any]:
    """The client's ``tls`` and ``token`` keywords from the connection flags."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert/--tls-key", "give both, or neither")
    for flag, path in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path and not os.path.isfile(path):
            raise UsageError(flag, f"no such file: {path}")
    tls = None
    if args.tls or args.tls_ca or args.tls_cert or args.tls_server_name:
        tls = Tls(args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
    token = None
    if args.token_file:
        try:
            token = read_token(args.token_file)
        except (OSError, ValueError) as exc:
            raise UsageError("--token-file", str(exc)) from None
    return {"tls": tls, "token": token}
