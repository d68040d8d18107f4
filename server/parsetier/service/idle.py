"""The idle timeout of every stream, kept by one timer for the whole server.

A stream makes progress when its client's next message arrives or when a reply it writes is taken
by the client (grpc hands a write back only once HTTP/2 flow control lets it out). A stream that
waits longer than ``--idle-timeout`` in either is ended: a client that stops sending, and one
that stops reading (its window full, the server's write blocked), cost a slot and buffers for
as long as they like otherwise. Arming a timer for each read or write (``asyncio.timeout``)
costs a timer handle, a heap push and a cancel per message: several microseconds of a one-token
``Parse`` message, whose whole budget is a few tens. Here a wait only notes when it began (a dict
entry), and one sweep, a fraction of the timeout apart, cancels the waits that have gone on too
long; the wait then raises ``TimeoutError`` (``WriteTimeout`` for a write). A wait therefore ends
between ``timeout`` and ``timeout + period`` seconds after it began, never before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

import grpc

SWEEPS_PER_TIMEOUT = 10
"""The sweep runs every ``timeout / SWEEPS_PER_TIMEOUT`` seconds (at most every second)."""

T = TypeVar("T")


class WriteTimeout(TimeoutError):
    """A reply waited ``timeout`` seconds for the client to take it (it stopped reading)."""


class IdleWatch:
    """Reads and writes with the idle timeout; one per servicer, used from its event loop only."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.period = min(1.0, timeout / SWEEPS_PER_TIMEOUT)
        self._waiting: dict[asyncio.Task, float] = {}
        """Each task in a read or a write, and the loop time its wait began."""
        self._expired: set[asyncio.Task] = set()
        self._timer: asyncio.TimerHandle | None = None

    async def read(self, context: grpc.aio.ServicerContext) -> Any:
        """The client's next message, or ``TimeoutError`` after ``timeout`` s of silence."""
        return await self._watched(context.read(), TimeoutError)

    async def write(self, context: grpc.aio.ServicerContext, message: Any) -> None:
        """Write ``message``; ``WriteTimeout`` when the client has not taken it within ``timeout`` s."""
        await self._watched(context.write(message), WriteTimeout)

    async def _watched(self, wait: Awaitable[T], timeout_error: type[TimeoutError]) -> T:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._waiting[task] = loop.time()
        if self._timer is None:
            self._timer = loop.call_later(self.period, self._sweep, loop)
        try:
            return await wait
        except asyncio.CancelledError:
            if task not in self._expired:
                raise
            self._expired.discard(task)
            task.uncancel()
            raise timeout_error from None
        finally:
            del self._waiting[task]

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel the waits that began ``timeout`` ago or more (a task someone else is already
        cancelling, a drain's hand-off, is left to that)."""
        deadline = loop.time() - self.timeout
        for task, since in self._waiting.items():
            if since <= deadline and task not in self._expired and not task.cancelling():
                self._expired.add(task)
                task.cancel()
        self._timer = loop.call_later(self.period, self._sweep, loop) if self._waiting else None
