"""The batch clients resume too: a ``ParseBatch`` stream's sessions survive the loss of their
backend, together, with every step's reply exactly as uninterrupted.

Two real backends on loopback, the client's target lists both (pick_first: every stream goes to
the first while it listens). Sessions of several families stream real outputs one token per step
through the batch API; then the first backend is SIGKILLed, or SIGTERMed (a drain hands batch
streams off), or the client pipelines steps full of edge cases (finish, cancel, a key reused,
entries for no session, an entry after a session's error) and loses the backend, stopped after it
answered some of them, with the rest unanswered. Each run's replies — step
by step, session by session, byte for byte — are compared with an uninterrupted run of the same
steps on one server, so sequence numbers have no gap and no repeat. With resume off the break
surfaces, and a drain gives such streams the grace instead of a hand-off.

The same with the Go client's batch API (a SIGKILL, and resume off), and a SIGKILL behind the
deploy nginx config.

The figures (sessions, kills, drain time) are printed; pytest shows them with ``-s``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from fleet_outputs import QUICK_MODELS, TOOLS, Output, sample
from grpc_servers import ProcessServer, wait_for
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, Client
from parsetier_client.resume import retryable
from test_fleet_nginx import KEEPALIVE, Nginx, free_port, nginx_binary
from test_go_client import GO_DIR, go_binary

SESSIONS = 80
STREAMS = 2
"""Batch streams (one serving loop each) sharing the sessions."""
STEP_PAUSE = 0.01
"""Seconds each serving loop waits between steps, so that every stream is mid-way at the kill."""
TEST_TIMEOUT = 120.0
BACKEND_ARGS = ("--grace", "20", "--preload", ",".join(QUICK_MODELS))

Replies = list[dict[str, bytes]]
"""One batch stream's replies, one per step: {key: the session's output, serialized}."""


def backend(port: int | None = None) -> ProcessServer:
    server = ProcessServer(*BACKEND_ARGS, "--port", str(port or free_port()))
    return server


def ready(server: ProcessServer) -> ProcessServer:
    server.start()
    server.wait_for_log("models loaded", 120)
    return server


@pytest.fixture
def pair() -> Iterator[tuple[ProcessServer, ProcessServer]]:
    a, b = backend(), backend()
    try:
        yield ready(a), ready(b)
    finally:
        a.kill()
        b.kill()


def outputs() -> list[Output]:
    return [sample(i, QUICK_MODELS) for i in range(SESSIONS)]


def wire(outputs: dict[str, pb.SessionOutput]) -> dict[str, bytes]:
    """Outputs as bytes, without ``client_messages``: it counts entries of the stream that
    carried them, so a resumed session's restart from 1 on its new stream."""
    return {key: _without_count(out).SerializeToString(deterministic=True) for key, out in outputs.items()}


def _without_count(output: pb.SessionOutput) -> pb.SessionOutput:
    copy = pb.SessionOutput()
    copy.CopyFrom(output)
    copy.client_messages = 0
    return copy


def open_session(batch, key: str, out: Output, request_id: str) -> None:
    """Queue the opening of ``key`` for ``out`` on ``batch`` (either client's batch API)."""
    batch.open(
        key, out.model, tools=TOOLS, prompt_token_ids=out.prompt_ids, output="both", request_id=request_id
    )


class Plan:
    """The steps of one serving loop over its sessions: all open in step 1 (with their first
    token), then one token per session per step, each finishing after its last token."""

    def __init__(self, stream: int, outs: list[Output], streams: int = STREAMS) -> None:
        self.sessions = {f"s{stream}-{i}": out for i, out in enumerate(outs) if i % streams == stream}
        self.steps = max(len(out.ids) for out in self.sessions.values())

    def queue(self, batch, k: int) -> None:
        """Queue step ``k`` (0-based) on ``batch`` (either client's batch API)."""
        for key, out in self.sessions.items():
            if k == 0:
                open_session(batch, key, out, key)
            if k < len(out.ids):
                batch.feed(key, [out.ids[k]])
            if k == len(out.ids) - 1:
                batch.finish(key, "stop")


