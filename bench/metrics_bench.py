"""Metrics benchmark: the metrics interceptor's own work per ``Parse`` message, as a ratio to
decoding and encoding that message pair (what grpc does for every message anyway), same run.

Run:  PYTHONPATH=server:client/python:protos/python python bench/metrics_bench.py \
      [--messages 20000] [--reps 7]

Per message the interceptor observes the request's size, the reply's size and the step-to-reply
latency (three histograms), and adds the message's tokens and deltas to their counters. Timing
only: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import statistics
import time

import grpc
from prometheus_client import CollectorRegistry

from parsetier.service import metrics
from parsetier_api.v1 import parsetier_pb2 as pb

OPEN = pb.ParseRequest(open=pb.Open(model="qwen3"))
STEP = pb.ParseRequest(steps=[pb.Step(token_ids=[9707])])
REPLY = pb.ParseResponse(sequence=1, deltas=[pb.Delta(content="Hello")])


def measured(registry_metrics: metrics.Metrics, messages: int) -> float:
    call = metrics._Call(registry_metrics, "Parse", True)
    call.received(OPEN)
    start = time.perf_counter()
    for _ in range(messages):
        call.received(STEP)
        call.sent(REPLY)
    took = time.perf_counter() - start
    call.finished(grpc.StatusCode.OK, took)
    return took / messages


def coded(messages: int) -> float:
    request, reply = STEP.SerializeToString(), REPLY.SerializeToString()
    start = time.perf_counter()
    for _ in range(messages):
        pb.ParseRequest.FromString(request)
        pb.ParseResponse.FromString(reply).SerializeToString()
    return (time.perf_counter() - start) / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    registry_metrics = metrics.Metrics("0", CollectorRegistry())
    times: dict[str, list[float]] = {"metrics": [], "protobuf": []}
    for _ in range(args.reps):  # interleaved, so load on a shared machine hits both alike
        times["metrics"].append(measured(registry_metrics, args.messages))
        times["protobuf"].append(coded(args.messages))
    work, base = (statistics.median(times[k]) for k in ("metrics", "protobuf"))
    print("| per Parse message | µs | / protobuf decode + encode |")
    print("|---|---:|---:|")
    print(f"| protobuf: request decoded, reply decoded and encoded | {base * 1e6:.2f} | 1.00 |")
    print(f"| metrics interceptor's work | {work * 1e6:.2f} | {work / base:.2f} |")


if __name__ == "__main__":
    main()
