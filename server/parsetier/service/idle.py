"""The idle timeout of every stream's reads, kept by one timer for the whole server.

A stream that waits longer than ``--idle-timeout`` for its client's next message is ended. Arming
a timer for each read (``asyncio.timeout``) costs a timer handle, a heap push and a cancel per
client message: several microseconds of a one-token ``Parse`` message, whose whole budget is a
few tens. Here a read only notes when it began (a dict entry), and one sweep, a fraction of the
timeout apart, cancels the reads that have waited too long; the read then raises
``TimeoutError``. A read therefore ends between ``timeout`` and ``timeout + period`` seconds of
silence, never before.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

SWEEPS_PER_TIMEOUT = 10
"""The sweep runs every ``timeout / SWEEPS_PER_TIMEOUT`` seconds (at most every second)."""


class IdleWatch:
    """Reads with the idle timeout; one per servicer, used from its event loop only."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.period = min(1.0, timeout / SWEEPS_PER_TIMEOUT)
        self._waiting: dict[asyncio.Task, float] = {}
        """Each task in a read, and the loop time its read began."""
        self._expired: set[asyncio.Task] = set()
        self._timer: asyncio.TimerHandle | None = None

    async def read(self, context: grpc.aio.ServicerContext) -> Any:
        """The client's next message, or ``TimeoutError`` after ``timeout`` s of silence."""
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._waiting[task] = loop.time()
        if self._timer is None:
            self._timer = loop.call_later(self.period, self._sweep, loop)
        try:
            return await context.read()
        except asyncio.CancelledError:
            if task not in self._expired:
                raise
            self._expired.discard(task)
            task.uncancel()
            raise TimeoutError from None
        finally:
            del self._waiting[task]

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel the reads that began ``timeout`` ago or more (a task someone else is already
        cancelling, a drain's hand-off, is left to that)."""
        deadline = loop.time() - self.timeout
        for task, since in self._waiting.items():
            if since <= deadline and task not in self._expired and not task.cancelling():
                self._expired.add(task)
                task.cancel()
        self._timer = loop.call_later(self.period, self._sweep, loop) if self._waiting else None
