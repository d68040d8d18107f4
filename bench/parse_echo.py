"""``Parse`` at one token per message against the same-proto echo server, with an optional second
parsetier checkout, all in one run (same-run ratios; issue 21's ``Parse`` target is ≥ 0.9).

Run:  python bench/parse_echo.py [--rounds 6] [--before /path/to/other/checkout]

Servers (``servicebench.launcher``, pinned to one core; the load on the other): *parsetier* from
this checkout, the echo server, and with ``--before`` a parsetier served from that checkout's
``server/``, ``client/python/`` and ``protos/python/`` (e.g. ``git worktree add /tmp/before
<commit>`` with its ``_core.abi3.so`` built or copied): a before/after of a change, alternated with
the echo in every round. Each round runs the same load (32 streams, the service bench's Qwen3
workload 4 times each, one token per message) on each server in turn. Printed per round: µs of
server CPU per token (one token = one message here, plus each session's Open and Finish) and the
ratios echo/server (throughput per core relative to the echo: 1.0 is the echo's cost); at the end
the medians of the rounds' ratios. ``service_bench.py``'s echo ceiling measures the same case among
others.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchkit.paths import python_roots, use_repository

ROOT = use_repository()

from servicebench.launcher import SERVER_CPU, echo_server, parsetier_server, started  # noqa: E402
from servicebench.loads import measured, parse_load, workload  # noqa: E402

from tests.testkit.servers import ProcessServer  # noqa: E402


def checkout_server(checkout: Path) -> ProcessServer:
    """``parsetier serve`` from another checkout, with the limits ``parsetier_server`` sets."""
    roots = python_roots(checkout)
    boot = f"import sys; sys.path[:0] = {roots!r}; from parsetier.cli import main; sys.exit(main())"
    server = ProcessServer(
        "--preload",
        "qwen3",
        "--max-sessions",
        "20000",
        "--max-loop-lag-ms",
        "0",
        command=[sys.executable, "-c", boot, "serve", "--port", "0", "--workers", "1"],
        keep_session_ends=False,
    )
    started(server, SERVER_CPU).wait_for_log("models loaded", timeout=600)
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--before", type=Path, help="another checkout to serve beside this one")
    args = parser.parse_args()
    ids = workload()
    servers: dict[str, ProcessServer] = {}
    try:
        if args.before is not None:
            servers["before"] = checkout_server(args.before)
        servers["parsetier"] = parsetier_server()
        servers["echo"] = echo_server()
        ratios: dict[str, list[float]] = {kind: [] for kind in servers if kind != "echo"}
        for round_ in range(args.rounds):
            cost = {}
            for kind, server in servers.items():
                tokens, cpu, _ = measured(server, parse_load(server.target, ids, 1, streams=32, rounds=4))
                cost[kind] = cpu / tokens * 1e6
            for kind in ratios:
                ratios[kind].append(cost["echo"] / cost[kind])
            shown = ", ".join(f"{kind} {us:.1f}" for kind, us in cost.items())
            shown_ratios = ", ".join(f"{kind}/echo {r[-1]:.2f}" for kind, r in ratios.items())
            print(f"round {round_ + 1}: us per token: {shown}; {shown_ratios}", flush=True)
        medians = ", ".join(f"{kind}/echo {statistics.median(r):.2f}" for kind, r in ratios.items())
        print(f"median of {args.rounds} rounds: {medians}")
    finally:
        for server in servers.values():
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
