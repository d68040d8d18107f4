"""Errors as gRPC status codes, in one place so the contract in docs/service.md holds.

The protocol raises ``parsetier.status.ProtocolError`` (a grpc-free code); the service layer's own
refusals (draining, the session gate) raise ``ServiceError`` with a ``grpc.StatusCode``. Anything
else is a server bug: INTERNAL, logged, and confined to the one session that hit it.
"""

from __future__ import annotations

import grpc

from parsetier.status import ProtocolError, error_of

__all__ = ["ServiceError", "exhausted", "grpc_code", "invalid", "out_of_order", "status_for"]


class ServiceError(Exception):
    """A request the service layer refuses, with the status code the contract assigns."""

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


def grpc_code(error: ProtocolError) -> grpc.StatusCode:
    return grpc.StatusCode[error.code.name]


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status for an error the caller caused, or None for a server bug."""
    if isinstance(exc, ServiceError):
        return exc.code, exc.message
    error = error_of(exc)
    if error is None:
        return None
    return grpc_code(error), error.message
