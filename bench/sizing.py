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
import sys
from collections.abc import Sequence

from benchkit.paths import use_repository

ROOT = use_repository()

from parsetier.models import ModelRegistry  # noqa: E402
from parsetier_client import AsyncClient  # noqa: E402
from tests.testkit.procfs import cpu_seconds, rss_bytes  # noqa: E402
from tests.testkit.servers import ProcessServer  # noqa: E402

OUTPUT = (
    "<think>\nThe user wants the weather in two cities; I will call the tool twice.\n</think>\n\n"
    "Let me check both.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
)


def start_server(*args: str, env: dict[str, str] | None = None) -> ProcessServer:
    """``parsetier serve`` with qwen3 loaded, as one process (its pid is the server); returns once
    the model is loaded."""
    server = ProcessServer("--preload", "qwen3", "--max-sessions", "100000", *args, env=env)
    server.start(timeout=300).wait_for_log("models loaded", timeout=300)
    return server


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
    server = start_server()
    assert server.proc is not None
    try:
        before, during = asyncio.run(hold_sessions(server.target, args.sessions, ids, server.proc.pid))
        rate = asyncio.run(stream_tokens(server.target, args.concurrency, args.tokens, ids, server.proc.pid))
    finally:
        server.stop()
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
