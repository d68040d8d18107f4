"""Wrapping grpc method handlers, for the interceptors (auth, metrics, tracing) that need to run
code around an RPC's behaviour rather than only look at its method name and metadata.

grpc's asyncio interceptors see ``handler_call_details`` (method, metadata) but not the call's
context; to check a peer certificate or time a reply they return a new handler of the same shape
whose behaviour runs theirs around the original.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def kind_of(handler: grpc.RpcMethodHandler) -> str:
    """``unary_unary``, ``unary_stream``, ``stream_unary`` or ``stream_stream``."""
    return next(name for name in KINDS if getattr(handler, name))


def rebuilt(
    handler: grpc.RpcMethodHandler, kind: str, behaviour: Callable[..., Any]
) -> grpc.RpcMethodHandler:
    """A handler like ``handler`` (same kind and (de)serializers) running ``behaviour``."""
    return getattr(grpc, f"{kind}_rpc_method_handler")(
        behaviour,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
