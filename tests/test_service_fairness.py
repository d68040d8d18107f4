"""One client's large message must not stall the other streams or the health check."""

from __future__ import annotations

import statistics
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from grpc_servers import ProcessServer
from parsetier_client import Client

HEAVY_IDS = 500_000
"""One message of this many ordinary ids (1 MB, inside every default limit) takes seconds."""


def test_a_large_message_does_not_stall_other_calls():
    """Against a server process of its own: the stalls measured are the server's, not those of
    this test process (which holds every model and many objects for the collector to walk)."""
    with ProcessServer("--preload", "qwen3") as server:
        server.wait_for_log("models loaded", timeout=120)
        _check_fairness(server)


def _check_fairness(grpc_server) -> None:
    heavy_time: list[float] = []

    def heavy() -> None:
        with Client(grpc_server.target, timeout=300) as client:
            started = time.monotonic()
            result = client.parse_stream("qwen3", [[3409] * HEAVY_IDS], steps_per_message=1)
            heavy_time.append(time.monotonic() - started)
            assert result.final.usage.completion_tokens == HEAVY_IDS

    with Client(grpc_server.target, timeout=60) as client:  # first use of the model, untimed
        client.parse_stream("qwen3", [[3409] * 9000])
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
    # waits a few GIL switch intervals (plus what a shared, loaded machine adds now and then).
    assert len(probes) >= 5
    assert max(probes) < heavy_time[0] / 2, (max(probes), heavy_time[0], len(probes))
    assert statistics.median(probes) < heavy_time[0] / 20, (probes, heavy_time[0])
