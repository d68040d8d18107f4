"""Prometheus metrics of a live `parsetier serve --metrics-port 0`: the scrape parses, and its series
move as sessions run, fail and drain."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from grpc_servers import ProcessServer, subprocess_env
from parsetier_client import AsyncClient, Client

HELLO = [9707, 0]


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample of one scrape, keyed by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode("utf-8")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


@pytest.fixture(scope="module")
def metered():
    with ProcessServer("--metrics-port", "0", "--preload", "qwen3", "--grace", "20") as server:
        record = server.wait_for_log("metrics listening")
        server.metrics_port = record["port"]
        # Loading a tokenizer holds the GIL for a while, and scrapes wait meanwhile.
        server.wait_for_log("models loaded", timeout=60)
        yield server


def test_scrape_parses_and_has_build_info(metered):
    samples = scrape(metered.metrics_port)
    (info,) = [dict(ls) for (n, ls) in samples if n == "parsetier_build_info"]
    assert info["worker"] == "0" and info["version"] and info["grpc"]
    assert value(samples, "parsetier_draining") == 0


def test_counters_move_as_sessions_run(metered):
    before = scrape(metered.metrics_port)
    with Client(metered.target, timeout=30) as client:
        for _ in range(3):
            message, _ = client.parse_stream("qwen3", [[9707], [0]])
            assert message.content == "Hello!"
        assert client.parse_once("qwen3", HELLO).final.message.content == "Hello!"
        with pytest.raises(grpc.RpcError):
            client.parse_stream("qwen3", [[10_000_000]])
        with pytest.raises(grpc.RpcError):
            client.parse_once("no-such-model", HELLO)
    # A call is counted just after its status went out, so the last one can trail by a moment.
    deadline = time.monotonic() + 10
    while True:
        after = scrape(metered.metrics_port)
        if value(after, "parsetier_sessions_open") == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    while value(after, "parsetier_sessions_total") - value(before, "parsetier_sessions_total") < 6:
        assert time.monotonic() < deadline, "the sessions were never all counted"
        time.sleep(0.02)
        after = scrape(metered.metrics_port)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("parsetier_sessions_total", rpc="Parse", model="qwen3", code="OK") == 3
    assert moved("parsetier_sessions_total", rpc="ParseOnce", model="qwen3", code="OK") == 1
    assert moved("parsetier_sessions_total", rpc="Parse", model="qwen3", code="INVALID_ARGUMENT") == 1
    # a name the server does not serve is labelled "other": label values stay bounded
    assert moved("parsetier_sessions_total", rpc="ParseOnce", model="other", code="NOT_FOUND") == 1
    assert not [ls for (name, ls) in after if dict(ls).get("model") == "no-such-model"]
    assert moved("parsetier_tokens_total", model="qwen3") == 3 * 2 + 2 + 1
    assert moved("parsetier_deltas_total", model="qwen3") >= 4
    # Each good Parse reads Open, 2 steps, Finish; the bad one Open and the step it fails on.
    assert moved("parsetier_request_message_bytes_count", rpc="Parse") == 3 * 4 + 2
    assert moved("parsetier_reply_latency_seconds_count", rpc="Parse", model="qwen3") >= 3 * 2
    assert moved("parsetier_reply_latency_seconds_count", rpc="ParseOnce", model="qwen3") == 1
    assert moved("parsetier_response_message_bytes_sum", rpc="ParseOnce") > 0
    assert moved("parsetier_session_duration_seconds_count", rpc="Parse", model="qwen3") == 4
    assert value(after, "parsetier_sessions_open") == 0


def test_undecodable_requests_are_counted_not_crashed_on(metered):
    before = scrape(metered.metrics_port)
    with grpc.insecure_channel(metered.target) as channel:
        once = channel.unary_unary("/parsetier.v1.ParserService/ParseOnce")
        with pytest.raises(grpc.RpcError) as failure:
            once(b"\xff\xff\xff", timeout=30)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    deadline = time.monotonic() + 10
    while True:
        after = scrape(metered.metrics_port)
        moved = value(after, "parsetier_sessions_total", rpc="ParseOnce", code="INVALID_ARGUMENT") - value(
            before, "parsetier_sessions_total", rpc="ParseOnce", code="INVALID_ARGUMENT"
        )
        if moved == 1:
            break
        assert time.monotonic() < deadline, "the refused call was never counted"
        time.sleep(0.02)


def test_tokens_and_deltas_move_while_a_session_runs(metered):
    """The token and delta counters move per message, not when the session ends."""
    port = metered.metrics_port

    def wait_for(name: str, at_least: float, baseline) -> None:
        deadline = time.monotonic() + 10
        while value(scrape(port), name, model="qwen3") - value(baseline, name, model="qwen3") < at_least:
            assert time.monotonic() < deadline, f"{name} did not move while the session was open"
            time.sleep(0.02)

    async def run() -> None:
        before = scrape(port)
        async with AsyncClient(metered.target, timeout=60, resume=False) as client:
            stream = await client.open("qwen3")
            await stream.send([9707])
            wait_for("parsetier_tokens_total", 1, before)
            await stream.send([0, 0])
            wait_for("parsetier_tokens_total", 3, before)
            wait_for("parsetier_deltas_total", 1, before)
            during = scrape(port)
            assert value(during, "parsetier_sessions_open", rpc="Parse", model="qwen3") == 1
            assert (
                value(during, "parsetier_tokens_total", model="qwen3")
                - value(before, "parsetier_tokens_total", model="qwen3")
                == 3
            )
            await stream.finish("stop")
            content = "".join([d.content async for d in stream.deltas()])
            assert content == "Hello!!"
        after = scrape(port)
        assert (
            value(after, "parsetier_tokens_total", model="qwen3")
            - value(before, "parsetier_tokens_total", model="qwen3")
            == 3
        ), "nothing is added again when the session ends"

    asyncio.run(run())


def test_open_sessions_and_drain_state(metered):
    async def run() -> None:
        # resume=False: a resuming client is handed off at once by the drain; this one stays.
        async with AsyncClient(metered.target, timeout=60, resume=False) as client:
            stream = await client.open("qwen3")
            await stream.send([9707])
            deadline = time.monotonic() + 10
            port = metered.metrics_port
            while value(scrape(port), "parsetier_sessions_open", rpc="Parse", model="qwen3") != 1:
                assert time.monotonic() < deadline, "the open session never showed"
                await asyncio.sleep(0.05)
            metered.terminate()
            while value(scrape(port), "parsetier_draining") != 1:
                assert time.monotonic() < deadline, "draining never showed"
                await asyncio.sleep(0.05)
            await stream.finish("stop", steps=[[0]])
            content = "".join([d.content async for d in stream.deltas()])
            assert content == "Hello!"

    asyncio.run(run())
    assert metered.wait(30) == 0


def test_worker_processes_merge_in_multiprocess_mode(tmp_path):
    """Two worker processes write their series to PROMETHEUS_MULTIPROC_DIR; one endpoint serves both,
    each with its worker label (what a --workers parent does)."""
    env = dict(subprocess_env(), PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    worker = (
        "import sys; from parsetier.service import metrics; m = metrics.enable(worker=sys.argv[1]);"
        "metrics.session_ended('Parse', 'qwen3', 'OK', tokens=int(sys.argv[2]), deltas=1, seconds=0.1)"
    )
    for name, tokens in (("0", 5), ("1", 7)):
        subprocess.run([sys.executable, "-c", worker, name, str(tokens)], env=env, check=True, timeout=60)
    serve = (
        "import sys; from parsetier.service import metrics;"
        "s, port = metrics.serve_http('127.0.0.1', 0); print(port, flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", serve], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        samples = scrape(port)
    finally:
        proc.kill()
        proc.wait(10)
    assert value(samples, "parsetier_tokens_total", model="qwen3", worker="0") == 5
    assert value(samples, "parsetier_tokens_total", model="qwen3", worker="1") == 7
    assert value(samples, "parsetier_sessions_total", code="OK") == 2


def test_serve_workers_label_their_series_and_a_dead_worker_leaves_no_open_sessions():
    """`serve --workers 2 --metrics-port 0`: one endpoint merges both workers' series, each under
    its worker label; a worker killed with a session open is respawned, and its open session no
    longer counts (the supervisor marks the dead process in the multiprocess files)."""
    with ProcessServer(
        "--workers", "2", "--metrics-port", "0", "--preload", "qwen3", "--grace", "5"
    ) as server:
        port = server.wait_for_log("metrics listening")["port"]
        server.wait_for_log("workers listening", timeout=60)
        reached: set[str] = set()
        calls = 0
        while calls < 32:  # the kernel hashes each connection to a worker (see test_service_workers)
            calls += 1
            channel = grpc.insecure_channel(server.target, options=[("grpc.use_local_subchannel_pool", 1)])
            with channel, Client(server.target, channel=channel, timeout=30) as client:
                assert client.parse_once("qwen3", HELLO).final.message.content == "Hello!"
            samples = scrape(port)
            reached = {
                dict(ls)["worker"]
                for (name, ls), v in samples.items()
                if name == "parsetier_tokens_total" and v
            }
            if reached == {"0", "1"}:
                break
        assert reached == {"0", "1"}, reached
        assert value(samples, "parsetier_tokens_total", model="qwen3") == 2 * calls
        assert {dict(ls)["worker"] for (name, ls) in samples if name == "parsetier_build_info"} >= {"0", "1"}

        async def kill_the_worker_of_an_open_session() -> None:
            async with AsyncClient(server.target, timeout=30, resume=False) as client:
                stream = await client.open("qwen3")
                await stream.send([9707])
                deadline = time.monotonic() + 10
                while not (
                    open_ := [
                        ls
                        for (name, ls), v in scrape(port).items()
                        if name == "parsetier_sessions_open" and v
                    ]
                ):
                    assert time.monotonic() < deadline, "the open session never showed"
                    await asyncio.sleep(0.05)
                (labels,) = open_
                worker = int(dict(labels)["worker"])
                (pid,) = {
                    r["pid"] for r in server.logs if r.get("msg") == "listening" and r.get("worker") == worker
                }
                os.kill(pid, signal.SIGKILL)
                with pytest.raises(grpc.aio.AioRpcError):
                    await stream.finish("stop", steps=[[0]])
                    [d async for d in stream.deltas()]

        asyncio.run(kill_the_worker_of_an_open_session())
        respawned = server.wait_for_log("worker exited")
        assert respawned["exit_code"] != 0
        deadline = time.monotonic() + 20
        while value(scrape(port), "parsetier_sessions_open") != 0:
            assert time.monotonic() < deadline, "the dead worker's open session still counts"
            time.sleep(0.1)
