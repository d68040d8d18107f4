"""Errors as gRPC status codes, in one place so the contract in docs/service.md holds.

Every refusal, the protocol's and the service layer's own (draining, the session gate, an
undecodable message), is a ``parsetier.status.StatusError`` carrying its ``Code``; here that code
becomes the gRPC status of the same name. Anything else is a server bug: INTERNAL, logged, and
confined to the one session that hit it.
"""

from __future__ import annotations

import logging
from typing import Protocol

import grpc

from parsetier.status import StatusError, error_of

__all__ = ["WIRE_TRAILER", "ErrorWire", "grpc_code", "status_for", "wire_trailer"]

WIRE_TRAILER = "parsetier-wire-bin"
"""Trailing metadata of a ``Parse`` stream or ``ParseOnce`` call that ended with an error and
asked for wire bytes (``Open.wire``): the error in its dialect, to forward (``dialects.errors``)."""


class ErrorWire(Protocol):
    """What renders a call's error in its dialect: a session's ``SessionProtocol``, or a failed
    ``Render``'s ``render.RenderErrorWire``."""

    def error_wire(self, code: str, message: str) -> bytes: ...


def grpc_code(error: StatusError) -> grpc.StatusCode:
    return grpc.StatusCode[error.code.name]


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status for an error the caller caused, or None for a server bug."""
    error = error_of(exc)
    if error is None:
        return None
    return grpc_code(error), error.message


def wire_trailer(protocol: ErrorWire | None, code: str, message: str) -> tuple[tuple[str, bytes], ...]:
    """The trailer that carries a failed call's error in its wire dialect; none when it asked for
    no wire bytes (or the status is one that has none: ``SessionProtocol.error_wire``,
    ``RenderErrorWire``)."""
    if protocol is None:
        return ()
    try:
        data = protocol.error_wire(code, message)
    except Exception:  # a bug here must not cost the client its status (``_end`` would lose it)
        logging.getLogger("parsetier.server").exception("rendering an error in its wire dialect failed")
        return ()
    return ((WIRE_TRAILER, data),) if data else ()