class Progress:
    """Steps out so far over all serving loops, and a gate they wait at before each step."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.sent = 0
        self.go = asyncio.Event()
        self.go.set()

    async def at(self, fraction: float) -> None:
        while self.sent < fraction * self.total:
            await asyncio.sleep(0.02)


async def run_async(client: AsyncClient, plan: Plan, progress: Progress | None = None) -> tuple[Replies, int]:
    """One serving loop: a step, its reply, a short pause, the next step."""
    replies: Replies = []
    async with client.batch() as batch:
        for k in range(plan.steps):
            if progress is not None:
                await progress.go.wait()
            plan.queue(batch, k)
            replies.append(wire(await batch.step()))
            if progress is not None:
                progress.sent += 1
                await asyncio.sleep(STEP_PAUSE)
        resumes = batch.resumes
    return replies, resumes


async def reference(target: str, plans: list[Plan]) -> list[Replies]:
    """Every stream uninterrupted on one backend, without resume."""
    async with AsyncClient(target, timeout=60, resume=False) as client:
        return [replies for replies, _ in await asyncio.gather(*(run_async(client, p) for p in plans))]


def check_identical(got: list[Replies], want: list[Replies]) -> None:
    for s, (replies, expected) in enumerate(zip(got, want, strict=True)):
        assert len(replies) == len(expected), f"stream {s}: {len(replies)} replies, {len(expected)} steps"
        for k, (reply, wanted) in enumerate(zip(replies, expected, strict=True)):
            assert reply == wanted, f"stream {s} step {k} differs from the uninterrupted run"


def finals(replies: list[Replies]) -> int:
    return sum(
        pb.SessionOutput.FromString(v).HasField("final") for r in replies for step in r for v in step.values()
    )


async def interrupted(
    target: str,
    plans: list[Plan],
    at: float,
    interrupt: Callable[[], float | None],
    options: list | None = None,
) -> tuple[list[Replies], list[int], float | None]:
    """Run the plans through resuming batch clients; once ``at`` of all steps are out, call
    ``interrupt`` (in a thread); returns the replies, each stream's resumes and what it returned.
    ``options``: the channel's (keepalive behind nginx)."""
    progress = Progress(sum(p.steps for p in plans))
    channel = grpc.aio.insecure_channel(target, options=options) if options else None
    async with AsyncClient(target, channel=channel, timeout=60) as client:
        loops = [asyncio.create_task(run_async(client, p, progress)) for p in plans]
        await progress.at(at)
        result = await asyncio.to_thread(interrupt)
        done = await asyncio.gather(*loops)
    return [r for r, _ in done], [n for _, n in done], result


def test_async_batch_sessions_survive_sigkills_of_their_backend(pair):
    """80 sessions on 2 batch streams; the backend is SIGKILLed at 30% of the steps (everything
    moves to the second), restarted on its port, and the second is SIGKILLed at 65% (everything
    moves back): every step's reply is as uninterrupted."""
    a, b = pair
    plans = [Plan(s, outputs()) for s in range(STREAMS)]
    kills: list[str] = []

    async def main():
        want = await reference(b.target, plans)
        progress = Progress(sum(p.steps for p in plans))
        nonlocal a
        async with AsyncClient(f"ipv4:{a.target},{b.target}", timeout=60) as client:
            loops = [asyncio.create_task(run_async(client, p, progress)) for p in plans]
            await progress.at(0.3)
            a.kill()
            kills.append(f"a at {progress.sent}/{progress.total}")
            await progress.at(0.4)
            progress.go.clear()  # the loops wait (idle, mid-stream) while a restarts
            a = await asyncio.to_thread(ready, backend(a.port))
            progress.go.set()
            await progress.at(0.65)
            b.kill()
            kills.append(f"b at {progress.sent}/{progress.total}")
            done = await asyncio.gather(*loops)
        return want, done

    want, done = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    got = [r for r, _ in done]
    check_identical(got, want)
    assert finals(got) == SESSIONS
    resumes = [n for _, n in done]
    print(
        f"\nasync batch: {SESSIONS} sessions on {STREAMS} streams x {len(kills)} SIGKILLs ({kills}); "
        f"resumes per stream {resumes}; every step identical to the uninterrupted run"
    )
    assert all(n >= 2 for n in resumes), resumes  # every stream moved at each kill
    a.kill()


