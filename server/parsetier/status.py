"""The contract's error codes, free of grpc, and the one error type that carries them.

Every error a caller (or the deployment) causes is a ``StatusError``: it carries the status code
the contract assigns (``code``) and a message meant for the caller (``message``), as h11's
``ProtocolError`` carries its ``error_status_hint``. Turning an exception into a status is then
one attribute read (``error_of``); an exception that is not a ``StatusError`` is a server bug
(INTERNAL). A new refusal cannot be mapped wrong on one RPC and right on another: there is no
table to forget it in.

Keeping the codes here, rather than ``grpc.StatusCode``, lets the protocol, the session and their
tests run without a network stack, and lets the multiplexed RPC put a session's code into a reply
(``SessionStatus.code``) without the stream ending. This module imports nothing of parsetier's, so
every layer can raise its errors.
"""

from __future__ import annotations

import enum


class Code(enum.IntEnum):
    """The status codes the contract uses; values are ``google.rpc.Code``'s."""

    OK = 0
    CANCELLED = 1
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNAVAILABLE = 14
    INTERNAL = 13
    UNAUTHENTICATED = 16


class StatusError(Exception):
    """An error with the status the contract assigns it. Subclasses name their code as a class
    attribute (``code = Code.NOT_FOUND``); ``ProtocolError`` takes it per instance."""

    code: Code = Code.INVALID_ARGUMENT

    @property
    def message(self) -> str:
        """What the caller is told (by default the exception's text)."""
        return str(self)


class ProtocolError(StatusError):
    """A request the contract refuses, with the code it assigns and a message for the caller."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code


INTERNAL_MESSAGE = "internal server error; the server log has the details"
"""What a server bug tells the caller: nothing about the exception (its text may hold request data
or internals); the server log has the traceback."""


def internal() -> ProtocolError:
    """A server bug, as the caller sees it (INTERNAL, the fixed message); the caller logs the
    exception itself."""
    return ProtocolError(Code.INTERNAL, INTERNAL_MESSAGE)


def invalid(message: str) -> ProtocolError:
    return ProtocolError(Code.INVALID_ARGUMENT, message)


def out_of_order(message: str) -> ProtocolError:
    return ProtocolError(Code.FAILED_PRECONDITION, message)


def exhausted(message: str) -> ProtocolError:
    return ProtocolError(Code.RESOURCE_EXHAUSTED, message)


def unavailable(message: str) -> ProtocolError:
    return ProtocolError(Code.UNAVAILABLE, message)


def error_of(exc: BaseException) -> StatusError | None:
    """The contract's error for an exception the caller caused, or None for a server bug."""
    return exc if isinstance(exc, StatusError) else None
