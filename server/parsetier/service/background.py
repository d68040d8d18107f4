"""A background task of a worker's event loop (the lag probe, the heap trimmer): started once,
cancelled and awaited on stop, so a drain leaves nothing running."""

from __future__ import annotations

import asyncio
import contextlib


class LoopTask:
    """Runs ``self._run()`` as one named task of the running loop, between ``start`` and ``stop``."""

    task_name = "parsetier-background"

    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        raise NotImplementedError
