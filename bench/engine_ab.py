"""Engine A/B: this checkout against an earlier commit, whole-process CPU of paired runs.

Run:  python bench/engine_ab.py [--base HEAD~1] [--pairs 3] [--sizes 1,2,8,16] [--reps 3] [--family NAME ...]

The earlier commit's ``server/`` is exported (``git archive``) to a temporary directory. Then
``--pairs`` times, in an order that alternates from pair to pair, ``bench/engine_bench.py
--sessions SIZES`` (this checkout's workloads, so both sides parse the same ids) runs as a child
process once on each side: it loads every family, builds and verifies its workload, runs its
sessions ``--reps`` times at each size and prints their µs/token. Printed: each side's
whole-process CPU (user + system, from ``os.wait4``) and the median of the per-pair ratios
(this / base), then per family and size both sides' µs/token and the median per-pair ratio.
Pairs run back to back, so load on a shared machine hits both sides alike and the ratios hold.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "engine_bench.py"


def export_server(rev: str, into: Path) -> Path:
    """``rev``'s ``server/`` tree, unpacked under ``into``."""
    archive = into / "base.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "server"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "server"


def child(server: Path, args: Sequence[str]) -> tuple[float, dict[str, dict[str, float]]]:
    """One benchmark process on ``server``'s code: its CPU seconds (user + system) and timings."""
    env = dict(os.environ, PYTHONPATH=str(server))
    proc = subprocess.Popen([sys.executable, str(BENCH), *args], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark failed on {server}: {' '.join(args)}")
    return usage.ru_utime + usage.ru_stime, json.loads(out.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--sizes", default="1,2,8,16", help="tokens per delta, comma-separated")
    parser.add_argument("--reps", type=int, default=3, help="sessions per family and size in each run")
    parser.add_argument("--family", action="append", default=[], help="only these families and qwen3")
    args = parser.parse_args(argv)

    work = ["--sessions", args.sizes, "--reps", str(args.reps)]
    work += [a for name in args.family for a in ("--family", name)]
    cpu: dict[str, list[float]] = {"base": [], "this": []}
    timings: dict[str, list[dict[str, dict[str, float]]]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="engine-ab-") as tmp:
        sides = {"base": export_server(args.base, Path(tmp)), "this": ROOT / "server"}
        for pair in range(args.pairs):
            for side in ("base", "this") if pair % 2 == 0 else ("this", "base"):
                seconds, measured = child(sides[side], work)
                cpu[side].append(seconds)
                timings[side].append(measured)
    ratio = statistics.median(t / b for t, b in zip(cpu["this"], cpu["base"], strict=True))
    print(f"== engine A/B: this checkout vs {args.base}; {args.pairs} pairs of whole processes")
    print(
        f"  whole-process CPU (load, verify, sessions at {args.sizes}): base "
        f"{statistics.median(cpu['base']):.1f} s, this {statistics.median(cpu['this']):.1f} s, "
        f"ratio {ratio:.2f}"
    )
    sizes = args.sizes.split(",")
    print("  µs/token, base → this (median of pairs), and this/base per pair (median):")
    print(f"  {'family':<16}" + "".join(f"{'@' + k:>24}" for k in sizes))
    families = list(timings["base"][0][sizes[0]])
    for name in families:
        cells = []
        for k in sizes:
            b = [t[k][name] for t in timings["base"]]
            t_ = [t[k][name] for t in timings["this"]]
            r = statistics.median(x / y for x, y in zip(t_, b, strict=True))
            cells.append(f"{statistics.median(b):6.2f} → {statistics.median(t_):5.2f} ({r:4.2f})")
        print(f"  {name:<16}" + "".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
