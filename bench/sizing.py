"""Sizing figures for docs/operations.md: a server's memory per open session and its CPU time per
token, measured on a `parsetier serve` subprocess with /proc (Linux), so the client's own work on
the same machine does not count.

- memory: RSS with the model loaded and idle, then with N sessions open (each holding a parser that
  has seen a reasoning block and part of a tool call); the difference over N;
- CPU: the server's user+system CPU seconds while C concurrent sessions stream one token per
  message, over the tokens they sent: tokens per CPU-second, i.e. what one core sustains.

    .venv/bin/python bench/sizing.py [--sessions 400] [--concurrency 16] [--tokens 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "client" / "python")]

from parsetier.models import ModelRegistry  # noqa: E402
from parsetier_client import AsyncClient  # noqa: E402

OUTPUT = (
    "<think>\nThe user wants the weather in two cities; I will call the tool twice.\n</think>\n\n"
    "Let me check both.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
)


def start_server(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    """``parsetier serve`` with qwen3 loaded; returns once the model is (process, port)."""
    env = dict(env or os.environ, PYTHONPATH=f"{ROOT / 'server'}{os.pathsep}{ROOT / 'client' / 'python'}")
    cmd = [sys.executable, "-m", "parsetier.cli", "serve", "--port", "0", "--preload", "qwen3"]
    cmd += ["--workers", "1", "--max-sessions", "100000", *args]  # one process: its pid is the server
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    port = 0
    for line in proc.stderr:
        record = json.loads(line)
        if record.get("msg") == "listening":
            port = record["port"]
        if record.get("msg") == "models loaded":
            break
    # Keep reading the log, or a full pipe would stall the server at its next session_end line.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, port


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def hold_sessions(target: str, count: int, ids: list[int], pid: int) -> tuple[int, int]:
    """RSS before and with ``count`` sessions open, each fed the first two thirds of ``ids``."""
    async with AsyncClient(target, timeout=300) as client:
        streams = []
        await asyncio.sleep(1)
        before = rss_bytes(pid)
        for _ in range(count):
            stream = await client.open("qwen3")
            await stream.send(*[[i] for i in ids[: 2 * len(ids) // 3]])
            streams.append(stream)
        await asyncio.sleep(2)
        during = rss_bytes(pid)
        for stream in streams:
            stream.cancel()
    return before, during


async def stream_tokens(target: str, concurrency: int, total: int, ids: list[int], pid: int) -> float:
    """Tokens per server CPU-second with ``concurrency`` sessions of one token per message."""
    per_session = len(ids)
    sessions = max(1, total // per_session)
    async with AsyncClient(target, timeout=300) as client:
        await client.parse_stream("qwen3", [[i] for i in ids])  # warm
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(sessions):
            queue.put_nowait(n)

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                await client.parse_stream("qwen3", [[i] for i in ids])

        start = cpu_seconds(pid)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        used = cpu_seconds(pid) - start
    return sessions * per_session / used


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=20000)
    args = parser.parse_args(argv)
    ids = ModelRegistry().get("qwen3").tokenizer.encode(OUTPUT, add_special_tokens=False).ids
    proc, port = start_server()
    target = f"127.0.0.1:{port}"
    try:
        before, during = asyncio.run(hold_sessions(target, args.sessions, ids, proc.pid))
        rate = asyncio.run(stream_tokens(target, args.concurrency, args.tokens, ids, proc.pid))
    finally:
        proc.terminate()
        proc.wait(60)
    print(f"idle server RSS (qwen3 loaded): {before / 2**20:.0f} MiB")
    print(
        f"{args.sessions} open sessions: +{(during - before) / 2**20:.1f} MiB, "
        f"{(during - before) / args.sessions / 1024:.1f} KiB per session"
    )
    print(
        f"one token per message, {args.concurrency} concurrent sessions: "
        f"{rate:,.0f} tokens per server CPU-second"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
