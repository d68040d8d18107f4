"""The one server launcher: ``parsetier serve --port 0`` (or another gRPC server speaking the same
proto) in a subprocess on 127.0.0.1, for the tests and the benchmarks alike.

Its JSON log lines are collected from stderr and its human-readable lines from stdout, both read
by threads so a full pipe never stalls the server. The benchmarks add what they measure: the
server's processes (``pids``), their CPU time and memory, and CPUs to pin them to: every thread of
every process (grpcio's threads included), not only the main thread ``os.sched_setaffinity(pid)``
reaches.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .procfs import allowed_cpus, cpu_seconds, process_tree, rss_pss_bytes, threads

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = (ROOT / "server", ROOT / "client" / "python", ROOT / "protos" / "python")
"""The checkout's import roots: the server, the Python client, and what both import (the generated
stubs and the shared argument types)."""
"""The checkout (this file is tests/testkit/servers.py)."""


def wait_for(condition, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds (what a server does after a reply, such as freeing a
    stream's sessions, happens just after the client sees the reply); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def subprocess_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the caller's environment by default), with the source trees importable even
    without an install."""
    env = dict(os.environ if base is None else base)
    paths = [str(p) for p in SOURCE_ROOTS]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def _threads_or_none(pid: int) -> list[int]:
    try:
        return threads(pid)
    except FileNotFoundError:
        return []


START_TIMEOUT = 180.0
"""Seconds a server process may take to listen. A server started with a configuration of many
models prepares each model's native tables before it listens: 60 s on a 2-core machine under
the load of parallel builds (the suite's own slowest start); a server that never listens fails
the test either way, so the margin costs nothing."""


class ProcessServer:
    """``parsetier serve --port 0 *args`` in a subprocess. ``with ProcessServer(...) as s: s.target``.

    One process unless ``args`` ask for ``--workers``. ``command`` replaces the ``parsetier serve``
    command line (e.g. the benchmark's echo server); ``ready`` is the log line that carries the port
    (``"workers listening"`` waits for every worker); ``keep_session_ends=False`` drops the
    per-session log lines unparsed (thousands a second under a benchmark's load); ``cpus`` starts the
    process on those CPUs only, so every thread it starts and every worker it forks inherits them.
    """

    def __init__(
        self,
        *args: str,
        command: Sequence[str] | None = None,
        ready: str = "listening",
        env: dict[str, str] | None = None,
        keep_session_ends: bool = True,
        cpus: set[int] | None = None,
    ) -> None:
        self.args = args
        self.command = command
        self.ready = ready
        self.env = env
        self.keep_session_ends = keep_session_ends
        self.cpus = cpus
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.logs: list[dict] = []
        self.stdout: list[str] = []
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT) -> ProcessServer:
        if self.command is not None:
            cmd = [*self.command, *self.args]
        else:
            # One process unless asked for workers: the default follows the machine's cores, and a
            # test of one server's behaviour must not depend on how many this machine has.
            workers = () if "--workers" in self.args else ("--workers", "1")
            cmd = [sys.executable, "-m", "parsetier.cli", "serve", "--port", "0", *workers, *self.args]
        self.proc = self._spawn(cmd)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        if not self._listening.wait(timeout):
            self.kill()
            raise RuntimeError(f"server did not start; logs: {self.logs[-20:]}")
        return self

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[str]:
        """The process, started under ``cpus`` when set: this thread takes the affinity for the
        fork (a child inherits its parent thread's) and gives it back, so nothing of the server,
        not even the threads grpcio starts before ``pin`` could reach them, runs elsewhere."""

        def popen() -> subprocess.Popen[str]:
            return subprocess.Popen(
                cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=subprocess_env(self.env)
            )

        if self.cpus is None:
            return popen()
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cpus)
        try:
            return popen()
        finally:
            os.sched_setaffinity(0, mine)

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            if not self.keep_session_ends and '"session_end"' in line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = {"raw": line.rstrip()}
            self.logs.append(record)
            if record.get("msg") == self.ready:
                self.port = record["port"]
                self._listening.set()

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line.rstrip("\n"))

    def wait_for_log(self, msg: str, timeout: float = 10.0, count: int = 1) -> dict:
        """The first ``msg`` log line, once there are ``count`` of them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = [record for record in list(self.logs) if record.get("msg") == msg]
            if len(records) >= count:
                return records[0]
            time.sleep(0.02)
        raise AssertionError(f"fewer than {count} {msg!r} log lines within {timeout} s; logs: {self.logs}")

    def worker_of(self, request_id: str, timeout: float = 10.0) -> int:
        """The worker that served session ``request_id``, read from its ``session_end`` line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in list(self.logs):
                if record.get("msg") == "session_end" and record.get("request_id") == request_id:
                    return record["worker"]
            time.sleep(0.02)
        raise AssertionError(f"no session_end for {request_id}")

    def pids(self) -> list[int]:
        """The server's processes: the supervisor and its workers, or the one process."""
        assert self.proc is not None
        for record in self.logs:
            if record.get("msg") == "workers listening":
                return [self.proc.pid, *record["pids"]]
        return [self.proc.pid]

    def pin(self, cpu: int) -> None:
        """Every thread of every process of the server on ``cpu``. ``sched_setaffinity(pid)`` sets
        one thread (the main one): grpcio's polling and executor threads kept running on every
        core. Threads started later inherit the affinity of the thread that starts them, which is
        pinned too; a server started with ``cpus`` needs none of this."""
        self.cpus = {cpu}
        for pid in self._tree():
            for tid in _threads_or_none(pid):
                try:
                    os.sched_setaffinity(tid, self.cpus)
                except ProcessLookupError:  # the thread ended meanwhile
                    continue

    def thread_cpus(self) -> dict[tuple[int, int], set[int]]:
        """The CPUs each thread may run on, by (process, thread), over the server's process tree:
        what ``pin`` and ``cpus`` are checked against."""
        found = {}
        for pid in self._tree():
            for tid in _threads_or_none(pid):
                try:
                    found[(pid, tid)] = allowed_cpus(pid, tid)
                except FileNotFoundError:
                    continue
        return found

    def _tree(self) -> list[int]:
        """The server's processes and their descendants (workers, anything they start)."""
        tree: dict[int, None] = {}
        for pid in self.pids():
            try:
                tree.update(dict.fromkeys(process_tree(pid)))
            except FileNotFoundError:  # a worker that has exited
                continue
        return list(tree)

    def cpu(self) -> float:
        """CPU seconds used so far by the server's processes."""
        total = 0.0
        for pid in self.pids():
            try:
                total += cpu_seconds(pid)
            except FileNotFoundError:
                continue
        return total

    def memory(self) -> list[tuple[int, int]]:
        """(RSS, PSS) in bytes of each of the server's processes."""
        return [rss_pss_bytes(pid) for pid in self.pids()]

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (a drain), then SIGKILL if it has not exited within ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> ProcessServer:
        """Starts the server unless it was started already (the benchmark's launcher starts and
        pins it first): starting twice would leave the first process running."""
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
