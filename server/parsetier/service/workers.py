"""Several server processes on one port: ``parsetier serve --workers N``.

grpc-python runs one event loop on one core per process, so a host's cores are used by
processes. The supervisor (the process ``parsetier serve`` started) reserves the port, loads what
every worker shares (the registry, and with ``load_before_fork`` the models' tokenizers), then
forks N workers before any gRPC object exists — gRPC's threads and sockets do not survive a fork.
Each worker builds its own server with ``SO_REUSEPORT`` on that port, so the kernel spreads
*connections* (not streams) over the workers.

Signals: SIGTERM/SIGINT to the supervisor is forwarded to every worker, which drains as a single
server does (health NOT_SERVING, new sessions refused, open ones get the grace). The supervisor
exits when all workers have: 0 when every drain was clean, else 1. A worker that dies while the
supervisor is not draining is logged and started again at once (a worker that keeps dying, at
most once per ``RESPAWN_DELAY``), forked from the supervisor as the first ones were.

Descriptors: a worker closes the supervisor's own descriptors (the port reservation during
start-up, the start-up pipe's read end, the metrics endpoint's listener) after the fork.
``_Descriptors`` is the one ledger of them: the supervisor closes them through it, so a later fork
(a replacement worker) is never handed a number that was closed, or that the kernel has since
given to something else.

Every log line of a worker carries ``"worker": <index>`` (and the supervisor's ``"worker":
"supervisor"``), so interleaved JSON lines stay attributable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from parsetier.models import ModelRegistry
from parsetier.protocol.rules import Limits
from parsetier.service import collector, logs
from parsetier.service.logs import SERVER_LOG

READY_TIMEOUT = 120.0
"""Seconds the supervisor waits for every worker to listen."""
RESPAWN_DELAY = 1.0
"""Least seconds between two starts of one worker: a worker that dies sooner after its start (a bad
configuration, a crash at start-up) is restarted no more often than this; one that served longer is
restarted at once."""


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound (not listening) SO_REUSEPORT socket holding ``port`` (0: a free one) until the
    workers listen on it too; its ``getsockname()`` names the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host.strip("[]"), port))
    return sock


def serve_workers(
    workers: int,
    registry: ModelRegistry,
    limits: Limits,
    host: str,
    port: int,
    grace: float,
    preload: Sequence[str],
    log_level: str = "INFO",
    load_before_fork: bool = True,
    server_options: dict[str, Any] | None = None,
    metrics_on: bool = False,
    after_fork: Callable[[], Iterable[socket.socket]] | None = None,
    announce: Callable[[int], object] | None = None,
) -> int:
    """Run ``workers`` server processes on ``host:port`` until SIGTERM/SIGINT; the exit code.

    ``load_before_fork`` loads the ``preload`` models in the supervisor, so the workers share
    their pages copy-on-write; otherwise each worker loads them itself once it listens.
    ``server_options`` go to every worker's ``build_server`` (reflection, TLS, auth);
    ``metrics_on`` gives each worker its Prometheus metrics (labelled with its index);
    ``after_fork`` runs in the supervisor once all listen
    (the metrics endpoint: a thread, so it must not exist at the fork) and returns the sockets it
    opened, which workers started later (replacements) close; then ``announce(port)`` prints the
    start-up summary (by default one line)."""
    logs.configure(log_level, fields={"worker": "supervisor"})
    # Nothing below may start the tokenizers' thread pool before the fork: children would then
    # run without it, and the library warns on every fork.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    reservation = reserve_port(host, port)
    port = reservation.getsockname()[1]
    if load_before_fork:
        started = time.monotonic()
        for name in preload:
            try:
                registry.get(name)
            except Exception as exc:
                SERVER_LOG.error("model failed to load", extra={"fields": {"model": name, "error": str(exc)}})
        SERVER_LOG.info(
            "models loaded",
            extra={"fields": {"models": len(preload), "seconds": round(time.monotonic() - started, 3)}},
        )
        preload = ()
    collector.freeze_loaded()  # the workers inherit the frozen models (each tunes its collector in serve)
    supervisor = _Supervisor(registry, limits, host, port, grace, preload, log_level)
    supervisor.server_options = dict(server_options or {})
    supervisor.metrics_on = metrics_on
    reserved = supervisor.own.add(reservation.detach())  # the ledger closes it, below
    try:
        supervisor.start(workers)
    finally:
        supervisor.own.close(reserved)
    if after_fork is not None and not supervisor.failed:
        for opened in after_fork():
            supervisor.own.keep(opened)
    if announce is not None:
        announce(port)
    else:
        print(f"parsetier: listening on {host}:{port} (gRPC, {workers} worker processes)", flush=True)
    return supervisor.wait()


class _Descriptors:
    """The supervisor's own descriptors, which a worker closes after its fork.

    A descriptor enters when the supervisor opens it and leaves in the call that closes it, so the
    set names only descriptors open now. (A list of numbers that outlived their close made every
    replacement worker fail with EBADF, or close a descriptor that had reused the number.) Sockets
    that a Python object owns (the metrics endpoint's listener, ``keep``) are closed in a worker
    through that object, so the object's own close can never hit a number reused since."""

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._sockets: list[socket.socket] = []

    def keep(self, sock: socket.socket) -> None:
        """A socket the supervisor keeps for its life, which workers forked from now on close."""
        self._sockets.append(sock)

    def add(self, fd: int) -> int:
        self._open.add(fd)
        return fd

    def close(self, fd: int) -> None:
        """Close one of them in the supervisor."""
        self._open.remove(fd)
        os.close(fd)

    def close_in_worker(self) -> None:
        """In a freshly forked worker: close every one (the supervisor keeps its own)."""
        for fd in self._open:
            os.close(fd)
        for sock in self._sockets:
            sock.close()


class _Supervisor:
    def __init__(
        self,
        registry: ModelRegistry,
        limits: Limits,
        host: str,
        port: int,
        grace: float,
        preload: Sequence[str],
        log_level: str,
    ) -> None:
        self.registry, self.limits, self.host, self.port = registry, limits, host, port
        self.grace, self.preload, self.log_level = grace, tuple(preload), log_level
        self.pids: dict[int, int] = {}  # pid -> worker index
        self.started: dict[int, float] = {}  # worker index -> monotonic time of its last fork
        self.draining = False
        self.failed = False
        self.server_options: dict[str, Any] = {}
        self.metrics_on = False
        self.own = _Descriptors()
        """The supervisor's descriptors a worker must not keep open."""

    def start(self, workers: int) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        ready_read, ready_write = os.pipe()
        self.own.add(ready_read)
        for index in range(workers):
            self._fork(index, ready_write)
        os.close(ready_write)
        ready = _read_ready(ready_read, workers, READY_TIMEOUT)
        self.own.close(ready_read)
        if ready < workers:
            SERVER_LOG.error("workers did not start", extra={"fields": {"ready": ready, "workers": workers}})
            self.failed = True
            self._on_signal(signal.SIGTERM, None)
            return
        SERVER_LOG.info(
            "workers listening",
            extra={"fields": {"port": self.port, "workers": workers, "pids": sorted(self.pids)}},
        )

    def _fork(self, index: int, ready_write: int | None) -> int:
        """Start worker ``index``; its pid."""
        self.started[index] = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                self.own.close_in_worker()
                code = _worker_main(self, index, ready_write)
            except BaseException as exc:
                SERVER_LOG.error("worker failed", exc_info=exc)
            finally:
                logging.shutdown()
                os._exit(code)
        self.pids[pid] = index
        return pid

    def _on_signal(self, signum: int, frame: object) -> None:
        if not self.draining:
            SERVER_LOG.info("signal received", extra={"fields": {"signal": signal.Signals(signum).name}})
        self.draining = True
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def wait(self) -> int:
        """Reap workers until all have exited; restart the ones that die unasked."""
        while self.pids:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            index = self.pids.pop(pid, None)
            if index is None:
                continue
            if self.metrics_on:  # its live gauges (open sessions) must stop counting
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(pid)
            code = os.waitstatus_to_exitcode(status)
            if code != 0:
                self.failed = True
            SERVER_LOG.log(
                logging.INFO if code == 0 else logging.ERROR,
                "worker exited",
                extra={"fields": {"worker_index": index, "pid": pid, "exit_code": code}},
            )
            if not self.draining:
                time.sleep(max(0.0, self.started[index] + RESPAWN_DELAY - time.monotonic()))
                if not self.draining:
                    pid = self._fork(index, None)
                    SERVER_LOG.info("worker restarted", extra={"fields": {"worker_index": index, "pid": pid}})
        SERVER_LOG.info("stopped", extra={"fields": {"clean": not self.failed}})
        return 1 if self.failed else 0


def _worker_main(supervisor: _Supervisor, index: int, ready_write: int | None) -> int:
    from parsetier.service.server import serve  # imports grpc; no gRPC object exists before here

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _drain_when_orphaned()
    logs.configure(supervisor.log_level, fields={"worker": index})
    if supervisor.metrics_on:
        from parsetier.service import metrics

        metrics.enable(worker=str(index))

    def ready(handle) -> None:
        if ready_write is not None:
            os.write(ready_write, b"1")
            os.close(ready_write)

    clean = asyncio.run(
        serve(
            supervisor.registry,
            supervisor.limits,
            supervisor.host,
            supervisor.port,
            supervisor.grace,
            on_ready=ready,
            preload=supervisor.preload,
            reuse_port=True,
            metrics_on=supervisor.metrics_on,
            **supervisor.server_options,
        )
    )
    return 0 if clean else 1


def _drain_when_orphaned() -> None:
    """Linux: SIGTERM this worker when the supervisor dies (even by SIGKILL), so no worker is left
    serving a port nobody manages; the worker then drains like any other."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the supervisor's SIGTERM is the only way down


def _read_ready(fd: int, expected: int, timeout: float) -> int:
    """How many workers reported listening (one byte each) within ``timeout``."""
    deadline = time.monotonic() + timeout
    count = 0
    while count < expected:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        data = os.read(fd, expected - count)
        if not data:  # every writer closed: the rest died before listening
            break
        count += len(data)
    return count
