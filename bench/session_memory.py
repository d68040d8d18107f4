"""Memory per live session: what one open session costs, sans-IO and inside the server.

Run:  PYTHONPATH=server:client/python:protos/python python bench/session_memory.py [--sessions 1000]

* **sans-IO**: ``--sessions`` open ``Session`` objects (qwen3, two tools, a 256-id prompt tail,
  a 200-token output fed in), measured with ``tracemalloc``: retained bytes per session, against
  the same count of empty lists (the floor of holding anything at all).
* **server**: a ``parsetier serve`` process with ``--sessions`` open ``Parse`` streams (the same
  Open and output, not finished), measured as the growth of the process's resident set, per
  session; and the same for a 1M-id prompt, which shows that only the prompt tail is kept.

Timing-free; the figures go into docs/service.md (*Memory per session*).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from parsetier.engine.session import Session  # noqa: E402
from parsetier.messages import SessionOptions, Tool  # noqa: E402
from parsetier.models import ModelRegistry  # noqa: E402
from tests.testkit.procfs import rss_bytes  # noqa: E402

TOOLS = (
    Tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),
    Tool("get_time", {"type": "object", "properties": {}}),
)
OUTPUT = "<think>\nLet me look the weather up for the user, city by city.\n</think>\n\nSure: " * 4


def sansio(sessions: int) -> tuple[float, float]:
    model = ModelRegistry().get("qwen3")
    ids = model.tokenizer.encode(OUTPUT, add_special_tokens=False).ids[:200]
    prompt = tuple(model.tokenizer.encode("<|im_start|>assistant\n" * 40, add_special_tokens=False).ids)
    options = SessionOptions(tools=TOOLS, prompt_token_ids=prompt)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = []
    for _ in range(sessions):
        session = Session(model, options)
        session.feed(ids)
        kept.append(session)
    gc.collect()
    per_session = (tracemalloc.get_traced_memory()[0] - before) / sessions
    floor_before = tracemalloc.get_traced_memory()[0]
    floor = [[] for _ in range(sessions)]
    per_floor = (tracemalloc.get_traced_memory()[0] - floor_before) / sessions
    tracemalloc.stop()
    del kept, floor
    return per_session, per_floor


def _start_server() -> tuple[subprocess.Popen, int]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(ROOT / "server"), str(ROOT / "client" / "python"), str(ROOT / "protos" / "python")]
        ),
    )
    cmd = [
        sys.executable,
        "-m",
        "parsetier.cli",
        "serve",
        "--port",
        "0",
        "--preload",
        "qwen3",
        "--max-sessions",
        "100000",
        "--max-loop-lag-ms",
        "0",
        "--workers",
        "1",  # one process: its pid is the server whose memory is measured
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    port = 0
    assert proc.stderr is not None
    for line in proc.stderr:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("msg") == "listening":
            port = record["port"]
            break  # the warm-up session below waits for the model
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the log pipe flowing
    return proc, port


async def _hold_sessions(target: str, sessions: int, prompt_len: int, pid: int) -> float:
    from parsetier_client import AsyncClient

    model = ModelRegistry().get("qwen3")
    ids = model.tokenizer.encode(OUTPUT, add_special_tokens=False).ids[:200]
    prompt = [9707] * prompt_len
    tools = [{"type": "function", "function": {"name": t.name, "parameters": t.parameters}} for t in TOOLS]
    clients = [AsyncClient(target, timeout=300) for _ in range(8)]
    warm = await clients[0].open("qwen3", tools=tools)
    await warm.send(ids)
    await asyncio.sleep(1.0)
    before = rss_bytes(pid)
    streams = []
    for i in range(sessions):
        stream = await clients[i % len(clients)].open("qwen3", tools=tools, prompt_token_ids=prompt)
        await stream.send(ids)
        streams.append(stream)
    await asyncio.sleep(1.0)
    per_session = (rss_bytes(pid) - before) / sessions
    for stream in streams:
        stream.cancel()
    for client in clients:
        await client.close()
    return per_session


def server(sessions: int, prompt_len: int) -> float:
    proc, port = _start_server()
    try:
        return asyncio.run(_hold_sessions(f"127.0.0.1:{port}", sessions, prompt_len, proc.pid))
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--long-prompt-sessions", type=int, default=50)
    args = parser.parse_args()
    started = time.monotonic()
    per_session, per_floor = sansio(args.sessions)
    print(
        f"sans-IO Session (qwen3, 2 tools, 200 ids fed): {per_session / 1024:.1f} KiB per session "
        f"({per_session / per_floor:.0f}x an empty list)"
    )
    served = server(args.sessions, 256)
    print(f"server, open Parse stream, 256-id prompt: {served / 1024:.1f} KiB RSS per session")
    long = server(args.long_prompt_sessions, 1_000_000)
    print(
        f"server, open Parse stream, 1,000,000-id prompt: {long / 1024:.1f} KiB RSS per session "
        f"(the prompt itself is {1_000_000 * 3 / 2**20:.1f} MiB on the wire)"
    )
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
