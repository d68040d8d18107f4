"""The contract's error codes, free of grpc: the sans-IO protocol raises ``ProtocolError`` and the
servicer translates its ``Code`` to a gRPC status (same names, same numbers as ``google.rpc.Code``).

Keeping the codes here, rather than ``grpc.StatusCode``, lets the protocol, the session and their
tests run without a network stack, and lets the multiplexed RPC put a session's code into a reply
(``SessionStatus.code``) without the stream ending.
"""

from __future__ import annotations

import enum

from parsetier.constraints import InvalidTool, Underivable
from parsetier.models import UnknownModel
from parsetier.session import InvalidInput, SessionError, WrongState
from parsetier.tokenizers import TokenizerUnavailable


class Code(enum.IntEnum):
    """The status codes the contract uses; values are ``google.rpc.Code``'s."""

    OK = 0
    CANCELLED = 1
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    UNAVAILABLE = 14
    INTERNAL = 13


class ProtocolError(Exception):
    """A request the contract refuses, with the code it assigns and a message for the caller."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> ProtocolError:
    return ProtocolError(Code.INVALID_ARGUMENT, message)


def out_of_order(message: str) -> ProtocolError:
    return ProtocolError(Code.FAILED_PRECONDITION, message)


def exhausted(message: str) -> ProtocolError:
    return ProtocolError(Code.RESOURCE_EXHAUSTED, message)


def error_of(exc: BaseException) -> ProtocolError | None:
    """The contract's error for an exception the caller caused, or None for a server bug."""
    if isinstance(exc, ProtocolError):
        return exc
    if isinstance(exc, UnknownModel):
        return ProtocolError(Code.NOT_FOUND, str(exc))
    if isinstance(exc, TokenizerUnavailable):
        # Configured but not installed here: the operator's to fix, not the caller's request.
        return ProtocolError(Code.FAILED_PRECONDITION, f"model's tokenizer is not available: {exc}")
    if isinstance(exc, Underivable):
        return ProtocolError(Code.FAILED_PRECONDITION, f"no constraint can be derived: {exc}")
    if isinstance(exc, InvalidTool):
        return ProtocolError(Code.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, WrongState):
        return ProtocolError(Code.FAILED_PRECONDITION, str(exc))
    if isinstance(exc, InvalidInput | SessionError):
        return ProtocolError(Code.INVALID_ARGUMENT, str(exc))
    return None
