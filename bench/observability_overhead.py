"""What metrics and tracing cost per session, as ratios against the same server with both off,
measured in one run (interleaved rounds, median of each).

Off means off: with neither ``--metrics-port`` nor ``--otel`` the server installs no interceptor
and never imports OpenTelemetry, so its per-message path is the plain servicer's. The "off again"
row measures the same configuration twice and so shows the run's noise floor.

    .venv/bin/python bench/observability_overhead.py [--sessions 200] [--steps 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "client" / "python")]

from parsetier.models import ModelRegistry  # noqa: E402
from parsetier.service import build_server  # noqa: E402
from parsetier_client import Client  # noqa: E402

CONFIGS = ("off", "off again", "metrics", "tracing", "metrics + tracing")


def tracer():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return provider.get_tracer("bench")


class Server:
    """A server on loopback in its own thread, with the configuration's interceptors."""

    def __init__(self, registry: ModelRegistry, config: str) -> None:
        self.options = {
            "metrics_on": "metrics" in config,
            "tracer": tracer() if "tracing" in config else None,
        }
        self.registry = registry
        self.ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self.handle = await build_server(self.registry, None, "127.0.0.1", 0, **self.options)
        self.ready.set()
        await self.stop.wait()
        await self.handle.server.stop(0)

    def __enter__(self) -> Server:
        self.thread.start()
        self.ready.wait(60)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(30)


def one_round(registry: ModelRegistry, config: str, sessions: int, steps: list[list[int]]) -> float:
    """Sessions per second for ``sessions`` sequential streams of one token per message."""
    with Server(registry, config) as server, Client(f"127.0.0.1:{server.handle.port}", timeout=60) as client:
        client.parse_stream("qwen3", steps)  # warm the connection and the model
        started = time.perf_counter()
        for _ in range(sessions):
            client.parse_stream("qwen3", steps)
        return sessions / (time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--steps", type=int, default=64, help="messages of one token each per session")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    registry = ModelRegistry()
    model = registry.get("qwen3")
    ids = model.tokenizer.encode("The weather in Paris is mild today, with light wind. " * 8).ids
    steps = [[i] for i in ids[: args.steps]]
    rates: dict[str, list[float]] = {config: [] for config in CONFIGS}
    for _ in range(args.rounds):
        for config in CONFIGS:
            rates[config].append(one_round(registry, config, args.sessions, steps))
    base = statistics.median(rates["off"])
    print(f"{args.sessions} sessions x {len(steps)} one-token messages, median of {args.rounds} rounds")
    print(f"{'configuration':<20} {'sessions/s':>11} {'vs off':>8} {'µs/message':>11}")
    for config in CONFIGS:
        rate = statistics.median(rates[config])
        extra = (1 / rate - 1 / base) / (len(steps) + 2) * 1e6
        print(f"{config:<20} {rate:>11.1f} {rate / base:>8.3f} {extra:>+11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
