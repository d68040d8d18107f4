"""The status a server ended a grpc.aio call with, kept safe from a race in grpc's asyncio client.

When a server ends a stream while a client write is in flight (an error in the middle of a
session, a server's own fault), grpc.aio (grpc/grpc#36066, still in 1.85) sets a status of its own
for the failed write: INTERNAL, no trailers. Processed after the server's status, it replaces it
(measured against a stand-in that ends every stream with INTERNAL and the fault trailer after the
first message: 15 of 40 calls); processed before, it stands until the server's arrives. Either
way the server's code, details and trailers (the retry rule's ``parsetier-fault`` among them)
could be lost, and a client would resume what it must surface.

``watch`` records the first status a call finishes with (grpc runs done callbacks when the status
is first set); ``write_failed`` marks a call one of whose writes failed; ``server_error`` gives
back the server's status: the first one when grpc's replaced it, or, when grpc's came first
after a failed write, the one that follows it within ``FOLLOW_WAIT``. Reading the status needs
the call's Cython object: with a grpc without it, the call's errors stay as grpc reports them.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

import grpc
from grpc import _common

FOLLOW_WAIT = 1.0
"""Seconds ``server_error`` waits for the server's status after grpc's own for a failed write."""

_FIRST: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Each watched call's first status (grpc's Cython ``AioRpcStatus``)."""

_WRITE_FAILED: weakref.WeakSet[Any] = weakref.WeakSet()
"""Watched calls one of whose writes failed."""


def _status_of(call: Any) -> Any:
    return getattr(getattr(call, "_cython_call", None), "_status", None)


def watch(call: Any) -> Any:
    """Remember the first status ``call`` ends with; returns ``call``."""

    def keep(_: Any) -> None:
        if call not in _FIRST and (status := _status_of(call)) is not None:
            _FIRST[call] = status

    call.add_done_callback(keep)
    return call


def write_failed(call: Any) -> None:
    """A write (or the half-close) on ``call`` raised: its status may be grpc's own for a while."""
    _WRITE_FAILED.add(call)


def _maybe_grpcs(status: Any) -> bool:
    """A status grpc sets for a failed write looks like this: INTERNAL without trailers."""
    return (
        status is not None
        and _common.CYGRPC_STATUS_CODE_TO_STATUS_CODE.get(status.code()) == grpc.StatusCode.INTERNAL
        and not status.trailing_metadata()
    )


async def server_error(call: Any, error: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """``error`` (raised by ``call`` or built from it), or the status the server sent when grpc's
    own took or held its place."""
    first = _FIRST.get(call)
    if first is None:
        return error
    if call in _WRITE_FAILED and _maybe_grpcs(first):
        deadline = time.monotonic() + FOLLOW_WAIT
        while _status_of(call) is first and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
    now = _status_of(call)
    sent = first if now is not first and _maybe_grpcs(now) else now
    return grpc.aio.AioRpcError(
        _common.CYGRPC_STATUS_CODE_TO_STATUS_CODE[sent.code()],
        error.initial_metadata(),
        grpc.aio.Metadata.from_tuple(sent.trailing_metadata()),
        sent.details(),
        sent.debug_error_string(),
    )
