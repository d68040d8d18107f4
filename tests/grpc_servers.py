"""Real parsetier servers for tests: in-process on a background thread, or as a subprocess.

In-process servers share the test's models (loaded once) and start in milliseconds; the
subprocess form (``testkit.servers.ProcessServer``, the launcher the benchmarks use too, re-exported
here) is for what only a real process shows — signals, exit codes, log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from parsetier.models import ModelRegistry
from parsetier.service import Limits, build_server
from parsetier.service.server import ServerHandle
from testkit.servers import ROOT, ProcessServer, subprocess_env, wait_for

__all__ = ["ROOT", "LogRecords", "ProcessServer", "ThreadServer", "server_logs", "subprocess_env", "wait_for"]


class ThreadServer:
    """A server on 127.0.0.1 with its own event loop thread. ``with ThreadServer(...) as s: s.target``."""

    def __init__(self, registry: ModelRegistry, limits: Limits | None = None, **options) -> None:
        """``options`` are ``build_server``'s keywords (reflection, TLS, auth...)."""
        self.registry = registry
        self.limits = limits
        self.options = options
        self.handle: ServerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="parsetier-test-server", daemon=True)

    @property
    def target(self) -> str:
        assert self.handle is not None
        return f"127.0.0.1:{self.handle.port}"

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        try:
            self.loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self.handle = await build_server(self.registry, self.limits, "127.0.0.1", 0, **self.options)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            raise
        self._ready.set()
        await self._stop.wait()
        await self.handle.server.stop(0)

    def run_coroutine(self, coro, timeout: float = 30.0):
        """Run a coroutine on the server's loop (e.g. ``handle.drain``) and wait for its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


class LogRecords(logging.Handler):
    """Every record the in-process server logs while ``server_logs()`` is active."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.records.append(record)

    def wait_for_session_ends(
        self, rpc: str, count: int = 1, timeout: float = 10.0
    ) -> list[logging.LogRecord]:
        """The ``session_end`` records of ``rpc`` once there are ``count`` (logged after the status
        went out, so they may lag the client's view)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                ends = [r for r in self.records if r.getMessage() == "session_end" and r.fields["rpc"] == rpc]
            if len(ends) >= count or time.monotonic() > deadline:
                return ends
            time.sleep(0.01)

    def session_ends(self, rpc: str) -> list[dict]:
        with self._lock:
            ends = [r.fields for r in self.records if r.getMessage() == "session_end"]
        return [fields for fields in ends if fields["rpc"] == rpc]


@contextlib.contextmanager
def server_logs() -> Iterator[LogRecords]:
    handler = LogRecords()
    logger = logging.getLogger("parsetier")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
