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

The resident set's growth counts only what the allocator had to ask the kernel for, and how much
it had free already differs by engine (``servicebench/heap.py`` has the evidence: a native server
with ``MALLOC_ARENA_MAX=1`` grows 0.1 KiB per session). So the ``ParseBatch`` session is also
counted in bytes in use, the server's path for the same messages run in a subprocess per engine
with every allocation in malloc (``servicebench.heap``, qwen3 only): the figure the per-session
target is judged on.

Timing-free; the figures go into docs/performance.md (*Native engine per token*).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchkit.paths import use_repository

ROOT = use_repository(Path(__file__).resolve().parent)

from servicebench.launcher import parsetier_server  # noqa: E402
from servicebench.loads import batch_load, workload  # noqa: E402
from servicebench.memory import SESSIONS, rss  # noqa: E402

MiB = 2**20
RPCS = ("ParseBatch", "Parse")
"""In this order, each measured on top of the previous one's open sessions."""
AT = ("idle", "mid-call")


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


def heap(engine: str, count: int) -> dict[str, float]:
    """``servicebench.heap``'s bytes in use per ``ParseBatch`` session, in a process of its own."""
    paths = [
        str(ROOT / "server"),
        str(ROOT / "client" / "python"),
        str(ROOT / "protos" / "python"),
        str(ROOT),
    ]
    env = dict(os.environ, PYTHONMALLOC="malloc", PYTHONPATH=os.pathsep.join(paths))
    command = [sys.executable, "-m", "servicebench.heap", engine, str(count)]
    done = subprocess.run(command, cwd=ROOT / "bench", env=env, capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.splitlines()[-1])
    return {f"ParseBatch {at}, in use": got[at] for at in AT}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    ids = workload()
    got = {engine: measure(engine, ids, args.sessions) for engine in ("native", "reference")}
    for engine, figures in got.items():
        figures.update(heap(engine, args.sessions))
    ref, nat = got["reference"], got["native"]
    print(f"{'':28} {'reference':>10} {'native':>10} {'native/reference':>17}")
    rows = [("RSS, every preset (MiB)", "rss", MiB)]
    for rpc in RPCS:
        rows += [(f"{rpc} {at} (KiB/session)", f"{rpc} {at}", 1024) for at in AT]
    rows += [(f"ParseBatch {at}, in use (KiB)", f"ParseBatch {at}, in use", 1024) for at in AT]
    for label, key, unit in rows:
        print(f"{label:28} {ref[key] / unit:>10.1f} {nat[key] / unit:>10.1f} {nat[key] / ref[key]:>17.2f}")


if __name__ == "__main__":
    main()
