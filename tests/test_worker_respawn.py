"""``parsetier serve --workers 2``: a SIGKILLed worker is replaced, and the replacement serves.

The supervisor forks the replacement as it forked the first workers; the replacement closes the
supervisor's own descriptors and listens on the shared port (SO_REUSEPORT). Checked with default
flags, with metrics, with TLS, and with a replacement killed in its turn: each time the
replacement listens and serves new connections within seconds. Resumable sessions open across
the kills of both original workers all resume, on the replacements, and come out as an
uninterrupted run.

The figures (seconds from the kill to the replacement listening, and to its first served call)
are printed; pytest shows them with ``-s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier_client import AsyncClient, Client, Tls
from service_samples import EXPECTED_CALLS, REASONING_AND_TWO_CALLS, WEATHER_TOOLS, join
from tls_support import Authority

pytestmark = pytest.mark.slow  # forked worker processes, killed and replaced

SESSIONS = 24
"""Resumable sessions, each on its own connection: about half are on the killed worker, and each
of those resumes on a connection the kernel hashes to one of the two workers."""
ATTEMPTS = 64
"""New connections tried before one must have reached the replacement (each does with
probability 1/2)."""
REPLACED_WITHIN = 20.0
"""Seconds the test waits for a replacement to listen: a bound on a working respawn (about a
second and a half on the 2-core test machine), far from a timing assertion; without a respawn
the replacement never listens."""


class Connections:
    """Channels with a connection of their own each (plaintext or TLS)."""

    def __init__(self, target: str, ca: Path | None) -> None:
        self.target = target
        self.tls = Tls(ca_file=ca) if ca is not None else None

    def _options(self) -> list[tuple[str, int]]:
        return [("grpc.use_local_subchannel_pool", 1)]

    def sync(self) -> grpc.Channel:
        if self.tls is None:
            return grpc.insecure_channel(self.target, options=self._options())
        return grpc.secure_channel(self.target, self.tls.credentials(), options=self._options())

    def aio(self) -> grpc.aio.Channel:
        if self.tls is None:
            return grpc.aio.insecure_channel(self.target, options=self._options())
        return grpc.aio.secure_channel(self.target, self.tls.credentials(), options=self._options())


def _worker_pid(server: ProcessServer, index: int) -> int:
    """The pid of worker ``index``'s latest process (its latest ``listening`` line)."""
    lines = [r for r in list(server.logs) if r.get("msg") == "listening" and r.get("worker") == index]
    return lines[-1]["pid"]


def _listening_count(server: ProcessServer, index: int) -> int:
    return sum(r.get("msg") == "listening" and r.get("worker") == index for r in list(server.logs))


def kill_and_wait_for_replacement(
    server: ProcessServer, connections: Connections, index: int, tag: str
) -> tuple:
    """SIGKILL worker ``index``; wait until its replacement listens and has served a new
    connection. Seconds from the kill to each."""
    before = _listening_count(server, index)
    pid = _worker_pid(server, index)
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    deadline = killed + REPLACED_WITHIN
    while _listening_count(server, index) == before:
        failures = [r for r in list(server.logs) if r.get("msg") == "worker failed"]
        assert time.monotonic() < deadline, f"worker {index} was not replaced; failures: {failures[-3:]}"
        time.sleep(0.01)
    listening = time.monotonic() - killed
    assert _worker_pid(server, index) != pid
    for attempt in range(ATTEMPTS):
        request_id = f"{tag}-probe-{attempt}"
        with connections.sync() as channel, Client(server.target, channel=channel, timeout=30) as client:
            client.parse_once("qwen3", [9707], request_id=request_id)
        if server.worker_of(request_id) == index:
            return listening, time.monotonic() - killed
    raise AssertionError(f"{ATTEMPTS} new connections never reached the replacement of worker {index}")


