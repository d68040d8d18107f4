"""The fleet: Debian's nginx with deploy/nginx/parsetier.conf in front of two real parsetier servers,
with clients that do not resume (``resume=False``; tests/test_fleet_resume.py has resuming ones).

Each test renders the deploy file itself — only the backend addresses, the listen address and the
access-log path are rewritten — includes it in a minimal main config whose pid, logs and temp paths
all live in the test's tmp dir, and runs ``nginx -p TMP -c CONF -g 'daemon off;'`` as a subprocess
on loopback. So what is tested is what is deployed. nginx is required, not optional: ``make test``
installs it.

What the tests pin (deploy/README.md explains each):
- sessions are balanced per stream over both backends and each keeps its own content;
- a SIGKILLed backend: its open session fails (INTERNAL, a reset stream: nginx had already forwarded
  the headers), the client restarts it from its start, and new streams are retried by nginx on the
  survivor when the dead backend refuses the connection;
- drain: marking the backend ``down`` and reloading nginx before SIGTERM sends every new session to
  the other backend while the open one completes through nginx; without that step nginx passes the
  draining backend's UNAVAILABLE straight to the client (it cannot retry a gRPC stream it has
  started), and the client's own retry is what gets the session onto the other backend;
- a session's request body may exceed the per-message limit (client_max_body_size is per stream);
- no backend at all: UNAVAILABLE in gRPC terms from nginx's error_page.

One thing found here is worked around, narrowly, and explained where it is: clients keep HTTP/2
keepalive pings on (nginx 1.22 may hold a stream reset until the client's connection shows activity,
see KEEPALIVE). A drained backend stops its transport with a short grace once idle, so nginx can
finish the last stream cleanly (``STOP_GRACE`` in ``parsetier.service.server``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from grpc_servers import ROOT, ProcessServer
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, Client
from parsetier_client.aio import AsyncParseStream
from parsetier_client.requests import finish_message, open_message
from parsetier_client.resume import retryable
from service_samples import WEATHER_TOOLS, Joined, join

pytestmark = pytest.mark.toolchain  # runs nginx

DEPLOY_CONF = ROOT / "deploy" / "nginx" / "parsetier.conf"
WORKERS = 2  # more than one, so the upstream's shared zone (least_conn counts, failures) is exercised
BACKEND_ARGS = ("--grace", "20", "--preload", "qwen3")
# HTTP/2 pings from the client every second, also when it has nothing to send: nginx 1.22 can hold a
# stream's RST_STREAM in its output queue until the client's connection next shows activity
# (deploy/README.md, "Backend loss"); each ping is such activity.
KEEPALIVE = [
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.http2.max_pings_without_data", 0),
]
TEST_TIMEOUT = 90.0  # seconds for one test's client work; everything is on loopback

MAIN_CONF = """\
# Written by tests/test_fleet_nginx.py: the deploy file is included as Debian's nginx.conf would.
{user}
worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log notice;

events {{
    worker_connections 1024;
}}

