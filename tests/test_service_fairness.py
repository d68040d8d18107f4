"""One client's large message must not stall the other streams or the health check."""

from __future__ import annotations

import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from parsetier_client import Client

HEAVY_IDS = 256_000
"""One message of this many ordinary ids takes seconds to parse on a slow, shared core."""


def test_a_large_message_does_not_stall_other_calls(grpc_server):
    heavy_time: list[float] = []

    def heavy() -> None:
        with Client(grpc_server.target, timeout=300) as client:
            started = time.monotonic()
            result = client.parse_stream("qwen3", [[3409] * HEAVY_IDS], steps_per_message=1)
            heavy_time.append(time.monotonic() - started)
            assert result.final.usage.completion_tokens == HEAVY_IDS

    with grpc.insecure_channel(grpc_server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        health.Check(health_pb2.HealthCheckRequest(), timeout=30)  # connected before timing
        worker = threading.Thread(target=heavy)
        worker.start()
        probes: list[float] = []
        while worker.is_alive():
            started = time.monotonic()
            health.Check(health_pb2.HealthCheckRequest(), timeout=300)
            probes.append(time.monotonic() - started)
            time.sleep(0.01)
        worker.join()
    assert heavy_time, "the heavy session failed"
    # Stalled, one probe waits about as long as the whole heavy message; served, each probe
    # waits at most a few GIL switch intervals.
    assert len(probes) >= 5
    assert max(probes) < heavy_time[0] / 4, (max(probes), heavy_time[0], len(probes))