def test_a_drain_hands_batch_streams_off(pair):
    """SIGTERM the backend that holds both batch streams mid-way: it hands them off at once and
    exits cleanly within a few seconds (not its 20 s grace); the sessions resume on the other."""
    a, b = pair
    plans = [Plan(s, outputs()) for s in range(STREAMS)]
    want = asyncio.run(reference(b.target, plans))

    def drain() -> float:
        signalled = time.monotonic()
        a.terminate()
        code = a.wait(30)
        assert code == 0, a.logs[-5:]
        return time.monotonic() - signalled

    got, resumes, took = asyncio.run(
        asyncio.wait_for(interrupted(f"ipv4:{a.target},{b.target}", plans, 0.4, drain), TEST_TIMEOUT)
    )
    check_identical(got, want)
    draining = next(r for r in a.logs if r.get("msg") == "draining")
    stopped = next(r for r in a.logs if r.get("msg") == "stopped")
    print(
        f"\nbatch drain: {draining['open_sessions']} open sessions on {STREAMS} streams, "
        f"{stopped['handed_off']} streams handed off ({draining['handed_off']} waiting as the drain "
        f"began), exit after {took:.2f} s; resumes {resumes}"
    )
    # Every stream moves: one waiting for its next message at once, one busy then at its next read.
    assert draining["open_sessions"] > 0 and stopped["handed_off"] == STREAMS, (draining, stopped)
    assert stopped["clean"] is True and stopped["cut_sessions"] == 0
    assert resumes == [1] * STREAMS
    ends = [r for r in a.logs if r.get("msg") == "session_end" and r.get("rpc") == "ParseBatch"]
    assert {r["outcome"] for r in ends} <= {"OK", "UNAVAILABLE"}
    assert took is not None and took < 5.0, f"the drain took {took:.2f} s"


def test_behind_nginx_a_sigkilled_backend_s_batch_streams_resume_on_the_other(pair, tmp_path: Path):
    """Through the deploy nginx config (per-stream balancing over both backends): 80 sessions on
    4 batch streams, one backend SIGKILLed at 40% of the steps; the streams on it reconnect through
    nginx, resume on the other backend, and every step's reply is as uninterrupted."""
    a, b = pair
    nginx_binary()
    streams = 4
    plans = [Plan(s, outputs(), streams) for s in range(streams)]
    want = asyncio.run(reference(b.target, plans))
    nginx = Nginx(tmp_path, [a.target, b.target]).start()
    try:
        got, resumes, _ = asyncio.run(
            asyncio.wait_for(interrupted(nginx.target, plans, 0.4, a.kill, KEEPALIVE), TEST_TIMEOUT)
        )
    finally:
        nginx.stop()
    check_identical(got, want)
    print(
        f"\nbehind nginx: {SESSIONS} sessions on {streams} streams x 1 SIGKILL; resumes per stream {resumes}"
    )
    assert 1 <= sum(resumes) < streams, resumes  # least_conn put streams on both backends