async def resumable_sessions_across(
    connections: Connections, ids: list[int], kill: Callable[[], object], tag: str
) -> list[tuple[object, object, int]]:
    """``SESSIONS`` resumable sessions, half their ids sent, then ``kill()`` (in a thread), then
    the rest: each session's joined deltas, final and how many times it resumed."""
    clients = [
        AsyncClient(connections.target, channel=connections.aio(), timeout=60) for _ in range(SESSIONS)
    ]
    try:
        streams = [
            await c.open("qwen3", tools=WEATHER_TOOLS, request_id=f"{tag}-{i}") for i, c in enumerate(clients)
        ]
        half = len(ids) // 2
        for stream in streams:
            await stream.send(ids[:half])
        await asyncio.to_thread(kill)
        results = []
        for stream in streams:
            await stream.send(ids[half:])
            await stream.finish("stop")
            deltas = [d async for d in stream.deltas()]
            results.append((join(deltas), stream.final, stream.resumes))
        return results
    finally:
        for c in clients:
            await c.close()


def _run(server: ProcessServer, connections: Connections, ids: list[int], kills: list[int], tag: str) -> None:
    """Resumable sessions half sent; SIGKILL the ``kills`` workers one after the other, each once
    the one before was replaced; then the sessions' other half. Every original worker is among
    ``kills``, so every session resumes, on a replacement, and must complete as uninterrupted."""
    server.wait_for_log("workers listening", timeout=60)
    server.wait_for_log("models loaded", timeout=60)
    assert set(kills) == {0, 1}
    figures: list[tuple[float, float]] = []

    def kill() -> None:
        for k, index in enumerate(kills):
            figures.append(kill_and_wait_for_replacement(server, connections, index, f"{tag}-kill{k}"))

    results = asyncio.run(resumable_sessions_across(connections, ids, kill, tag))
    for joined, final, _ in results:
        assert joined.tool_calls() == EXPECTED_CALLS and final.finish_reason == 4
    assert all(resumes for _, _, resumes in results), "a session outlived the worker it was on"
    ended_on = [server.worker_of(f"{tag}-{i}") for i in range(SESSIONS)]  # replacements only
    restarted = [r for r in server.logs if r.get("msg") == "worker restarted"]
    assert len(restarted) == len(kills) and not [r for r in server.logs if r.get("msg") == "worker failed"]
    shown = "; ".join(
        f"worker {i}: listening {a:.2f} s, served {b:.2f} s" for i, (a, b) in zip(kills, figures, strict=True)
    )
    print(
        f"\n{tag}: SIGKILLed {len(kills)}x ({shown}); all {SESSIONS} sessions resumed on the replacements "
        f"({ended_on.count(0)} on worker 0, {ended_on.count(1)} on worker 1) and complete"
    )


SERVER_ARGS = ("--workers", "2", "--preload", "qwen3", "--grace", "5")


@pytest.mark.parametrize("flags", ["default", "metrics", "tls"])
def test_a_sigkilled_worker_is_replaced_and_serves(encode, tmp_path: Path, flags: str):
    ids = encode(REASONING_AND_TWO_CALLS)
    extra: tuple[str, ...] = ()
    ca = None
    if flags == "metrics":
        extra = ("--metrics-port", "0")
    elif flags == "tls":
        authority = Authority(tmp_path, "ca")
        pair = authority.server()
        extra, ca = ("--tls-cert", str(pair.cert), "--tls-key", str(pair.key)), authority.cert
    with ProcessServer(*SERVER_ARGS, *extra) as server:
        _run(server, Connections(server.target, ca), ids, [0, 1], flags)
        if flags == "metrics":  # the supervisor's endpoint stays its own
            port = server.wait_for_log("metrics listening")["port"]
            assert _listening_on(server.proc.pid, port)
            for index in (0, 1):
                assert not _listening_on(_worker_pid(server, index), port), f"replacement {index}"


def _listening_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            held.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return bool(inodes & held)


def test_a_replacement_sigkilled_in_its_turn_is_replaced_again(encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    with ProcessServer(*SERVER_ARGS) as server:
        _run(server, Connections(server.target, None), ids, [0, 0, 1], "twice")
