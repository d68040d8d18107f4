"""Wrapping grpc method handlers, for the interceptors (auth, metrics, tracing) that need to run
code around an RPC's behaviour rather than only look at its method name and metadata.

grpc's asyncio interceptors see ``handler_call_details`` (method, metadata) but not the call's
context; to check a peer certificate or time a reply they return a new handler of the same shape
whose behaviour runs theirs around the original.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, Protocol

import grpc
from google.protobuf.message import Message

KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
SERVICE_PREFIX = "/parsetier.v1.ParserService/"


def parser_rpc(handler: grpc.RpcMethodHandler | None, handler_call_details: Any) -> str | None:
    """The ParserService RPC a call is for (``Parse``, ``ParseBatch``...), or None when there is
    no handler or the call is another service's (health, reflection): those the observing
    interceptors (metrics, tracing) pass through as they are."""
    method = handler_call_details.method
    if handler is None or not method.startswith(SERVICE_PREFIX):
        return None
    return method[len(SERVICE_PREFIX) :]


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


class Observer(Protocol):
    """What an observing interceptor learns of one RPC's messages."""

    def received(self, message: Any) -> None: ...

    def sent(self, message: Any) -> None: ...


class ObservedContext:
    """A servicer context whose ``read`` and ``write`` also tell an ``Observer``; everything else
    is the real context's."""

    __slots__ = ("_context", "_observer")

    def __init__(self, context: grpc.aio.ServicerContext, observer: Observer) -> None:
        self._context = context
        self._observer = observer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def read(self) -> Any:
        message = await self._context.read()
        if isinstance(message, (Message, bytes)):  # not EOF, nor bytes that did not decode
            # (``decoding``); bytes: a request the servicer reads itself (``RAW_REQUESTS``)
            self._observer.received(message)
        return message

    async def write(self, message: Any) -> None:
        self._observer.sent(message)
        await self._context.write(message)


def status_code(context: grpc.aio.ServicerContext, default: grpc.StatusCode) -> grpc.StatusCode:
    """The code the RPC ended with, as far as its context knows."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):
        return next((c for c in grpc.StatusCode if c.value[0] == code), default)
    return default


def observed(
    handler: grpc.RpcMethodHandler,
    observer_for: Callable[[], Any],
    finished: Callable[[Any, grpc.StatusCode, float], None],
) -> grpc.RpcMethodHandler:
    """``handler`` with each call's messages shown to a fresh ``observer_for()`` and
    ``finished(observer, code, seconds)`` called once the call ends, however it ends. Handlers whose
    behaviour is an async generator are returned as they are (ParserService writes through its
    context)."""
    kind = kind_of(handler)
    behaviour = getattr(handler, kind)
    if inspect.isasyncgenfunction(behaviour):
        return handler
    streaming_in = kind.startswith("stream")  # those messages come through context.read()
    unary_out = kind.endswith("unary")

    async def run(request: Any, context: grpc.aio.ServicerContext) -> Any:
        observer = observer_for()
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            if not streaming_in and isinstance(request, Message):
                observer.received(request)
            result = await behaviour(request, ObservedContext(context, observer))
            if unary_out and result is not None:
                observer.sent(result)
            code = status_code(context, grpc.StatusCode.OK)
            return result
        except grpc.aio.AbortError:
            code = status_code(context, grpc.StatusCode.UNKNOWN)
            raise
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except Exception:  # a servicer bug: grpc answers UNKNOWN
            code = grpc.StatusCode.UNKNOWN
            raise
        finally:
            finished(observer, code, time.perf_counter() - started)

    return rebuilt(handler, kind, run)
