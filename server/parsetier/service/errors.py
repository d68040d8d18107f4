"""Errors as gRPC status codes, in one place so the contract in docs/service.md holds.

Every refusal, the protocol's and the service layer's own (draining, the session gate, an
undecodable message), is a ``parsetier.status.StatusError`` carrying its ``Code``; here that code
becomes the gRPC status of the same name. Anything else is a server bug: INTERNAL, logged, and
confined to the one session that hit it.
"""

from __future__ import annotations

import grpc

from parsetier.status import StatusError, error_of

__all__ = ["grpc_code", "status_for"]


def grpc_code(error: StatusError) -> grpc.StatusCode:
    return grpc.StatusCode[error.code.name]


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status for an error the caller caused, or None for a server bug."""
    error = error_of(exc)
    if error is None:
        return None
    return grpc_code(error), error.message
