"""How soon a client sees its answer when the server is overloaded: refused or served.

Run:  PYTHONPATH=server:client/python:protos/python python bench/refusal_latency.py [--load-sessions 100]

Three processes on loopback, so that no client's own event loop adds to what is measured:

* a ``parsetier serve`` process with one worker;
* a **load** process: ``--load-sessions`` ``Parse`` streams, all opened (and admitted) first,
  then each sending ``--ids`` ids per message as fast as the replies come back, which saturates
  the worker; it reports how many ids its sessions got parsed per second;
* a light **prober** process that opens ``--probes`` new sessions at ``--rate`` per second once the
  load has built up, each with one message (``Open`` and one step), and records per call the
  seconds from the call to its outcome: the refusal's status or the first reply.

Prints one JSON object: the probes' outcomes with p50 / p99 / max latency, and the load's
throughput from the first probe to the end of the load. Timing only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
HELLO = 9707  # "Hello" in Qwen3: every id is content, so every message gets a reply
STOP = 151645


def _stub(target: str, channels: list):
    from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

    channel = grpc.aio.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20)])
    channels.append(channel)
    return pb_grpc.ParserServiceStub(channel)


def _open(ids: int):
    from parsetier_api.v1 import parsetier_pb2 as pb

    return pb.ParseRequest(open=pb.Open(model="qwen3"), steps=[pb.Step(token_ids=[HELLO] * ids)])


async def _load(args) -> dict:
    """Keep ``load_sessions`` streams busy until ``until``; count the ids parsed per second."""
    from parsetier_api.v1 import parsetier_pb2 as pb

    channels: list = []
    stubs = [_stub(args.target, channels) for _ in range(4)]
    step = pb.ParseRequest(steps=[pb.Step(token_ids=[HELLO] * args.ids)])
    finish = pb.ParseRequest(finish=pb.Finish(stop_token_id=STOP))
    per_second: Counter = Counter()
    outcomes: Counter = Counter()

    opened: list[int] = []
    all_open = asyncio.Event()

    async def open_one(i: int):
        """A session opened while the server is still idle (a refusal is retried), so that
        every run loads the server with the same number of admitted sessions."""
        while True:
            call = stubs[i % len(stubs)].Parse()
            try:
                await call.write(_open(1))
                await call.read()
                return call
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.2)

    async def session(i: int) -> None:
        call = await open_one(i)
        opened.append(i)
        if len(opened) == args.load_sessions:
            all_open.set()
        await all_open.wait()
        try:
            while time.time() < args.until:
                await call.write(step)
                await call.read()
                per_second[int(time.time())] += args.ids
            await call.write(finish)
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
            outcomes["OK"] += 1
        except grpc.aio.AioRpcError as exc:
            outcomes[exc.code().name] += 1

    await asyncio.gather(*(session(i) for i in range(args.load_sessions)))
    for channel in channels:
        await channel.close()
    return {"ids_per_second": dict(per_second), "outcomes": dict(outcomes)}


async def _probe(args) -> dict:
    """``probes`` new sessions at ``rate`` per second; the latency of each one's outcome."""
    from parsetier_api.v1 import parsetier_pb2 as pb

    channels: list = []
    stub = _stub(args.target, channels)
    await stub.ListModels(pb.ListModelsRequest())  # the channel is connected before timing
    finish = pb.ParseRequest(finish=pb.Finish(stop_token_id=STOP))
    results: list[tuple[str, float]] = []

    async def one(i: int) -> None:
        await asyncio.sleep(max(0.0, begin + i / args.rate - time.perf_counter()))
        started = time.perf_counter()
        call = stub.Parse(timeout=60)
        try:
            await call.write(_open(1))
            await call.read()
            results.append(("OK", time.perf_counter() - started))
            await call.write(finish)
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as exc:
            results.append((exc.code().name, time.perf_counter() - started))

    begin = time.perf_counter()
    window = [time.time()]
    await asyncio.gather(*(one(i) for i in range(args.probes)))
    window.append(begin + args.probes / args.rate - time.perf_counter() + time.time())
    for channel in channels:
        await channel.close()
    return {"results": results, "window": window}


def _quantiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 3),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "max": round(ordered[-1], 3),
    }


def _child(role: str, args, **extra) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--role", role, "--target", args.target]
    for key in ("load_sessions", "ids", "probes", "rate"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    for key, value in extra.items():
        cmd += [f"--{key}", str(value)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=_env())


def _env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [
        str(ROOT / "server"),
        str(ROOT / "client" / "python"),
        str(ROOT / "protos" / "python"),
        env.get("PYTHONPATH", ""),
    ]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def _serve(args) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "parsetier.cli", "serve", "--port", "0", "--workers", "1"]
    cmd += ["--preload", "qwen3", "--max-loop-lag-ms", str(args.max_loop_lag_ms), *args.server_arg]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=_env())
    port = None
    assert proc.stderr is not None
    for line in proc.stderr:
        record = json.loads(line) if line.startswith("{") else {}
        if record.get("msg") == "listening":
            port = record["port"]
        if record.get("msg") == "models loaded":
            break
    threading.Thread(target=_collect, args=(proc,), daemon=True).start()
    return proc, f"127.0.0.1:{port}"


SERVER_LOGS: list[dict] = []


def _collect(proc: subprocess.Popen) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("{"):
            SERVER_LOGS.append(json.loads(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("main", "load", "probe"), default="main")
    parser.add_argument("--target", default="")
    parser.add_argument("--load-sessions", type=int, default=100)
    parser.add_argument("--ids", type=int, default=4000, help="ids per load message")
    parser.add_argument("--probes", type=int, default=100)
    parser.add_argument("--rate", type=float, default=20.0, help="new probe sessions per second")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds of load before probing")
    parser.add_argument("--max-loop-lag-ms", type=float, default=100)
    parser.add_argument("--server-arg", action="append", default=[], help="extra server flag")
    parser.add_argument("--until", type=float, default=0.0)
    args = parser.parse_args()
    if args.role == "load":
        print(json.dumps(asyncio.run(_load(args))))
        return
    if args.role == "probe":
        print(json.dumps(asyncio.run(_probe(args))))
        return

    server, args.target = _serve(args)
    try:
        until = time.time() + args.warmup + args.probes / args.rate + 5
        load = _child("load", args, until=until)
        time.sleep(args.warmup)
        probe = _child("probe", args)
        probed = json.loads(probe.communicate()[0])
        loaded = json.loads(load.communicate()[0])
    finally:
        server.terminate()
        server.wait(30)
    by_outcome: dict[str, list[float]] = {}
    for outcome, seconds in probed["results"]:
        by_outcome.setdefault(outcome, []).append(seconds)
    # From the first probe to the end of the load: every refusal's work falls inside, however late.
    start, end = int(probed["window"][0]), int(until)
    seconds = {int(k): v for k, v in loaded["ids_per_second"].items()}
    window = [seconds.get(s, 0) for s in range(start + 1, end)]
    report = {
        "probes": {outcome: _quantiles(values) for outcome, values in sorted(by_outcome.items())},
        "all_probes": _quantiles([s for _, s in probed["results"]]),
        "load_ids_per_second": round(statistics.mean(window)) if window else 0,
        "load_kids_each_second": [round(v / 1000) for v in window],
        "load_outcomes": loaded["outcomes"],
        "server_outcomes": dict(
            Counter(r.get("outcome") for r in SERVER_LOGS if r.get("msg") == "session_end")
        ),
        "server_lag_ms_logged": [r["loop_lag_ms"] for r in SERVER_LOGS if "loop_lag_ms" in r][-8:],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
