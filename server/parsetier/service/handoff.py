"""The drain's hand-off: a draining server tells every session its client can resume elsewhere
(``Open.resumable``) to move now, with UNAVAILABLE, ``HANDOFF_MESSAGE`` and ``HANDOFF_TRAILER``,
instead of waiting for it to finish within the grace.

A stream is interrupted only while it waits for its client's next message, never in the middle of
one, so every reply it wrote is whole; one busy when the drain begins moves at its next read. A
``ParseBatch`` stream moves when all its sessions can resume (its clients resume each from its
last reply); an idle one is left to end as the client closes it, or to be cut when the server
stops.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from parsetier.protocol.batch import BatchProtocol
from parsetier.protocol.session import SessionProtocol
from parsetier.service.idle import IdleWatch
from parsetier.service.limits import SessionGate
from parsetier.status import Code, ProtocolError

HANDOFF_MESSAGE = "server is draining: resume this session on another server"
"""The status message (with UNAVAILABLE) a draining server hands resumable sessions off with."""
HANDOFF_TRAILER = (("parsetier-handoff", "resume"),)
"""Trailing metadata of a hand-off, so a client can tell it from other UNAVAILABLE ends."""


def trailer_for(message: str) -> tuple[tuple[str, str], ...]:
    """The trailing metadata of a stream ended with ``message``: the hand-off's, or none."""
    return HANDOFF_TRAILER if message == HANDOFF_MESSAGE else ()


def all_resumable(batch: BatchProtocol) -> bool:
    """The stream has sessions and every one said ``Open.resumable``: its client resumes them, so
    a draining server may hand the stream off instead of waiting."""
    sessions = batch.sessions
    return bool(sessions) and all(protocol.resumable for protocol in sessions.values())


class HandOff:
    """The streams' reads while a drain may hand them off, and the count of those it did."""

    def __init__(self, gate: SessionGate, idle: IdleWatch) -> None:
        self._gate = gate
        self._idle = idle
        self._reading: dict[asyncio.Task, BatchProtocol | None] = {}
        """Streams waiting for their client's next message that a drain may hand off: resumable
        ``Parse`` sessions (None), and ``ParseBatch`` streams with their sessions."""
        self._handed_off: set[asyncio.Task] = set()
        self.count = 0
        """Streams handed off since the drain began: those waiting when it began, at once, and the
        busy ones at their next read."""

    def begin(self) -> int:
        """Drain: tell every resumable session to move now; returns how many streams were waiting
        (``ParseBatch`` streams whose open sessions are all resumable count once each)."""
        waiting = [task for task, batch in self._reading.items() if batch is None or all_resumable(batch)]
        for task in waiting:
            self._handed_off.add(task)
            task.cancel()
        return len(waiting)

    def _error(self) -> ProtocolError:
        """The status that ends a stream handed off (counted in ``count``)."""
        self.count += 1
        return ProtocolError(Code.UNAVAILABLE, HANDOFF_MESSAGE)

    async def next_message(self, context: grpc.aio.ServicerContext, stream: SessionProtocol) -> Any:
        """A ``Parse`` stream's next message; for a resumable session while draining, the hand-off."""
        if not (stream.resumable and not stream.finished):
            return await self._idle.read(context)
        if self._gate.draining:
            raise self._error()
        return await self._read(context, None)

    def check_batch(self, batch: BatchProtocol) -> None:
        """While draining, a ParseBatch stream whose sessions can all resume elsewhere moves now:
        the stream ends with the hand-off status, its sessions with it (their clients resume
        each from its last reply, so nothing this stream did but did not answer is lost)."""
        if self._gate.draining and all_resumable(batch):
            raise self._error()

    async def next_batch_message(self, context: grpc.aio.ServicerContext, batch: BatchProtocol) -> Any:
        """A ParseBatch stream's next message; while draining, the hand-off (as for ``Parse``,
        only between two messages)."""
        self.check_batch(batch)
        return await self._read(context, batch)

    async def _read(self, context: grpc.aio.ServicerContext, batch: BatchProtocol | None) -> Any:
        """The client's next message, or the hand-off status if a drain hands this stream off
        while it waits (``batch``: a ParseBatch stream's sessions, None for a resumable ``Parse``
        session)."""
        task = asyncio.current_task()
        assert task is not None
        self._reading[task] = batch
        try:
            return await self._idle.read(context)
        except asyncio.CancelledError:
            if task not in self._handed_off:
                raise
            self._handed_off.discard(task)
            task.uncancel()
            raise self._error() from None
        finally:
            del self._reading[task]