def test_behind_nginx_a_drain_hands_batch_streams_off_with_no_nginx_change(pair, tmp_path: Path):
    """The deploy procedure for resuming clients (deploy/README.md): SIGTERM a backend behind
    nginx with no nginx change while 4 batch streams run. Its streams are handed off; their
    reconnects go through nginx (refused by the draining backend until it exits, then on the
    other); it exits cleanly within a few seconds; every step's reply is as uninterrupted."""
    a, b = pair
    nginx_binary()
    streams = 4
    plans = [Plan(s, outputs(), streams) for s in range(streams)]
    want = asyncio.run(reference(b.target, plans))
    nginx = Nginx(tmp_path, [a.target, b.target]).start()

    def drain() -> float:
        signalled = time.monotonic()
        a.terminate()
        assert a.wait(30) == 0, a.logs[-5:]
        return time.monotonic() - signalled

    try:
        got, resumes, took = asyncio.run(
            asyncio.wait_for(interrupted(nginx.target, plans, 0.4, drain, KEEPALIVE), TEST_TIMEOUT)
        )
    finally:
        nginx.stop()
    check_identical(got, want)
    draining = next(r for r in a.logs if r.get("msg") == "draining")
    stopped = next(r for r in a.logs if r.get("msg") == "stopped")
    print(
        f"\nbehind nginx, drain: {draining['open_sessions']} open sessions, {draining['handed_off']} streams "
        f"handed off, exit after {took:.2f} s; resumes per stream {resumes}"
    )
    assert draining["open_sessions"] > 0 and stopped["clean"] is True and stopped["cut_sessions"] == 0
    assert 1 <= sum(resumes) < streams, resumes
    assert took is not None and took < 5.0, f"the drain took {took:.2f} s"


EDGE_FED = {"keep": 23, "done": 11, "gone": 11, "bad": 11, "late": 15, "drop": 16}
"""Each edge-case session's last step of token ids."""
EDGE_STEPPED, EDGE_AHEAD, EDGE_STEPS = 8, 13, 24
"""Steps 0-7 are sent one by one, each answered; 8-12 are sent ahead and answered before the
server is stopped; 13-23 are sent to the stopped server, unanswered until it is killed. One last
step finishes the sessions still open."""

Action = dict
"""One call of a batch API, as data both clients' drivers apply: ``op`` (open, feed, finish or
cancel), ``key``, and ``ids`` or ``request_id``."""


def edge_steps(out: Output) -> list[list[Action]]:
    """Steps full of what a resume must replay faithfully: a session that finishes, one
    cancelled, a key opened again after its session ended, entries for a key with no session, a
    bad token id (the session's own error) and entries sent to that session before its error is
    received (a step, then an open, which the server takes for a new session), a finish and a
    cancel in unanswered steps, an empty step (19)."""
    ids = out.ids
    plan: list[list[Action]] = []
    for k in range(EDGE_STEPS):
        step: list[Action] = []
        for key, last in EDGE_FED.items():
            if k == 0:
                step.append({"op": "open", "key": key, "request_id": f"edge-{key}"})
            if k <= last and k != 19:
                step.append({"op": "feed", "key": key, "ids": [ids[k % len(ids)]]})
        if k == 12:
            step.append({"op": "finish", "key": "done"})
            step.append({"op": "cancel", "key": "gone"})
            step.append({"op": "feed", "key": "bad", "ids": [10**9]})  # outside the vocabulary
            step.append({"op": "feed", "key": "nobody", "ids": [ids[0]]})  # no such session
        if k == 13:
            step.append({"op": "feed", "key": "bad", "ids": [ids[0]]})  # sent before bad's error is received
        if k == 14:
            step.append({"op": "open", "key": "done", "request_id": "edge-done-again"})  # free again
            step.append({"op": "cancel", "key": "nobody"})  # cancels nothing
        if k >= 14 and k != 19:
            step.append({"op": "feed", "key": "done", "ids": [ids[k % len(ids)]]})
        if k == 15:  # a new session, as it turns out
            step.append({"op": "open", "key": "bad", "request_id": "edge-bad-again"})
        if 15 <= k <= 17:
            step.append({"op": "feed", "key": "bad", "ids": [ids[k % len(ids)]]})
        if k == 16:
            step.append({"op": "finish", "key": "late"})
        if k == 17:
            step.append({"op": "cancel", "key": "drop"})
        plan.append(step)
    plan.append([{"op": "finish", "key": key} for key in ("keep", "done", "bad")])
    return plan


def apply(batch, out: Output, step: list[Action]) -> None:
    """Queue ``step`` on a Python batch (the Go driver applies the same actions)."""
    for action in step:
        op, key = action["op"], action["key"]
        if op == "open":
            open_session(batch, key, out, action["request_id"])
        elif op == "feed":
            batch.feed(key, action["ids"])
        elif op == "finish":
            batch.finish(key, "stop")
        else:
            batch.cancel(key)


