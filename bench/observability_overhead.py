"""What metrics and tracing cost: the server's CPU time per client message with neither, with
``--metrics-port``, with ``--otel`` and with both, as ratios against neither, measured in one run
(interleaved rounds, median of each). CPU time of the server process (from /proc), not wall time,
so the client and other work on the machine affect the figures little.

Off means off: with neither flag the server installs no interceptor and never imports
OpenTelemetry, so its per-message path is the plain servicer's; the "off again" row measures that
configuration twice and so shows the run's noise. Tracing exports with the console exporter into
/dev/null, an upper bound for an exporter's cost in the process.

    .venv/bin/python bench/observability_overhead.py [--sessions 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from collections.abc import Sequence

from sizing import OUTPUT, start_server

from parsetier.models import ModelRegistry
from parsetier_client import AsyncClient
from tests.testkit.procfs import cpu_seconds

CONFIGS: dict[str, tuple[str, ...]] = {
    "off": (),
    "off again": (),
    "metrics": ("--metrics-port", "0"),
    "tracing": ("--otel",),
    "metrics + tracing": ("--metrics-port", "0", "--otel"),
}


async def per_message_cpu(target: str, pid: int, sessions: int, ids: list[int]) -> float:
    """Server CPU seconds per client message over ``sessions`` sessions of one token per message,
    8 at a time."""
    steps = [[i] for i in ids]
    async with AsyncClient(target, timeout=300) as client:
        await client.parse_stream("qwen3", steps)  # warm
        pending = list(range(sessions))

        async def worker() -> None:
            while pending:
                pending.pop()
                await client.parse_stream("qwen3", steps)

        start = cpu_seconds(pid)
        await asyncio.gather(*(worker() for _ in range(8)))
        used = cpu_seconds(pid) - start
    return used / (sessions * (len(steps) + 2))  # + the Open and the Finish


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    ids = ModelRegistry().get("qwen3").tokenizer.encode(OUTPUT, add_special_tokens=False).ids
    env = dict(os.environ, OTEL_TRACES_EXPORTER="console")
    costs: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for _ in range(args.rounds):
        for name, flags in CONFIGS.items():
            server = start_server(*flags, env=env)
            assert server.proc is not None
            try:
                cost = asyncio.run(per_message_cpu(server.target, server.proc.pid, args.sessions, ids))
                costs[name].append(cost)
            finally:
                server.kill()
    base = statistics.median(costs["off"])
    messages = len(ids) + 2
    print(f"{args.sessions} sessions x {messages} messages (one token each), median of {args.rounds} rounds")
    print(f"{'configuration':<20} {'server CPU µs/message':>22} {'vs off':>8}")
    for name in CONFIGS:
        cost = statistics.median(costs[name])
        print(f"{name:<20} {cost * 1e6:>22.1f} {cost / base:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
