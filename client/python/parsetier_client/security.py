"""Client-side TLS, mutual TLS and bearer tokens, shared by the sync and async clients.

A token travels as ``authorization: Bearer <token>`` metadata on every call. It is sent over
plaintext too when the channel has no TLS (a sidecar on loopback, or a mesh that encrypts the hop),
so only do that where the network between client and server is trusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc


@dataclass(frozen=True, slots=True)
class Tls:
    """How to verify the server and, for mTLS, who the client is. ``ca_file`` None trusts the
    system's roots; ``cert_file``/``key_file`` are the client's certificate chain and key;
    ``server_name`` overrides the name checked against the server's certificate (when the target
    is an IP address or an alias the certificate does not list)."""

    ca_file: str | Path | None = None
    cert_file: str | Path | None = None
    key_file: str | Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("mutual TLS needs both cert_file and key_file")

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | Path | None) -> bytes | None:
            return Path(path).read_bytes() if path is not None else None

        return grpc.ssl_channel_credentials(read(self.ca_file), read(self.key_file), read(self.cert_file))

    def channel_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def tls_of(tls: Tls | bool | None) -> Tls | None:
    """``True`` means TLS with the system's roots."""
    if tls is True:
        return Tls()
    return tls or None


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata that carries ``token``, or None."""
    if token is None:
        return None
    token = token.strip()
    if not token:
        raise ValueError("the bearer token is empty")
    return (("authorization", f"Bearer {token}"),)


def read_token(path: str | Path) -> str:
    """A token kept in a file (its first non-blank line), so it stays out of argv and shell history."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    raise ValueError(f"{path} holds no token")


MAX_REPLY_BYTES = 64 * 1024 * 1024
"""The largest message a parsetier server sends (its ``--max-reply-bytes`` default); clients
accept that much, not grpc's 4 MiB default, so every reply a server sends can be received."""
RECEIVE_OPTIONS = (("grpc.max_receive_message_length", MAX_REPLY_BYTES),)
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 300_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 0),
)
"""Keepalive within the server's ping policy (gRPC core's default: at most one ping per 5 minutes
without data, none on a connection without calls; more get GOAWAY ``too_many_pings``), as the Go
and C++ clients: a ping after 5 idle minutes while a call is open finds a dead connection under a
long, quiet session."""
CHANNEL_OPTIONS = (*RECEIVE_OPTIONS, *KEEPALIVE_OPTIONS)


def sync_channel(target: str, tls: Tls | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    return grpc.secure_channel(target, tls.credentials(), options=[*tls.channel_options(), *CHANNEL_OPTIONS])


def aio_channel(target: str, tls: Tls | None) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
    return grpc.aio.secure_channel(
        target, tls.credentials(), options=[*tls.channel_options(), *CHANNEL_OPTIONS]
    )
