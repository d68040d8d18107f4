"""``ParseBatch`` throughput of parsetier servers run from several source trees, beside the
same-proto echo, measured in turn in one run (``servicebench``'s ``batch_load``; each server
pinned to the server core, the load on the other): a before/after of a change, as same-run ratios.

    python -m bench.servicebench.ab /tmp/before /path/to/after   # ROUNDS=3 STEPS=600 SIZES=256,1024

(from the repository's root, ``PYTHONPATH=server:client/python:protos/python``; not part of ``make
bench``: it needs the trees to compare).

A tree is a directory with ``server/``, ``client/python/`` and ``protos/python/`` (a worktree, or
``git archive`` of a commit with its ``_core.abi3.so`` copied in). The figures are tokens per second
of server CPU; the ratios pair each round's figures, so a slow phase of a shared machine hits both
sides.
"""

from __future__ import annotations

import os
import statistics
import sys

from bench.servicebench.launcher import BENCH_LIMITS, CLIENT_CPU, SERVER_CPU, echo_server, started
from bench.servicebench.loads import batch_load, measured, workload
from tests.testkit.servers import ProcessServer


def server_from(tree: str) -> ProcessServer:
    """``parsetier serve`` from ``tree``'s sources, with the service bench's limits."""
    code = (
        f"import sys; sys.path[:0] = "
        f"[{tree + '/server'!r}, {tree + '/client/python'!r}, {tree + '/protos/python'!r}]; "
        "from parsetier.cli import main; sys.exit(main())"
    )
    command = [sys.executable, "-c", code, "serve", "--port", "0", "--workers", "1", "--preload", "qwen3"]
    server = ProcessServer(command=[*command, *BENCH_LIMITS], keep_session_ends=False)
    started(server, SERVER_CPU).wait_for_log("models loaded", timeout=600)
    return server


def main() -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})
    trees = sys.argv[1:]
    if not trees:
        sys.exit("usage: python -m bench.servicebench.ab TREE [TREE...]")
    rounds = int(os.environ.get("ROUNDS", "3"))
    steps = int(os.environ.get("STEPS", "600"))
    sizes = [int(size) for size in os.environ.get("SIZES", "256,1024").split(",")]
    ids = workload()
    servers = {tree: server_from(tree) for tree in trees}
    servers["echo"] = echo_server()
    rates: dict[tuple[int, str], list[float]] = {}
    try:
        for server in servers.values():  # warm up: first opens, first tokens
            measured(server, batch_load(server.target, ids, 256, 10))
        for round_ in range(rounds):
            for size in sizes:
                for name, server in servers.items():
                    tokens, cpu, _ = measured(server, batch_load(server.target, ids, size, steps))
                    rates.setdefault((size, name), []).append(tokens / cpu)
                    print(
                        f"round {round_} {size}x1 {name}: {tokens / cpu:,.0f} tokens/s per core", flush=True
                    )
    finally:
        for server in servers.values():
            server.stop()
    for size in sizes:
        echo = rates[(size, "echo")]
        base = trees[0]
        first = rates[(size, base)]
        for name in servers:
            rate = rates[(size, name)]
            of_echo = statistics.median(a / e for a, e in zip(rate, echo, strict=True))
            of_first = [a / b for a, b in zip(rate, first, strict=True)]
            print(
                f"{size}x1 {name}: median {statistics.median(rate):,.0f} tokens/s per core, "
                f"{of_echo:.3f} of the echo, {statistics.median(of_first):.2f} of {base} "
                f"(per round {', '.join(f'{r:.2f}' for r in of_first)})"
            )


if __name__ == "__main__":
    main()