def run_edge(client: Client, out: Output, at: Callable[[str], None]) -> tuple[Replies, int]:
    """The edge-case steps through the sync batch client; ``at("ahead")`` once steps 8-12 are
    sent, ``at("answered")`` once their replies are received (13-23 sent meanwhile)."""
    plan = edge_steps(out)
    replies: Replies = []
    with client.batch() as batch:
        for step in plan[:EDGE_STEPPED]:
            apply(batch, out, step)
            replies.append(wire(batch.step()))
        for step in plan[EDGE_STEPPED:EDGE_AHEAD]:
            apply(batch, out, step)
            batch.send()
        at("ahead")
        for step in plan[EDGE_AHEAD:-1]:
            apply(batch, out, step)
            batch.send()
        for _ in range(EDGE_AHEAD - EDGE_STEPPED):
            replies.append(wire(batch.receive()))
        at("answered")
        while batch.in_flight:
            replies.append(wire(batch.receive()))
        apply(batch, out, plan[-1])
        replies.append(wire(batch.step()))
        return replies, batch.resumes


class StopThenKill:
    """The victim's part in an edge-case run, at the driver's two points. At ``ahead`` it waits
    until the server has parsed step 12 (bad's ``session_end`` line, logged as its error is
    answered), gives the reply a moment to go out, and stops it (SIGSTOP): steps 13-23 reach a
    server that answers nothing. At ``answered`` (the replies to 8-12 received) it kills it
    (SIGKILL). A watchdog kills it should those replies not come; ``answered_first`` says whether
    they did, i.e. whether the run resumed with 13-23, and only those, unanswered."""

    WATCHDOG = 20.0

    def __init__(self, victim: ProcessServer) -> None:
        self.victim = victim
        self.watchdog: threading.Timer | None = None
        self.answered_first = False

    def __call__(self, point: str) -> None:
        victim = self.victim
        assert victim.proc is not None
        if point == "ahead":
            wait_for(lambda: any(r.get("request_id") == "edge-bad" for r in list(victim.logs)), 30)
            time.sleep(0.5)
            os.kill(victim.proc.pid, signal.SIGSTOP)
            self.watchdog = threading.Timer(self.WATCHDOG, victim.kill)
            self.watchdog.start()
        else:
            assert self.watchdog is not None
            self.watchdog.cancel()
            self.answered_first = victim.proc.poll() is None
            victim.kill()

    def check(self) -> None:
        """The run resumed what it means to: 8-12 answered before the kill, 13-23 not (late's
        finish in step 16 and drop's cancel in 17 ended nothing on the victim)."""
        assert self.answered_first, "the stopped server had not answered steps 8-12"
        ended = {r.get("request_id") for r in self.victim.logs if r.get("msg") == "session_end"}
        assert not ended & {"edge-late", "edge-drop"}, "the victim answered steps sent after its stop"


