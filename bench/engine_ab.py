"""Engine A/B: this checkout against an earlier commit, as whole-process CPU of paired runs.

Run:  python bench/engine_ab.py [--base HEAD~1] [--pairs 7] [--sizes 1,8] [--reps 5] [--family NAME ...]

The earlier commit's ``server/`` is exported (``git archive``) to a temporary directory. Then, for
every delta size, ``--pairs`` times: ``bench/engine_bench.py --sessions SIZE`` (this checkout's
workloads, so both sides parse the same ids) runs as a child process once on each side, plus once
on each side with ``--reps 0`` (loading models and building workloads only), in an order that
alternates from pair to pair. Each child's CPU (user + system, from ``os.wait4``) is its whole
process; subtracting the load-only run leaves the sessions' own CPU. Printed per size: the medians
of both sides, the median of the per-pair ratios (this / base), whole-process and sessions only.
Pairs run back to back, so load on a shared machine hits both sides alike and the ratios hold.
"""

from __future__ import annotations

import argparse
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


def child_cpu(server: Path, args: Sequence[str]) -> float:
    """CPU seconds (user + system) of one benchmark process run on ``server``'s code."""
    env = dict(os.environ, PYTHONPATH=str(server))
    proc = subprocess.Popen([sys.executable, str(BENCH), *args], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"benchmark failed on {server}: {' '.join(args)}")
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--sizes", default="1,8", help="tokens per delta, comma-separated")
    parser.add_argument("--reps", type=int, default=5, help="sessions per family in each run")
    parser.add_argument("--family", action="append", default=[], help="families besides qwen3 (repeatable)")
    args = parser.parse_args(argv)

    families = [a for name in args.family for a in ("--family", name)]
    with tempfile.TemporaryDirectory(prefix="engine-ab-") as tmp:
        base = export_server(args.base, Path(tmp))
        this = ROOT / "server"
        sides = {"base": base, "this": this}
        print(f"== engine A/B: this checkout vs {args.base}; {args.pairs} pairs, {args.reps} sessions each")
        for size in (int(x) for x in args.sizes.split(",")):
            work = ["--sessions", str(size), "--reps", str(args.reps), *families]
            load = ["--sessions", str(size), "--reps", "0", *families]
            whole: dict[str, list[float]] = {"base": [], "this": []}
            own: dict[str, list[float]] = {"base": [], "this": []}
            for pair in range(args.pairs):
                order = ("base", "this") if pair % 2 == 0 else ("this", "base")
                for side in order:
                    full = child_cpu(sides[side], work)
                    whole[side].append(full)
                    own[side].append(full - child_cpu(sides[side], load))
            ratio_whole = statistics.median(t / b for t, b in zip(whole["this"], whole["base"], strict=True))
            ratio_own = statistics.median(t / b for t, b in zip(own["this"], own["base"], strict=True))
            print(
                f"  {size:>2} tokens/delta: whole process base {statistics.median(whole['base']):6.2f} s, "
                f"this {statistics.median(whole['this']):6.2f} s, ratio {ratio_whole:4.2f}; "
                f"sessions only base {statistics.median(own['base']):6.2f} s, "
                f"this {statistics.median(own['this']):6.2f} s, ratio {ratio_own:4.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
