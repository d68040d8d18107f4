"""Errors as gRPC status codes, in one place so the contract in docs/service.md holds.

Every refusal, the protocol's and the service layer's own (draining, the session gate, an
undecodable message), is a ``parsetier.status.StatusError`` carrying its ``Code``; here that code
becomes the gRPC status of the same name. Anything else is a server bug: INTERNAL, logged, and
confined to the one session that hit it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NoReturn, Protocol

import grpc

from parsetier.status import StatusError, error_of

__all__ = [
    "FAULT_TRAILER",
    "WIRE_TRAILER",
    "ErrorWire",
    "abort",
    "fault_trailer",
    "grpc_code",
    "status_for",
    "status_message",
    "wire_trailer",
]

FAULT_TRAILER = (("parsetier-fault", "server"),)
"""Trailing metadata of every status that is the server's own fault (INTERNAL: a bug it logged), so
that a client never retries it and needs no message text to tell it from a stream reset on the way
(the retry rule: the comment on ``ParserService`` in the proto)."""

WIRE_TRAILER = "parsetier-wire-bin"
"""Trailing metadata of a ``Parse`` stream or ``ParseOnce`` call that ended with an error and
asked for wire bytes (``Open.wire``): the error in its dialect, to forward (``dialects.errors``)."""
STATUS_MESSAGE_BYTES = 3072
"""Most bytes a status message takes in its trailer, percent-encoded as ``grpc-message`` is (a
byte outside printable ASCII takes three). gRPC clients refuse a call's trailers past 8 KiB
(some of the time from 8 KiB, always from 16 KiB) and then report RESOURCE_EXHAUSTED instead of
the status: the message (at most 1,024 characters, of up to 9 encoded bytes each) and the wire
error (``WIRE_TRAILER_BYTES``) are held within that together."""
WIRE_TRAILER_BYTES = 3072
"""Most bytes of a ``WIRE_TRAILER`` value: past it, the message it shows is cut further."""


class ErrorWire(Protocol):
    """What renders a call's error in its dialect: a session's ``SessionProtocol``, or a failed
    ``Render``'s ``render.RenderErrorWire``."""

    def error_wire(self, code: str, message: str) -> bytes: ...


def grpc_code(error: StatusError) -> grpc.StatusCode:
    return grpc.StatusCode[error.code.name]


async def abort(
    context: grpc.aio.ServicerContext, error: StatusError, trailer: Sequence[tuple[str, str | bytes]] = ()
) -> NoReturn:
    """End the call with ``error``'s status: its code mapped here, its message, ``trailer`` and the
    fault trailer when the status is the server's own."""
    code = grpc_code(error)
    await context.abort(code, error.message, trailing_metadata=(*trailer, *fault_trailer(code)))
    raise AssertionError("grpc.aio's abort always raises")  # for the type checker


def fault_trailer(code: grpc.StatusCode) -> tuple[tuple[str, str], ...]:
    """The trailer that marks a status as the server's own fault: every INTERNAL it sends (the
    server never answers a client's mistake with INTERNAL, so INTERNAL is always its own)."""
    return FAULT_TRAILER if code == grpc.StatusCode.INTERNAL else ()


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
        while len(data) > WIRE_TRAILER_BYTES and message:
            message = message[: len(message) // 2]
            data = protocol.error_wire(code, message + "…")
    except Exception:  # a bug here must not cost the client its status (``_end`` would lose it)
        logging.getLogger("parsetier.server").exception("rendering an error in its wire dialect failed")
        return ()
    return ((WIRE_TRAILER, data),) if data else ()


def _encoded_size(char: str) -> int:
    """The bytes ``char`` takes percent-encoded in ``grpc-message``."""
    return sum(1 if 0x20 <= byte <= 0x7E and byte != 0x25 else 3 for byte in char.encode())


def status_message(message: str) -> str:
    """``message`` cut (marked ``…``) so that its ``grpc-message`` form fits
    ``STATUS_MESSAGE_BYTES``: a message of non-ASCII text (a model name in CJK) would otherwise
    push the trailers past what clients accept."""
    if len(message) * 9 <= STATUS_MESSAGE_BYTES:
        return message
    total = 0
    for at, char in enumerate(message):
        total += _encoded_size(char)
        if total > STATUS_MESSAGE_BYTES - 3:  # room for the mark
            return message[:at] + "…"
    return message
