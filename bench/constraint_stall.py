"""Does building large constraints stall other sessions? A probe stream's reply latency while
another client builds ``BuildConstraint`` answers of many tools, or opens sessions with them
(``--rpc ParseOnce``) (issue 37).

Run:  PYTHONPATH=server:client/python:protos/python:. python bench/constraint_stall.py \
      [--tools 5000] [--requests 3]

Two processes besides the server (one worker): a **load** process sending ``--requests``
``BuildConstraint`` calls of ``--tools`` tools each, one after another, and this process, whose
**probe** ``Parse`` stream sends one token every ``--every`` seconds and times each reply while the
load runs. Prints one JSON object: the load's outcomes and seconds per call, the probe's reply
latency p50 / p99 / max (ms) while the load ran. Timing only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client import open_message

ROOT = Path(__file__).resolve().parent.parent
HELLO = 9707


def tools(count: int, strict: bool = False) -> list[dict]:
    """``count`` small function tools (two parameters each)."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    return [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": schema, "strict": strict}}
        for i in range(count)
    ]


async def load(target: str, count: int, requests: int, strict: bool, rpc: str) -> None:
    """The load process: ``requests`` calls, one after another; one JSON line. ``rpc``:
    ``BuildConstraint``, or ``ParseOnce`` (an Open of those tools, one token)."""
    open_ = open_message("qwen3", tools=tools(count, strict))
    if rpc == "ParseOnce":
        request = pb.ParseOnceRequest(open=open_, token_ids=[HELLO])
    else:
        request = pb.BuildConstraintRequest(open=open_)
    outcomes, seconds = [], []
    options = [("grpc.max_receive_message_length", -1)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        stub = pb_grpc.ParserServiceStub(channel)
        for _ in range(requests):
            started = time.perf_counter()
            try:
                await getattr(stub, rpc)(request, timeout=120)
                outcomes.append("OK")
            except grpc.aio.AioRpcError as exc:
                outcomes.append(f"{exc.code().name}: {exc.details()[:120]}")
            seconds.append(round(time.perf_counter() - started, 3))
    print(json.dumps({"outcomes": outcomes, "seconds": seconds}), flush=True)


async def probe(target: str, every: float, loader: subprocess.Popen) -> list[float]:
    """Reply latencies (s) of one-token steps sent every ``every`` s while ``loader`` runs."""
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        call = pb_grpc.ParserServiceStub(channel).Parse()
        await call.write(pb.ParseRequest(open=open_message("qwen3")))
        await call.initial_metadata()
        step = pb.ParseRequest(steps=[pb.Step(token_ids=[HELLO])])
        while loader.poll() is None:
            started = time.perf_counter()
            await call.write(step)
            await call.read()
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(every)
        await call.write(pb.ParseRequest(finish=pb.Finish()))
        await call.done_writing()
        while await call.read() is not grpc.aio.EOF:
            pass
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--rpc", choices=("BuildConstraint", "ParseOnce"), default="BuildConstraint")
    parser.add_argument("--every", type=float, default=0.01)
    parser.add_argument("--load", metavar="TARGET", help=argparse.SUPPRESS)
    parser.add_argument("--server-args", default="", help="extra `parsetier serve` arguments")
    args = parser.parse_args()
    if args.load:
        asyncio.run(load(args.load, args.tools, args.requests, args.strict, args.rpc))
        return
    from tests.testkit.servers import ProcessServer, subprocess_env

    with ProcessServer("--preload", "qwen3", "--max-loop-lag-ms", "0", *args.server_args.split()) as server:
        cmd = [sys.executable, __file__, "--load", server.target, "--tools", str(args.tools)]
        cmd += ["--requests", str(args.requests), "--rpc", args.rpc] + (["--strict"] if args.strict else [])
        loader = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=subprocess_env())
        latencies = asyncio.run(probe(server.target, args.every, loader))
        result = json.loads(loader.stdout.read().strip().splitlines()[-1])
    ms = sorted(1000 * x for x in latencies)
    result["probe"] = {
        "replies": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
        "max_ms": round(ms[-1], 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
