"""Memory of the two engines in the server, as same-run ratios native / reference (issue 21, item 5).

Run:  python bench/engine_memory.py [--sessions 1000]

For each engine (``parsetier serve --engine native|reference --preload all``, one process):

* the resident set once every preset with a tokenizer is loaded (``models loaded``), after a
  warm-up load, the native engine's tables included (``_core.Vocabulary`` per tokenizer,
  ``Detokenizer`` and ``Grammar`` per model);
* the resident set's growth per open ``Parse`` stream and per ``ParseBatch`` session (qwen3, two
  tools): idle (opened) and mid-tool-call (the workload's ids up to 8 into the first call's
  arguments fed), as ``bench/service_bench.py``'s *Memory per open session* measures it.

Timing-free; the figures go into docs/performance.md (*Native engine per token*).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "client" / "python"), str(ROOT), str(ROOT / "bench")]

from servicebench.launcher import parsetier_server  # noqa: E402
from servicebench.loads import TOOLS, batch_load, open_channel, opens, workload  # noqa: E402

from parsetier_api.v1 import parsetier_pb2 as pb  # noqa: E402
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc  # noqa: E402
from tests.testkit.servers import ProcessServer  # noqa: E402

MiB = 2**20


def _rss(server: ProcessServer) -> int:
    return server.memory()[0][0]


async def parse_sessions(server: ProcessServer, ids: list[int], count: int) -> tuple[float, float]:
    """RSS growth per open Parse stream: opened, then mid-tool-call."""
    mid = ids.index(151657) + 8  # inside the first tool call's arguments
    channels = [open_channel(server.target) for _ in range(4)]
    calls = []
    before = _rss(server)
    for i in range(count):
        call = pb_grpc.ParserServiceStub(channels[i % 4]).Parse()
        await call.write(pb.ParseRequest(open=pb.Open(model="qwen3", tools_json=TOOLS)))
        calls.append(call)
    for call in calls:
        await call.initial_metadata()
    await asyncio.sleep(1)
    idle = _rss(server)
    for call in calls:
        await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=ids[:mid])]))
        await call.read()
    await asyncio.sleep(1)
    busy = _rss(server)
    for call in calls:
        call.cancel()
    for channel in channels:
        await channel.close()
    return (idle - before) / count, (busy - before) / count


async def batch_sessions(server: ProcessServer, ids: list[int], count: int) -> tuple[float, float]:
    """RSS growth per ParseBatch session: opened, then mid-tool-call."""
    mid = ids.index(151657) + 8
    channel = open_channel(server.target)
    call = pb_grpc.ParserServiceStub(channel).ParseBatch()
    before = _rss(server)
    keys = [f"m{i}" for i in range(count)]
    await call.write(opens(keys))
    await call.read()
    await asyncio.sleep(1)
    idle = _rss(server)
    steps = [pb.SessionInput(key=k, steps=[pb.Step(token_ids=ids[:mid])]) for k in keys]
    await call.write(pb.ParseBatchRequest(sessions=steps))
    await call.read()
    await asyncio.sleep(1)
    busy = _rss(server)
    call.cancel()
    await channel.close()
    return (idle - before) / count, (busy - before) / count


def measure(engine: str, ids: list[int], count: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for rpc, fn in (("Parse", parse_sessions), ("ParseBatch", batch_sessions)):
        with parsetier_server(pin=None, extra=("--engine", engine, "--preload", "all")) as server:
            asyncio.run(batch_load(server.target, ids, 16, 40))  # warm the allocator and the loop
            if rpc == "Parse":
                figures["rss"] = _rss(server)
            figures[f"{rpc} idle"], figures[f"{rpc} mid-call"] = asyncio.run(fn(server, ids, count))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    ids = workload()
    got = {engine: measure(engine, ids, args.sessions) for engine in ("reference", "native")}
    ref, nat = got["reference"], got["native"]
    print(f"{'':28} {'reference':>10} {'native':>10} {'native/reference':>17}")
    rows = [("RSS, every preset (MiB)", "rss", MiB)]
    rows += [(f"{key} (KiB/session)", key, 1024) for key in ("Parse idle", "Parse mid-call")]
    rows += [(f"{key} (KiB/session)", key, 1024) for key in ("ParseBatch idle", "ParseBatch mid-call")]
    for label, key, unit in rows:
        print(f"{label:28} {ref[key] / unit:>10.1f} {nat[key] / unit:>10.1f} {nat[key] / ref[key]:>17.2f}")


if __name__ == "__main__":
    main()
