"""Caller errors as gRPC status codes, in one table so the contract in docs/service.md holds.

A ``ServiceError`` carries the status code chosen where the problem was found; exceptions from
the core are mapped by type. Anything else is a server bug: INTERNAL, logged, and confined to the
one stream that hit it.
"""

from __future__ import annotations

import grpc

from parsetier.constraints import InvalidTool, Underivable
from parsetier.models import UnknownModel
from parsetier.session import InvalidInput, SessionError, WrongState
from parsetier.tokenizers import TokenizerUnavailable


class ServiceError(Exception):
    """A request the service refuses, with the status code the contract assigns."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, message)


def out_of_order(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.FAILED_PRECONDITION, message)


def exhausted(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status for an error the caller caused, or None for a server bug."""
    if isinstance(exc, ServiceError):
        return exc.code, exc.message
    if isinstance(exc, UnknownModel):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, TokenizerUnavailable):
        # Configured but not installed here: the operator's to fix, not the caller's request.
        return grpc.StatusCode.FAILED_PRECONDITION, f"model's tokenizer is not available: {exc}"
    if isinstance(exc, Underivable):
        return grpc.StatusCode.FAILED_PRECONDITION, f"no constraint can be derived: {exc}"
    if isinstance(exc, InvalidTool):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, WrongState):
        return grpc.StatusCode.FAILED_PRECONDITION, str(exc)
    if isinstance(exc, InvalidInput | SessionError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    return None
