"""``ParseBatch`` items of several tokens against single-token items: server CPU per token, as
same-run ratios (issue 40's target: items of 8 tokens cost at most 1.2× per token what
single-token items cost).

    python -m bench.servicebench.multitoken [TREE ...]   # ROUNDS=3 TOKENS=300000 SIZES=256,1024

(from the repository's root, ``PYTHONPATH=server:client/python:protos/python``; not part of ``make bench``).
With no tree it measures this checkout's server; with several (a worktree, or ``git archive`` of
a commit with its ``_core.abi3.so`` copied in) each in turn, so a change's before and after are
ratios of one run. Each server is pinned to the server core, the load on the other.

The load is ``loads.batch_load``'s: ``sessions`` sessions on one stream, the workload's output
fed in order, each session finishing at its end and opening again; every message carries
``per_item`` tokens of each live session, in one of two shapes:

- ``packed``: one step of ``per_item`` ids, a packed item (what the clients send for a step of
  several ids: speculative decoding, ``stream_interval``);
- ``steps``: an entry of ``per_item`` one-token steps (what the clients send for several queued
  steps of one session, which they do not pack).

Every shape sends the same tokens (``TOKENS`` per load and size) and so the same opens and
finishes per token; the ratio is each shape's CPU per token over the single-token packed load's
in the same round (median over rounds).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Iterator

from bench.servicebench.launcher import CLIENT_CPU, parsetier_server
from bench.servicebench.loads import batch_step, measured, pipelined, workload
from parsetier_api.v1 import parsetier_pb2 as pb

SHAPES = (("packed", 1), ("packed", 8), ("steps", 8))
"""(shape, tokens per item) measured; the first is the baseline of the ratios."""


async def load(target: str, ids: list[int], sessions: int, tokens: int, per_item: int, shape: str) -> int:
    """One stream of ``sessions`` sessions fed about ``tokens`` tokens, two messages in flight;
    sessions start at different points of the output. Returns the tokens sent."""
    keys = [f"m{i}" for i in range(sessions)]
    position = [i % len(ids) for i in range(sessions)]

    def messages() -> Iterator[tuple[pb.ParseBatchRequest, int]]:
        sent = 0
        while sent < tokens:
            message, count = batch_step(keys, position, ids, shape, per_item)
            sent += count
            yield message, count

    return await pipelined(target, keys, messages())


def main() -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})
    trees = sys.argv[1:]
    rounds = int(os.environ.get("ROUNDS", "3"))
    tokens = int(os.environ.get("TOKENS", "300000"))
    sizes = [int(size) for size in os.environ.get("SIZES", "256,1024").split(",")]
    ids = workload()
    if trees:
        from bench.servicebench.ab import server_from

        servers = {tree: server_from(tree) for tree in trees}
    else:
        servers = {"this checkout": parsetier_server()}
    # (server, size, shape, per_item) -> µs of server CPU per token, one per round
    cost: dict[tuple[str, int, str, int], list[float]] = {}
    try:
        for server in servers.values():  # warm up: first opens, first tokens of every shape
            for shape, per_item in SHAPES:
                measured(server, load(server.target, ids, 256, 2000, per_item, shape))
        for round_ in range(rounds):
            for size in sizes:
                for name, server in servers.items():
                    for shape, per_item in SHAPES:
                        work = load(server.target, ids, size, tokens, per_item, shape)
                        sent, cpu, _ = measured(server, work)
                        us = cpu / sent * 1e6
                        cost.setdefault((name, size, shape, per_item), []).append(us)
                        print(
                            f"round {round_} {name} {size} {shape} x{per_item}: {us:.2f} µs/token", flush=True
                        )
    finally:
        for server in servers.values():
            server.stop()
    base_shape, base_n = SHAPES[0]
    print(
        "\n| server | sessions | item | µs of server CPU per token (median) "
        "| / 1-token items (median of rounds) |"
    )
    print("|---|---|---|---|---|")
    for name in servers:
        for size in sizes:
            base = cost[(name, size, base_shape, base_n)]
            for shape, per_item in SHAPES:
                values = cost[(name, size, shape, per_item)]
                ratios = [v / b for v, b in zip(values, base, strict=True)]
                item = f"{per_item} token{'s' if per_item > 1 else ''}, " + (
                    "one step" if shape == "packed" else f"{per_item} steps"
                )
                print(
                    f"| {name} | {size} | {item} | {statistics.median(values):.2f} | "
                    f"{statistics.median(ratios):.2f} ({', '.join(f'{r:.2f}' for r in ratios)}) |"
                )
    if len(servers) > 1:
        first = next(iter(servers))
        print(f"\nper token against {first} (median of rounds):")
        for name in list(servers)[1:]:
            for size in sizes:
                for shape, per_item in SHAPES:
                    a, b = cost[(first, size, shape, per_item)], cost[(name, size, shape, per_item)]
                    ratio = statistics.median(y / x for x, y in zip(a, b, strict=True))
                    print(f"  {name} {size} {shape} x{per_item}: {ratio:.2f}")


if __name__ == "__main__":
    main()