http {{
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include {dir}/parsetier.conf;
}}
"""

SERVER_LINE = re.compile(r"^([ \t]*)server[ \t]+\S+((?:[ \t]+[^;\s]+)*)[ \t]*;[^\n]*\n", re.M)


def nginx_binary() -> str:
    found = shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(path, os.X_OK)), None
    )
    if found is None:
        pytest.fail(
            "nginx is not installed, and the fleet tests need a real one: `make deps` (.ci/setup) "
            "installs it; on Debian: apt-get install nginx",
            pytrace=False,
        )
    return found


def render_site(backends: list[str], listen: str, access_log: Path, down: frozenset[str]) -> str:
    """The deploy file with only the addresses and the access-log path replaced.

    Every backend gets the parameters (max_fails, fail_timeout...) of the deploy file's first
    ``server`` line; ``down`` ones are marked so, as an operator does before draining one."""
    text = DEPLOY_CONF.read_text()
    upstream = re.search(r"^upstream parsetier_backends \{\n(.*?)^\}", text, re.S | re.M)
    assert upstream, f"{DEPLOY_CONF}: no `upstream parsetier_backends {{ ... }}` block"
    block = upstream.group(1)
    first = SERVER_LINE.search(block)
    assert first, f"{DEPLOY_CONF}: the upstream lists no `server` lines"
    indent, params = first.group(1), first.group(2)
    ours = "".join(f"{indent}server {b}{params}{' down' if b in down else ''};\n" for b in backends)
    block = block[: first.start()] + ours + SERVER_LINE.sub("", block[first.start() :])
    text = text[: upstream.start(1)] + block + text[upstream.end(1) :]

    text, listens = re.subn(r"^([ \t]*listen[ \t]+)\S+", rf"\g<1>{listen}", text, flags=re.M)
    assert listens == 1, f"{DEPLOY_CONF}: expected one `listen` line, found {listens}"
    text, logs = re.subn(r"^([ \t]*access_log[ \t]+)\S+", rf"\g<1>{access_log}", text, flags=re.M)
    assert logs == 1, f"{DEPLOY_CONF}: expected one `access_log` line, found {logs}"
    return text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class AccessRecord:
    """One access-log line: one gRPC stream as nginx saw it."""

    line: str
    grpc_status: str  # from the trailers, else from the headers (trailers-only responses)
    upstreams: list[str]
    upstream_statuses: list[str]
    bytes_in: int


class Nginx:
    """Debian's nginx on 127.0.0.1 running the rendered deploy config, everything under ``dir``."""

    def __init__(self, workdir: Path, backends: list[str]) -> None:
        self.dir = workdir
        self.backends = backends
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def write_site(self, down: frozenset[str] = frozenset()) -> None:
        site = render_site(self.backends, f"127.0.0.1:{self.port}", self.dir / "access.log", down)
        (self.dir / "parsetier.conf").write_text(site)

    def start(self) -> Nginx:
        binary = nginx_binary()
        main = self.dir / "nginx.conf"
        # As root the workers would run as `nobody`, which cannot enter pytest's 0700 tmp dirs.
        user = "user root;" if os.geteuid() == 0 else ""
        main.write_text(MAIN_CONF.format(user=user, workers=WORKERS, dir=self.dir))
        for _ in range(3):  # a free port can be taken between probing and binding it; try another
            self.port = free_port()
            self.write_site()
            args = [binary, "-p", f"{self.dir}/", "-c", str(main)]
            check = subprocess.run([*args, "-t"], capture_output=True, text=True, timeout=30)
            assert check.returncode == 0, f"nginx -t rejected the rendered deploy config:\n{check.stderr}"
            with open(self.dir / "stderr.log", "ab") as stderr:
                self.proc = subprocess.Popen(
                    [*args, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=stderr
                )
            if self._wait_listening(10.0):
                return self
            self.stop()
        raise AssertionError(f"nginx did not start:\n{self.log()}")

    def _wait_listening(self, timeout: float) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def log(self) -> str:
        parts = [
            p.read_text(errors="replace")
            for p in (self.dir / "error.log", self.dir / "stderr.log")
            if p.exists()
        ]
        return "\n".join(parts)

    def _count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.log()))

    def reload(self, down: frozenset[str]) -> None:
        """Rewrite the site and SIGHUP the master, as `nginx -s reload` does; wait until the new
        workers run and the old ones are shutting down gracefully (they keep their open streams and
        send clients GOAWAY, so new streams arrive at the new workers)."""
        assert self.proc is not None
        started = self._count(r"start worker process \d+")
        leaving = self._count(r"gracefully shutting down")
        self.write_site(down)
        self.proc.send_signal(signal.SIGHUP)
        wait_until(
            lambda: (
                self._count(r"start worker process \d+") >= started + WORKERS
                and self._count(r"gracefully shutting down") >= leaving + WORKERS
            ),
            10.0,
            lambda: f"nginx did not reload:\n{self.log()}",
        )
        time.sleep(0.3)  # let the old workers' GOAWAY reach the client

    def access_log(self, at_least: int = 0) -> list[AccessRecord]:
        """The streams nginx has logged, waiting for ``at_least`` of them: nginx writes a stream's
        line just after it sent the stream's end, so a client can be a little ahead of the log."""
        wait_until(
            lambda: len(self._access_lines()) >= at_least,
            10.0,
            lambda: f"expected {at_least} access-log lines:\n" + "\n".join(self._access_lines()),
        )
        return [self._parse_access(line) for line in self._access_lines()]

    def _access_lines(self) -> list[str]:
        path = self.dir / "access.log"
        return path.read_text().splitlines() if path.exists() else []

    @staticmethod
    def _parse_access(line: str) -> AccessRecord:
        fields = re.search(
            r"grpc_status=(\S+)/(\S+) upstream=\[(.*?)\] upstream_status=\[(.*?)\] .*bytes_in=(\d+)", line
        )
        assert fields, f"unexpected access-log line (did the deploy log_format change?): {line}"
        trailer, header, upstreams, statuses, bytes_in = fields.groups()
        return AccessRecord(
            line=line,
            grpc_status=trailer if trailer != "-" else header,
            upstreams=[u.strip() for u in upstreams.split(",")],
            upstream_statuses=[s.strip() for s in statuses.split(",")],
            bytes_in=int(bytes_in),
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # fast shutdown: the test is over, open streams may go
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def wait_until(condition: Callable[[], bool], timeout: float, describe: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(describe())
        time.sleep(0.02)


@dataclass
class Fleet:
    nginx: Nginx
    a: ProcessServer
    b: ProcessServer


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    nginx_binary()  # fail at once, before starting servers, when nginx is missing
    with ProcessServer(*BACKEND_ARGS) as a, ProcessServer(*BACKEND_ARGS) as b:
        for server in (a, b):
            server.wait_for_log("models loaded", 60)
        nginx = Nginx(tmp_path, [a.target, b.target]).start()
        try:
            yield Fleet(nginx, a, b)
        finally:
            nginx.stop()
            # Shown by pytest only when the test failed: what each process saw.
            print(f"--- nginx error log:\n{nginx.log()}")
            print("--- nginx access log:\n" + "\n".join(r.line for r in nginx.access_log()))
            for name, server in (("a", a), ("b", b)):
                print(f"--- backend {name} ({server.target}):")
                print("\n".join(json.dumps(record) for record in server.logs))


# --- sessions -------------------------------------------------------------------------------------


def output_text(i: int) -> str:
    """Model output of session ``i``: its own reasoning, content and tool call."""
    return (
        f"<think>\nSession {i} reasons about City{i}.\n</think>\n\n"
        f"Answer for session {i}: {i * 7919 % 10007}."
        "<tool_call>\n"
        f'{{"name": "get_weather", "arguments": {{"city": "City{i}", "unit": "u{i}"}}}}'
        "\n</tool_call>"
    )


def check_session(i: int, joined: Joined, final: pb.Final | None, token_count: int) -> None:
    assert joined.reasoning == f"Session {i} reasons about City{i}."
    assert joined.content == f"Answer for session {i}: {i * 7919 % 10007}."
    assert joined.tool_calls() == [("get_weather", {"city": f"City{i}", "unit": f"u{i}"})]
    assert final is not None
    assert final.message.content == joined.content
    assert final.finish_reason == pb.FINISH_REASON_TOOL_CALLS
    assert final.usage.completion_tokens == token_count


async def send_steps(stream: AsyncParseStream, ids: list[int], rng: random.Random) -> None:
    pos = 0
    while pos < len(ids):
        size = rng.randint(1, 4)
        await stream.send(ids[pos : pos + size])
        pos += size
        await asyncio.sleep(0)  # let other sessions' steps interleave with ours


async def read_all(stream: AsyncParseStream) -> tuple[Joined, pb.Final | None]:
    deltas = [d async for d in stream.deltas()]
    return join(deltas), stream.final


async def run_session(client: AsyncClient, ids: list[int], request_id: str) -> tuple[Joined, pb.Final | None]:
    """One whole session: open, steps while reading replies, finish."""
    stream = await client.open("qwen3", tools=WEATHER_TOOLS, request_id=request_id)
    reader = asyncio.create_task(read_all(stream))
    await send_steps(stream, ids, random.Random(request_id))
    await stream.finish("stop")
    return await reader


@dataclass
class Held:
    """A session opened and half fed, its replies read by a task of its own (as a serving stack
    does), so a failure shows up without the client writing anything."""

    index: int
    request_id: str
    stream: AsyncParseStream
    rest: list[int]
    deltas: list[pb.Delta] = field(default_factory=list)
    reader: asyncio.Task | None = None

    async def _read(self) -> tuple[Joined, pb.Final | None]:
        async for delta in self.stream.deltas():
            self.deltas.append(delta)
        return join(self.deltas), self.stream.final

    async def complete(self) -> tuple[Joined, pb.Final | None]:
        assert self.reader is not None
        await send_steps(self.stream, self.rest, random.Random(self.index))
        await self.stream.finish("stop")
        return await self.reader


async def hold(client: AsyncClient, index: int, ids: list[int]) -> Held:
    request_id = f"held-{index}"
    stream = await client.open("qwen3", tools=WEATHER_TOOLS, request_id=request_id)
    half = len(ids) // 2
    held = Held(index, request_id, stream, ids[half:])
    held.reader = asyncio.create_task(held._read())
    await send_steps(stream, ids[:half], random.Random(index))
    return held


def ended(server: ProcessServer, outcome: str = "OK") -> list[str]:
    """request_ids of the sessions this backend ended with ``outcome`` (from its session_end lines)."""
    return [
        r.get("request_id", "")
        for r in list(server.logs)
        if r.get("msg") == "session_end" and r.get("outcome") == outcome
    ]


def wait_ended(server: ProcessServer, count: int, outcome: str = "OK") -> list[str]:
    """The session_end lines trail the clients' results slightly: wait for ``count`` of them."""
    wait_until(
        lambda: len(ended(server, outcome)) >= count,
        10.0,
        lambda: f"expected {count} {outcome} session_end lines, got {ended(server, outcome)}",
    )
    return ended(server, outcome)


def connect(target: str) -> AsyncClient:
    """A client as a serving stack should configure one behind nginx: with HTTP/2 keepalive pings.
    Resume is off: these tests pin what a client that cannot resume sees (tests/test_fleet_resume.py
    has the resuming clients)."""
    channel = grpc.aio.insecure_channel(target, options=KEEPALIVE)
    return AsyncClient(target, channel=channel, timeout=60, resume=False)


def run(coro) -> object:
    return asyncio.run(asyncio.wait_for(coro, TEST_TIMEOUT))


# --- tests ----------------------------------------------------------------------------------------


def test_concurrent_sessions_are_balanced_per_stream(fleet: Fleet, encode):
    """40 sessions open at once over 4 client connections: each gets exactly its own output, and
    least_conn spreads them over both backends (per stream, not per client connection)."""
    sessions = 40
    outputs = {i: encode(output_text(i)) for i in range(sessions)}

    async def main():
        clients = [connect(fleet.nginx.target) for _ in range(4)]
        all_open = asyncio.Barrier(sessions)

        async def one(i: int):
            client = clients[i % len(clients)]
            stream = await client.open("qwen3", tools=WEATHER_TOOLS, request_id=f"s{i}")
            await all_open.wait()  # every session is open (and placed) before any sends a step
            reader = asyncio.create_task(read_all(stream))
            await send_steps(stream, outputs[i], random.Random(i))
            await stream.finish("stop")
            return i, *(await reader)

        try:
            return await asyncio.gather(*(one(i) for i in range(sessions)))
        finally:
            for client in clients:
                await client.close()

    for i, joined, final in run(main()):
        check_session(i, joined, final, len(outputs[i]))

    wait_until(
        lambda: len(ended(fleet.a)) + len(ended(fleet.b)) >= sessions,
        10.0,
        lambda: f"session_end lines: a={ended(fleet.a)} b={ended(fleet.b)}",
    )
    on_a, on_b = ended(fleet.a), ended(fleet.b)
    assert sorted(on_a + on_b) == sorted(f"s{i}" for i in range(sessions)), "each session on one backend"
    # All 40 were open at once, so least_conn had to split them evenly (±1 for the order of arrival).
    assert abs(len(on_a) - len(on_b)) <= 2, f"unbalanced: a={len(on_a)} b={len(on_b)}"
    records = [r for r in fleet.nginx.access_log(at_least=sessions) if "/Parse " in r.line]
    assert len(records) == sessions
    assert all(r.grpc_status == "0" and len(r.upstreams) == 1 for r in records), records


def test_backend_loss(fleet: Fleet, encode):
    """SIGKILL one backend: its open session fails and is restarted from its start by the client;
    nginx retries new streams that meet the dead backend's refused connection on the survivor; 20 new
    sessions all succeed there. With no backend left, nginx answers UNAVAILABLE itself."""
    a, b = fleet.a, fleet.b
    held_outputs = {k: encode(output_text(100 + k)) for k in range(2)}
    outputs = {i: encode(output_text(i)) for i in range(20)}

    async def main():
        async with connect(fleet.nginx.target) as client:
            # Opened one after the other: least_conn puts the second on the backend without the first.
            held = [await hold(client, k, held_outputs[k]) for k in range(2)]

            await asyncio.to_thread(a.kill)  # SIGKILL, then reaped
            done, _ = await asyncio.wait(
                [h.reader for h in held], timeout=10, return_when=asyncio.FIRST_COMPLETED
            )
            assert len(done) == 1, "exactly the session on the killed backend fails"
            (dead,) = [h for h in held if h.reader in done]
            (alive,) = [h for h in held if h is not dead]
            error = dead.reader.exception()
            # nginx had sent the response headers, so all it can do is reset the stream: INTERNAL
            # without the server's fault trailer, which the proto's retry rule retries (a client with
            # resume on moves the session; this one has it off, so the reset surfaces as it came).
            assert isinstance(error, grpc.aio.AioRpcError), error
            assert error.code() == grpc.StatusCode.INTERNAL, (error.code(), error.details())
            assert "RST_STREAM" in (error.details() or "")
            assert retryable(error)

            # The session lived only on the dead backend: the client restarts it from its start. a has
            # no streams in flight and b has one, so least_conn tries a first: refused, then b.
            restarted = await run_session(client, held_outputs[dead.index], f"{dead.request_id}-restart")

            fresh = await asyncio.gather(*(run_session(client, outputs[i], f"new-{i}") for i in range(20)))
            survivor = await alive.complete()  # open all along on b, untouched by a's death

            return dead, alive, restarted, fresh, survivor

    dead, alive, restarted, fresh, survivor = run(main())
    check_session(100 + dead.index, *restarted, len(held_outputs[dead.index]))
    check_session(100 + alive.index, *survivor, len(held_outputs[alive.index]))
    for i, (joined, final) in enumerate(fresh):
        check_session(i, joined, final, len(outputs[i]))

    expected_on_b = {alive.request_id, f"{dead.request_id}-restart", *(f"new-{i}" for i in range(20))}
    assert set(wait_ended(b, len(expected_on_b))) == expected_on_b
    assert ended(a) == [], "a was killed before any of its sessions ended"

    records = fleet.nginx.access_log(at_least=len(expected_on_b) + 1)  # + the failed session on a
    retried = [r for r in records if r.upstreams == [a.target, b.target]]
    assert retried, "no stream was retried on b after a refused it:\n" + "\n".join(r.line for r in records)
    assert all(r.upstream_statuses == ["502", "200"] and r.grpc_status == "0" for r in retried), retried

    # No backend left: nginx answers in gRPC terms (error_page), a status clients retry on. Checked with
    # the sync client: when nginx answers before the Open is even written, grpc's asyncio client often
    # reports INTERNAL "Internal error from Core" instead of the status it received (grpc/grpc#36066).
    b.kill()
    with (
        Client(fleet.nginx.target, timeout=10, resume=False) as sync_client,
        pytest.raises(grpc.RpcError) as nothing_left,
    ):
        sync_client.parse_stream("qwen3", [outputs[0]], tools=WEATHER_TOOLS)
    assert nothing_left.value.code() == grpc.StatusCode.UNAVAILABLE
    assert nothing_left.value.details() == "parsetier: no backend available (nginx)"


def test_drain_after_taking_the_backend_out_of_nginx(fleet: Fleet, encode):
    """The deploy procedure: mark the backend `down`, reload nginx, SIGTERM the backend. Its open
    session completes through nginx (in the old worker), every new session goes to the other one."""
    a, b = fleet.a, fleet.b
    held_outputs = {k: encode(output_text(100 + k)) for k in range(2)}
    outputs = {i: encode(output_text(i)) for i in range(10)}

    async def main():
        async with connect(fleet.nginx.target) as client:
            held = [await hold(client, k, held_outputs[k]) for k in range(2)]  # one on each backend
            await asyncio.to_thread(fleet.nginx.reload, frozenset({a.target}))
            signalled = time.monotonic()
            a.terminate()
            draining = await asyncio.to_thread(a.wait_for_log, "draining")
            assert draining["open_sessions"] == 1, "a session is open on the backend being drained"

            fresh = await asyncio.gather(*(run_session(client, outputs[i], f"new-{i}") for i in range(10)))
            finished = [await h.complete() for h in held]
            return signalled, held, fresh, finished

    signalled, held, fresh, finished = run(main())
    for i, (joined, final) in enumerate(fresh):
        check_session(i, joined, final, len(outputs[i]))
    for h, (joined, final) in zip(held, finished, strict=True):
        check_session(100 + h.index, joined, final, len(held_outputs[h.index]))

    assert a.wait(15) == 0, "a clean drain: the open session finished within the grace"
    assert time.monotonic() - signalled < 15, "a waited out its grace instead of exiting when idle"
    (drained,) = ended(a)  # the held session on a, and nothing else: no refusals, no new sessions
    assert drained in {h.request_id for h in held}
    assert ended(a, "UNAVAILABLE") == []
    expected_on_b = {f"new-{i}" for i in range(10)} | ({h.request_id for h in held} - {drained})
    assert set(wait_ended(b, len(expected_on_b))) == expected_on_b


def test_drain_without_nginx_change_passes_unavailable_through(fleet: Fleet, encode):
    """SIGTERM alone: nginx open source does not read gRPC health, so the draining backend keeps
    getting new streams, and its UNAVAILABLE refusal reaches the client unretried (nginx cannot
    retry a gRPC stream once it sent it). The client's retry with a new stream is what moves the
    session to the other backend; the open session still completes."""
    a, b = fleet.a, fleet.b
    held_outputs = {k: encode(output_text(100 + k)) for k in range(2)}
    outputs = {i: encode(output_text(i)) for i in range(6)}

    async def main():
        async with connect(fleet.nginx.target) as client:
            held = [await hold(client, k, held_outputs[k]) for k in range(2)]  # one on each backend
            a.terminate()
            draining = await asyncio.to_thread(a.wait_for_log, "draining")
            assert draining["open_sessions"] == 1

            # One at a time: both backends hold one stream, so least_conn alternates between them.
            naive: list[grpc.StatusCode] = []
            for i in range(6):
                try:
                    await run_session(client, outputs[i], f"naive-{i}")
                    naive.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as exc:
                    assert exc.details() == "server is shutting down; retry elsewhere", exc
                    naive.append(exc.code())

            async def with_retries(i: int):
                for _ in range(10):
                    try:
                        return await run_session(client, outputs[i], f"retried-{i}")
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() != grpc.StatusCode.UNAVAILABLE:
                            raise
                raise AssertionError(f"session {i} refused 10 times")

            retried = [await with_retries(i) for i in range(6)]
            finished = [await h.complete() for h in held]
            return held, naive, retried, finished

    held, naive, retried, finished = run(main())
    assert grpc.StatusCode.UNAVAILABLE in naive, naive
    assert grpc.StatusCode.OK in naive, naive
    for i, (joined, final) in enumerate(retried):
        check_session(i, joined, final, len(outputs[i]))
    for h, (joined, final) in zip(held, finished, strict=True):
        check_session(100 + h.index, joined, final, len(held_outputs[h.index]))

    assert a.wait(15) == 0
    (drained,) = ended(a)
    (held_on_b,) = {h.request_id for h in held} - {drained}
    naive_ok = {f"naive-{i}" for i, code in enumerate(naive) if code == grpc.StatusCode.OK}
    expected_on_b = naive_ok | {f"retried-{i}" for i in range(6)} | {held_on_b}
    assert set(wait_ended(b, len(expected_on_b))) == expected_on_b

    refusals = len(ended(a, "UNAVAILABLE"))
    records = fleet.nginx.access_log(at_least=refusals + 1 + len(expected_on_b))  # every stream
    refused = [r for r in records if r.grpc_status == "14"]
    assert len(refused) == refusals > 0
    # Each refusal went to a alone: nginx passed it on as the response, it did not try b.
    assert all(r.upstreams == [a.target] and r.upstream_statuses == ["200"] for r in refused), refused


def test_a_session_may_stream_more_than_the_message_limit(fleet: Fleet):
    """nginx's client_max_body_size caps a stream's whole request body, which for a session is its
    whole output. The deploy file lifts it; a session sending 4.7 MiB (more than the 4 MiB message
    limit) in 8 KiB messages goes through."""
    padding = pb.ParseRequest(steps=[pb.Step()] * 4096)  # empty steps are no-ops: 8 KiB of pure volume
    count = 600

    async def main():
        async with connect(fleet.nginx.target) as client:
            messages = [
                pb.ParseRequest(open=open_message("qwen3", request_id="long")),
                *([padding] * count),
                pb.ParseRequest(steps=[pb.Step(token_ids=[9707])], finish=finish_message("stop")),
            ]
            return [m async for m in client.parse(messages)]

    replies = run(main())
    assert replies[-1].final.message.content == "Hello"
    (record,) = [r for r in fleet.nginx.access_log(at_least=1) if "/Parse " in r.line]
    assert record.grpc_status == "0"
    assert record.bytes_in > count * padding.ByteSize() > 4 * 1024 * 1024
