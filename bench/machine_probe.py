"""The machine's own latency tail: a fixed amount of pure-Python work, paced, timed.

The paced-load figures of ``service_bench.py`` are latencies of messages that each take one core
for milliseconds. On a shared VM the core itself runs slower at times (its host is busy elsewhere):
a message that happens to run then takes longer, whatever it does. This probe runs a job of a
fixed amount of work, calibrated at the start to take ``--job-ms`` at its fastest, ``--rate``
times a second on whatever core it is pinned to, and prints the distribution of its durations as
one JSON line. A tail it shows is the machine's; the paced rows of the same run are read against
it.

Run:  python bench/machine_probe.py --job-ms 18 --rate 20 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import time


def job(n: int) -> int:
    """``n`` rounds of the dictionary reads and writes and small allocations a parser does."""
    table: dict[int, int] = {}
    total = 0
    for i in range(n):
        slot = i & 1023
        total += table.get(slot, 0)
        table[slot] = (i, total & 255)[1]
    return total


def calibrated(job_ms: float) -> int:
    """The rounds whose fastest of several runs takes ``job_ms``."""
    n = 10_000
    while True:
        fastest = min(_timed(n) for _ in range(5))
        if fastest >= 0.005 or n > 10**8:
            return max(1, int(n * job_ms / 1000 / fastest))
        n *= 4


def _timed(n: int) -> float:
    started = time.perf_counter()
    job(n)
    return time.perf_counter() - started


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job-ms", type=float, default=18.0)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    n = calibrated(args.job_ms)
    period = 1 / args.rate
    durations: list[float] = []
    tick = time.perf_counter()
    end = tick + args.seconds
    while tick < end:
        durations.append(_timed(n) * 1000)
        tick += period
        time.sleep(max(0.0, tick - time.perf_counter()))
    durations.sort()
    print(
        json.dumps(
            {
                "job_ms": args.job_ms,
                "runs": len(durations),
                "p50": percentile(durations, 0.5),
                "p99": percentile(durations, 0.99),
                "p999": percentile(durations, 0.999),
            }
        )
    )


if __name__ == "__main__":
    main()
