"""Memory of the two engines in the server, as same-run ratios native / reference (issue 21, item 5).

Run:  python bench/engine_memory.py [--sessions 1000]

For each engine, one ``parsetier serve --engine native|reference --preload all`` process (loading
every preset takes minutes on a loaded machine, so each engine's server is started once):

* the resident set once every preset with a tokenizer is loaded (``models loaded``), after a
  warm-up load, the native engine's tables included (``_core.Vocabulary`` per tokenizer,
  ``Detokenizer`` and ``Grammar`` per model);
* the resident set's growth per open ``Parse`` stream and per ``ParseBatch`` session (qwen3, two
  tools): idle (opened) and mid-tool-call (the workload's ids up to 8 into the first call's
  arguments fed), measured as ``bench/service_bench.py``'s *Memory per open session* is
  (``servicebench.memory``): first the ``ParseBatch`` sessions, then, with those still open, the
  ``Parse`` streams, so no freed memory is there for the second to reuse.

Timing-free; the figures go into docs/performance.md (*Native engine per token*).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "client" / "python"), str(ROOT), str(ROOT / "bench")]

from servicebench.launcher import parsetier_server  # noqa: E402
from servicebench.loads import batch_load, workload  # noqa: E402
from servicebench.memory import SESSIONS, rss  # noqa: E402

MiB = 2**20
RPCS = ("ParseBatch", "Parse")
"""In this order, each measured on top of the previous one's open sessions."""


def measure(engine: str, ids: list[int], count: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    started = time.monotonic()
    # The native engine builds every preset's tables before it listens: minutes on a busy machine.
    extra = ("--engine", engine, "--preload", "all")
    with parsetier_server(pin=None, extra=extra, timeout=1800) as server:
        loaded = time.monotonic() - started
        asyncio.run(batch_load(server.target, ids, 16, 40))  # warm the allocator and the loop
        figures["rss"] = rss(server)

        async def sessions() -> None:
            held = []
            for rpc in RPCS:
                idle, busy, close = await SESSIONS[rpc](server, ids, count)
                figures[f"{rpc} idle"], figures[f"{rpc} mid-call"] = idle, busy
                held.append(close)
            for close in held:
                await close()

        asyncio.run(sessions())
    took = time.monotonic() - started
    print(f"{engine}: every preset loaded in {loaded:.0f} s, {took:.0f} s in all", file=sys.stderr)
    for key, value in figures.items():
        print(f"  {key}: {value / (MiB if key == 'rss' else 1024):.1f}", file=sys.stderr)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    ids = workload()
    got = {engine: measure(engine, ids, args.sessions) for engine in ("native", "reference")}
    ref, nat = got["reference"], got["native"]
    print(f"{'':28} {'reference':>10} {'native':>10} {'native/reference':>17}")
    rows = [("RSS, every preset (MiB)", "rss", MiB)]
    for rpc in RPCS:
        rows += [(f"{rpc} {at} (KiB/session)", f"{rpc} {at}", 1024) for at in ("idle", "mid-call")]
    for label, key, unit in rows:
        print(f"{label:28} {ref[key] / unit:>10.1f} {nat[key] / unit:>10.1f} {nat[key] / ref[key]:>17.2f}")


if __name__ == "__main__":
    main()
