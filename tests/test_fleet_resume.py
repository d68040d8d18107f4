"""Losing a backend loses nothing: 3 real backends behind the deploy nginx config, 200 sessions of
several families streaming one step per message through resuming clients.

- SIGKILL one backend mid-stream: every session completes, and each session's replies are
  byte-identical to an uninterrupted run on one server (deltas, events, final message; so the
  sequence numbers have no gap and no repeat).
- Rolling restart, SIGTERM then restart, one backend after the other: the same, every drain ends
  in about a second by handing its sessions off (docs/service.md, "Resume"), no session is cut.
- A drain of 200 open sessions hands them all off at once.

These are the fleet-scale runs of the Python asyncio client. The behaviours themselves (kills at
given steps, SIGSTOP then kill, drains, pipelined entries, bad ids, reopened keys, behind nginx)
are the scenario corpus every client runs (tests/resume_scenarios/, tests/test_resume_scenarios.py).

The figures (sessions resumed, drain times) are printed; pytest shows them with ``-s``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from fleet_outputs import QUICK_MODELS, TOOLS, Output, sample
from grpc_servers import ProcessServer
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient
from test_fleet_nginx import KEEPALIVE, Nginx, free_port, nginx_binary
from testkit.replies import wire

pytestmark = pytest.mark.toolchain  # runs nginx in front of three servers

SESSIONS = 200
CHANNELS = 4
BACKEND_ARGS = ("--grace", "20", "--preload", ",".join(QUICK_MODELS))
STEP_PAUSE = 0.01
"""Seconds each session waits between its steps, so that all are mid-stream when a backend goes."""
TEST_TIMEOUT = 240.0


def backend(port: int) -> ProcessServer:
    """A backend on a fixed port (restarts come back at the address nginx knows)."""
    return ProcessServer(*BACKEND_ARGS, "--port", str(port))


def ready(server: ProcessServer) -> ProcessServer:
    server.start()
    server.wait_for_log("models loaded", 120)
    return server


@dataclass
class Fleet3:
    nginx: Nginx
    backends: list[ProcessServer]
    ports: list[int]


@contextmanager
def three_backends(tmp_path: Path) -> Iterator[Fleet3]:
    """Three backends behind the deploy nginx config; killed (and nginx's error log printed) at the end."""
    nginx_binary()
    ports = [free_port() for _ in range(3)]
    backends = [ready(backend(port)) for port in ports]
    nginx = Nginx(tmp_path, [f"127.0.0.1:{p}" for p in ports]).start()
    fleet = Fleet3(nginx, backends, ports)
    try:
        yield fleet
    finally:
        nginx.stop()
        for server in fleet.backends:
            server.kill()
        print(f"--- nginx error log:\n{nginx.log()[-4000:]}")


@pytest.fixture
def fleet3(tmp_path: Path) -> Iterator[Fleet3]:
    with three_backends(tmp_path) as fleet:
        yield fleet


def outputs() -> list[Output]:
    return [sample(i, QUICK_MODELS) for i in range(SESSIONS)]


def open_options(i: int, out: Output) -> dict:
    return dict(tools=TOOLS, prompt_token_ids=out.prompt_ids, output="both", request_id=f"fleet-{i}")


async def reference(target: str, outs: list[Output]) -> list[list[bytes]]:
    """Every session uninterrupted on one backend, straight (no nginx, no resume)."""
    async with AsyncClient(target, timeout=60, resume=False) as client:
        limit = asyncio.Semaphore(25)

        async def one(i: int, out: Output) -> list[bytes]:
            async with limit:
                stream = await client.open(out.model, **open_options(i, out))
                for tid in out.ids:
                    await stream.send([tid])
                await stream.finish("stop")
                return wire([r async for r in stream], drop_client_messages=True)

        return list(await asyncio.gather(*(one(i, o) for i, o in enumerate(outs))))


class Progress:
    """Steps sent so far over all sessions, and gates the sessions wait at (phases)."""

    def __init__(self, total: int, phases: int) -> None:
        self.total = total
        self.sent = 0
        self.opened = 0
        self.gates = [asyncio.Event() for _ in range(phases)]
        self.reached = [0] * phases

    async def at(self, fraction: float, opened: int = 0) -> None:
        """Until ``fraction`` of all steps are out (and ``opened`` sessions are open)."""
        while self.sent < fraction * self.total or self.opened < opened:
            await asyncio.sleep(0.02)


async def run_session(
    client: AsyncClient, i: int, out: Output, progress: Progress
) -> tuple[list[bytes], int]:
    """One session through the resuming client: its replies' bytes and how often it moved."""
    stream = await client.open(out.model, **open_options(i, out))
    progress.opened += 1
    replies: list[pb.ParseResponse] = []

    async def read() -> None:
        async for reply in stream:
            replies.append(reply)

    reader = asyncio.create_task(read())
    phases = len(progress.gates)
    for k, tid in enumerate(out.ids):
        phase = k * phases // len(out.ids)
        if not progress.gates[phase].is_set():
            await progress.gates[phase].wait()
        await stream.send([tid])
        progress.sent += 1
        await asyncio.sleep(STEP_PAUSE)
    await stream.finish("stop")
    await reader
    return wire(replies, drop_client_messages=True), stream.resumes


def clients(target: str) -> list[AsyncClient]:
    return [
        AsyncClient(target, channel=grpc.aio.insecure_channel(target, options=KEEPALIVE), timeout=120)
        for _ in range(CHANNELS)
    ]


def start_sessions(pool: list[AsyncClient], outs: list[Output], progress: Progress) -> list[asyncio.Task]:
    return [asyncio.create_task(run_session(pool[i % CHANNELS], i, o, progress)) for i, o in enumerate(outs)]


def check_identical(got: list[tuple[list[bytes], int]], want: list[list[bytes]]) -> int:
    """Every session's replies byte for byte as uninterrupted; returns how many sessions moved."""
    for i, ((replies, _), expected) in enumerate(zip(got, want, strict=True)):
        assert replies == expected, f"session {i} differs from its uninterrupted run"
    return sum(resumes > 0 for _, resumes in got)


def test_sigkill_one_backend_mid_stream(fleet3: Fleet3):
    outs = outputs()
    total = sum(len(o.ids) for o in outs)

    async def main():
        want = await reference(fleet3.backends[1].target, outs)
        progress = Progress(total, 1)
        progress.gates[0].set()
        pool = clients(fleet3.nginx.target)
        try:
            sessions = start_sessions(pool, outs, progress)
            await progress.at(0.4)
            await asyncio.to_thread(fleet3.backends[0].kill)
            killed_at = progress.sent
            got = await asyncio.gather(*sessions)
        finally:
            for client in pool:
                await client.close()
        return want, got, killed_at

    want, got, killed_at = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    moved = check_identical(got, want)
    print(
        f"\nSIGKILL: {SESSIONS} sessions x 1 kill at {killed_at}/{total} steps; {moved} sessions resumed; "
        f"{SESSIONS} of {SESSIONS} identical to the uninterrupted run"
    )
    assert moved >= SESSIONS // 6, f"only {moved} sessions were on the killed backend mid-stream"


def test_rolling_restart(fleet3: Fleet3):
    outs = outputs()
    total = sum(len(o.ids) for o in outs)
    drains: list[float] = []

    async def restart(index: int, progress: Progress) -> None:
        old = fleet3.backends[index]
        signalled = time.monotonic()
        old.terminate()
        code = await asyncio.to_thread(old.wait, 30)
        drains.append(time.monotonic() - signalled)
        assert code == 0, f"backend {index} cut sessions: {old.logs[-5:]}"
        stopped = next(r for r in old.logs if r.get("msg") == "stopped")
        assert stopped["clean"] is True and stopped["cut_sessions"] == 0
        draining = next(r for r in old.logs if r.get("msg") == "draining")
        assert draining["open_sessions"] > 0, "the backend had no sessions to hand off"
        fleet3.backends[index] = await asyncio.to_thread(ready, backend(fleet3.ports[index]))

    async def main():
        want = await reference(fleet3.backends[0].target, outs)
        phases = len(fleet3.backends) + 1
        progress = Progress(total, phases)
        pool = clients(fleet3.nginx.target)
        try:
            sessions = start_sessions(pool, outs, progress)
            for index in range(len(fleet3.backends)):
                progress.gates[index].set()
                await progress.at((index + 0.5) / phases)  # every backend is busy mid-phase
                await restart(index, progress)
            progress.gates[-1].set()
            got = await asyncio.gather(*sessions)
        finally:
            for client in pool:
                await client.close()
        return want, got

    want, got = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    moved = check_identical(got, want)
    print(
        f"\nrolling restart: {SESSIONS} sessions x 3 drains; {moved} sessions resumed; "
        f"drain times {[round(d, 2) for d in drains]} s; all identical to the uninterrupted run"
    )
    assert moved >= SESSIONS // 2
    assert max(drains) < 5.0, drains


def test_drain_of_200_open_sessions_hands_them_off():
    """One backend holding 200 open sessions is SIGTERMed: it hands every session off and exits
    within a few seconds (not its 20 s grace), cleanly; the sessions resume on the other backend
    (the channel's second address, pick_first) and complete identical to an uninterrupted run."""
    outs = outputs()
    total = sum(len(o.ids) for o in outs)
    with backend(free_port()) as a, backend(free_port()) as b:
        for server in (a, b):
            server.wait_for_log("models loaded", 120)
        target = f"ipv4:{a.target},{b.target}"  # pick_first: everything on a while it listens

        async def main():
            want = await reference(b.target, outs)
            progress = Progress(total, 2)
            progress.gates[0].set()
            pool = clients(target)
            try:
                sessions = start_sessions(pool, outs, progress)
                await progress.at(0.25, opened=SESSIONS)
                signalled = time.monotonic()
                a.terminate()
                code = await asyncio.to_thread(a.wait, 30)
                drain = time.monotonic() - signalled
                progress.gates[1].set()
                got = await asyncio.gather(*sessions)
            finally:
                for client in pool:
                    await client.close()
            return want, got, code, drain

        want, got, code, drain = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
        draining = next(r for r in a.logs if r.get("msg") == "draining")
        stopped = next(r for r in a.logs if r.get("msg") == "stopped")
    moved = check_identical(got, want)
    print(
        f"\ndrain: {draining['open_sessions']} open sessions, {draining['handed_off']} handed off at once, "
        f"exit after {drain:.2f} s; {moved} resumed; all identical"
    )
    assert code == 0 and stopped["clean"] is True and stopped["cut_sessions"] == 0
    assert draining["open_sessions"] == SESSIONS, draining
    assert moved == SESSIONS
    assert drain < 5.0, f"the drain took {drain:.2f} s"