def check_edge_replies(got: Replies, want: Replies) -> None:
    """Every reply as on the uninterrupted stream, with the statuses the steps call for."""
    assert len(got) == len(want) == EDGE_STEPS + 1
    for k, (reply, wanted) in enumerate(zip(got, want, strict=True)):
        assert reply == wanted, f"step {k} differs from the uninterrupted run"
    statuses: dict[str, int] = {}  # each key's first status
    for reply in got:
        for key, raw in reply.items():
            output = pb.SessionOutput.FromString(raw)
            if output.HasField("status"):
                statuses.setdefault(key, output.status.code)
    assert statuses["bad"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert statuses["gone"] == statuses["drop"] == grpc.StatusCode.CANCELLED.value[0]
    assert statuses["nobody"] != 0
    assert "keep" not in statuses and "late" not in statuses
    # The entry sent to bad after its error has its status, as on the uninterrupted stream; the
    # open sent after it was a new session, which the last step finished.
    assert pb.SessionOutput.FromString(got[13]["bad"]).HasField("status")
    assert pb.SessionOutput.FromString(got[-1]["bad"]).HasField("final")


def test_pipelined_edge_cases_resume_exactly(pair):
    """Edge-case steps pipelined (``edge_steps``): the server answers steps 8-12 (a finish, a
    cancel, the bad id), is stopped for 13-23 (the entry after bad's error, the reopened key, a
    finish and a cancel) and killed once the replies to 8-12 are received. The sync batch client
    resumes once and receives every reply as an uninterrupted run gives it."""
    a, b = pair
    out = sample(0, QUICK_MODELS)
    with Client(b.target, timeout=60, resume=False) as client:
        want, _ = run_edge(client, out, lambda point: None)
    victim = StopThenKill(a)
    with Client(f"ipv4:{a.target},{b.target}", timeout=60) as client:
        got, resumes = run_edge(client, out, victim)
    victim.check()
    assert resumes == 1
    check_edge_replies(got, want)


def test_with_resume_off_a_break_surfaces_and_a_drain_gives_the_grace(pair):
    """resume=False: the opens are not resumable, so a SIGTERMed backend lets the batch stream
    finish its sessions (no hand-off) and exits cleanly after; a SIGKILL then surfaces as the
    stream's UNAVAILABLE from ``receive``."""
    a, b = pair
    plans = [Plan(0, outputs()[:20])]
    want = asyncio.run(reference(b.target, plans))

    async def main():
        async with AsyncClient(a.target, timeout=60, resume=False) as client:
            progress = Progress(plans[0].steps)
            loop = asyncio.create_task(run_async(client, plans[0], progress))
            await progress.at(0.3)
            a.terminate()
            await asyncio.to_thread(a.wait_for_log, "draining")
            replies, resumes = await loop
        return replies, resumes

    replies, resumes = asyncio.run(asyncio.wait_for(main(), TEST_TIMEOUT))
    check_identical([replies], want)
    assert resumes == 0
    assert a.wait(30) == 0
    draining = next(r for r in a.logs if r.get("msg") == "draining")
    assert draining["handed_off"] == 0 and draining["open_sessions"] > 0, draining

    async def broken():
        async with AsyncClient(b.target, timeout=60, resume=False) as client:
            batch = client.batch()
            plans[0].queue(batch, 0)
            await batch.step()
            plans[0].queue(batch, 1)
            await batch.step()
            b.kill()
            plans[0].queue(batch, 2)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await batch.step()
                await batch.step()
            return error.value

    error = asyncio.run(asyncio.wait_for(broken(), TEST_TIMEOUT))
    assert retryable(error.code(), error.details()), error  # a break, surfaced instead of resumed


def go_plan(target: str, plans: list[Plan], resume: bool = True) -> dict:
    return {
        "target": target,
        "tools_json": json.dumps(TOOLS),
        "pause_ms": int(STEP_PAUSE * 1000),
        "resume": resume,
        "streams": [
            [
                dict(key=key, model=o.model, prompt_ids=list(o.prompt_ids), ids=list(o.ids))
                for key, o in plan.sessions.items()
            ]
            for plan in plans
        ],
    }


@pytest.fixture(scope="module")
def batchcheck(tmp_path_factory) -> Path:
    binary = tmp_path_factory.mktemp("go") / "batchcheck"
    build = subprocess.run(
        [go_binary(), "build", "-o", str(binary), "./internal/batchcheck"],
        cwd=GO_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    return binary


def drive_batchcheck(binary: Path, plan: dict, on_line: Callable[[str], bool]) -> list[dict]:
    """Run the Go driver on ``plan``, calling ``on_line`` with each progress line it prints (when
    that returns True, the driver is waiting: it is told to go on). Each stream's result."""
    proc = subprocess.Popen(
        [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    final = None
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(plan) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            if line.startswith("{"):
                final = json.loads(line)
            elif on_line(line.strip()):
                proc.stdin.write("go\n")
                proc.stdin.flush()
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert final is not None
    return final["results"]


def run_batchcheck(
    binary: Path, plan: dict, kill_at: int, kill: Callable[[], None]
) -> tuple[list[dict], int]:
    """Run the Go serving loops; ``kill`` once ``kill_at`` steps are out. Each stream's result
    and the step count at the kill."""
    killed_at = 0

    def on_line(line: str) -> bool:
        nonlocal killed_at
        if line.startswith("sent ") and not killed_at and int(line.split()[1]) >= kill_at:
            kill()
            killed_at = int(line.split()[1])
        return False

    results = drive_batchcheck(binary, plan, on_line)
    assert killed_at
    return results, killed_at


def test_go_batch_sessions_survive_a_sigkill(pair, batchcheck: Path):
    """The Go client's batch API (client/go/internal/batchcheck): 80 sessions on 2 batch streams,
    the backend SIGKILLed at 40% of the steps; every step's reply is as uninterrupted."""
    a, b = pair
    plans = [Plan(s, outputs()) for s in range(STREAMS)]
    want = asyncio.run(reference(b.target, plans))
    total = sum(p.steps for p in plans)
    plan = go_plan(f"ipv4:{a.target},{b.target}", plans)
    results, killed_at = run_batchcheck(batchcheck, plan, int(0.4 * total), a.kill)
    assert not [r["error"] for r in results if r.get("error")]
    for s, (r, expected) in enumerate(zip(results, want, strict=True)):
        got = [
            {k: pb.SessionOutput.FromString(base64.b64decode(v)) for k, v in step.items()}
            for step in r["replies"]
        ]
        wanted = [{k: pb.SessionOutput.FromString(v) for k, v in step.items()} for step in expected]
        assert len(got) == len(wanted), s
        for k, (reply, expected_reply) in enumerate(zip(got, wanted, strict=True)):
            assert reply == expected_reply, f"stream {s} step {k} differs from the uninterrupted run"
    resumes = [r["resumes"] for r in results]
    print(
        f"\nGo batch: {SESSIONS} sessions on {STREAMS} streams x 1 SIGKILL at {killed_at}/{total} steps; "
        f"resumes {resumes}; every step identical to the uninterrupted run"
    )
    assert resumes == [1] * STREAMS, resumes


def test_go_batch_with_resume_off_surfaces_the_break(pair, batchcheck: Path):
    """WithoutResume: the SIGKILL ends each Go batch stream with its status (Unavailable)."""
    a, _ = pair
    plans = [Plan(s, outputs()[:20]) for s in range(STREAMS)]
    total = sum(p.steps for p in plans)
    results, _ = run_batchcheck(batchcheck, go_plan(a.target, plans, resume=False), int(0.3 * total), a.kill)
    for r in results:
        assert r["resumes"] == 0
        assert "Unavailable" in r.get("error", ""), r.get("error")
        assert len(r["replies"]) < max(len(o.ids) for o in outputs()[:20])


def test_go_pipelined_edge_cases_resume_exactly(pair, batchcheck: Path):
    """The pipelined edge cases (``edge_steps``) through the Go client's batch API, the server
    stopped and killed as for the sync client: one resume, every reply as the uninterrupted run
    gives it (that run through the Python client: both give the same outputs)."""
    a, b = pair
    out = sample(0, QUICK_MODELS)
    with Client(b.target, timeout=60, resume=False) as client:
        want, _ = run_edge(client, out, lambda point: None)
    victim = StopThenKill(a)
    plan = go_plan(f"ipv4:{a.target},{b.target}", [])
    plan["edge"] = {
        "model": out.model,
        "prompt_ids": list(out.prompt_ids),
        "steps": edge_steps(out),
        "stepped": EDGE_STEPPED,
        "ahead": EDGE_AHEAD,
    }

    def on_line(point: str) -> bool:
        if point not in ("ahead", "answered"):
            return False
        victim(point)
        return True

    (result,) = drive_batchcheck(batchcheck, plan, on_line)
    assert not result.get("error"), result["error"]
    victim.check()
    assert result["resumes"] == 1
    got = [
        wire({k: pb.SessionOutput.FromString(base64.b64decode(v)) for k, v in step.items()})
        for step in result["replies"]
    ]
    check_edge_replies(got, want)
