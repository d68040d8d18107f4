"""Real parsetier servers for tests: in-process on a background thread, or as a subprocess.

In-process servers share the test's models (loaded once) and start in milliseconds; the
subprocess form is for what only a real process shows — signals, exit codes, log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from parsetier.models import ModelRegistry
from parsetier.service import Limits, build_server
from parsetier.service.server import ServerHandle

ROOT = Path(__file__).resolve().parent.parent


def wait_for(condition, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds (what a server does after a reply, such as freeing a
    stream's sessions, happens just after the client sees the reply); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


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


def subprocess_env() -> dict[str, str]:
    """The test's environment, with the source trees importable even without an install."""
    env = dict(os.environ)
    paths = [str(ROOT / "server"), str(ROOT / "client" / "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


class ProcessServer:
    """``parsetier serve --port 0`` in a subprocess; its JSON log lines are collected from stderr,
    its human-readable lines from stdout."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.logs: list[dict] = []
        self.stdout: list[str] = []
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ProcessServer:
        # One process unless a test asks for workers: the default follows the machine's cores, and
        # tests of one server's behaviour must not depend on how many this machine has.
        workers = () if "--workers" in self.args else ("--workers", "1")
        cmd = [sys.executable, "-m", "parsetier.cli", "serve", "--port", "0", *workers, *self.args]
        self.proc = subprocess.Popen(
            cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=subprocess_env()
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if not self._listening.wait(timeout):
            self.kill()
            raise RuntimeError(f"server did not start; logs: {self.logs}")
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = {"raw": line.rstrip()}
            self.logs.append(record)
            if record.get("msg") == "listening":
                self.port = record["port"]
                self._listening.set()

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line.rstrip("\n"))

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def wait_for_log(self, msg: str, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in list(self.logs):
                if record.get("msg") == msg:
                    return record
            time.sleep(0.02)
        raise AssertionError(f"no {msg!r} log line within {timeout} s; logs: {self.logs}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> ProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


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
