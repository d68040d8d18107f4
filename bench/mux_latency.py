"""What a multiplexed session adds to a reply's latency, at a steady paced load (issue 40).

Run:  .venv/bin/python bench/mux_latency.py [--sessions 256] [--interval-ms 25] [--phase random|step]
                                           [--flush-ms 0,0.2]

One ``parsetier serve`` process; the asyncio client drives ``--sessions`` sessions at once, each
sending one token of the bench's Qwen3 output every ``--interval-ms`` (``step``: all in step, as
one engine's decode loop; ``random``: each with its own phase, as several engines), once with a
``Parse`` stream per session and once multiplexed per ``--flush-ms`` bound. A reply's latency is
the time from the send of the message it answers (the session's latest: at this pace the server
answers well within the interval) to the reply's arrival, in the client. Printed: p50, p99 and
max per mode, and the p99 each multiplexed mode adds over ``Parse`` (the target: at most the
flush bound plus 1 ms). Nothing passes or fails on an absolute figure.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "server"), str(ROOT / "client" / "python")]

from bench.client_bench import STOP_TOKEN, TOOLS_JSON, encode_output  # noqa: E402
from tests.testkit.servers import ProcessServer  # noqa: E402


async def paced(
    target: str, ids: list[int], sessions: int, interval: float, phase: str, flush: float | None
) -> list[float]:
    """Reply latencies (seconds) of ``sessions`` paced sessions; ``flush`` None: ``Parse``."""
    from parsetier_client import AsyncClient

    latencies: list[float] = []
    multiplex = flush is not None
    async with AsyncClient(target, multiplex=multiplex, flush_interval=flush or 0.0) as client:
        start = time.perf_counter() + 0.5

        async def one(index: int) -> None:
            stream = await client.open("qwen3", tools=TOOLS_JSON)
            sent_at = [0.0]
            offset = random.random() * interval if phase == "random" else 0.0

            async def send() -> None:
                for n, tid in enumerate(ids):
                    due = start + offset + n * interval
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    sent_at[0] = time.perf_counter()
                    await stream.send([tid])
                await stream.finish("stop", STOP_TOKEN)

            sender = asyncio.create_task(send())
            async for _ in stream:
                latencies.append(time.perf_counter() - sent_at[0])
            await sender

        await asyncio.gather(*(one(i) for i in range(sessions)))
    return latencies[: len(latencies) - sessions]  # the finals answer the Finish, sent unpaced


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--interval-ms", type=float, default=25.0)
    parser.add_argument("--phase", choices=("step", "random"), default="random")
    parser.add_argument("--flush-ms", default="0,0.2", help="flush bounds of the multiplexed runs")
    args = parser.parse_args()
    ids = encode_output()
    flushes = [float(ms) / 1000 for ms in args.flush_ms.split(",")]
    interval = args.interval_ms / 1000
    with ProcessServer("--preload", "qwen3", "--max-loop-lag-ms", "0", keep_session_ends=False) as server:
        server.wait_for_log("models loaded", timeout=300)
        rows = []
        for flush in [None, *flushes]:
            got = asyncio.run(paced(server.target, ids, args.sessions, interval, args.phase, flush))
            rows.append((flush, got))
    print(
        f"\n{args.sessions} sessions, one token every {args.interval_ms:g} ms each ({args.phase} phase), "
        f"{len(ids)} tokens each; reply latency in the client\n"
    )
    print("| mode | replies | p50 ms | p99 ms | max ms | p99 added over Parse ms |")
    print("|---|---|---|---|---|---|")
    base = quantile(rows[0][1], 0.99)
    for flush, got in rows:
        name = "Parse" if flush is None else f"multiplexed, flush bound {flush * 1000:g} ms"
        p99 = quantile(got, 0.99)
        added = "" if flush is None else f"{(p99 - base) * 1000:.2f}"
        print(
            f"| {name} | {len(got)} | {statistics.median(got) * 1000:.2f} | {p99 * 1000:.2f} "
            f"| {max(got) * 1000:.2f} | {added} |"
        )


if __name__ == "__main__":
    main()
