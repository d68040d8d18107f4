"""``parsetier serve --workers 2``: two processes on one port, connections spread over them, one
SIGTERM drains both, and every log line names its worker."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from grpc_servers import ProcessServer
from parsetier_client import AsyncClient, Client
from service_samples import EXPECTED_CALLS, REASONING_AND_TWO_CALLS, WEATHER_TOOLS, join

pytestmark = pytest.mark.slow  # forked worker processes under load

CONNECTIONS = 32
"""Connections tried before every worker must have been reached: the kernel hashes each new
connection to a worker, so two workers are both reached by 32 with probability 1 - 2**-31."""


def _own_connection(target: str) -> grpc.Channel:
    """A channel with its own TCP connection (grpc shares subchannels between equal channels)."""
    return grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


def test_two_workers_share_the_port_and_drain_on_one_sigterm(encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    with ProcessServer("--workers", "2", "--preload", "qwen3", "--grace", "20") as server:
        ready = server.wait_for_log("workers listening", timeout=60)
        assert ready["workers"] == 2 and len(ready["pids"]) == 2
        listening = [r for r in server.logs if r.get("msg") == "listening"]
        assert sorted(r["worker"] for r in listening) == [0, 1]
        assert {r["port"] for r in listening} == {server.port}

        reached: set[int] = set()
        for n in range(CONNECTIONS):
            with _own_connection(server.target) as channel:
                health = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=10
                )
                assert health.status == health_pb2.HealthCheckResponse.SERVING
                Client(server.target, channel=channel, timeout=30).parse_once(
                    "qwen3", [9707], request_id=f"connection-{n}"
                )
            reached.add(server.worker_of(f"connection-{n}"))
            if reached == {0, 1}:
                break
        assert reached == {0, 1}, f"{CONNECTIONS} connections all reached worker {reached}"

        async def drain_with_open_sessions() -> list:
            clients = [
                AsyncClient(server.target, channel=_aio_own_connection(server.target), resume=False)
                for _ in range(4)  # resume off: they must finish within the grace, not be handed off
            ]
            try:
                streams = [
                    await c.open("qwen3", tools=WEATHER_TOOLS, request_id=f"open-{i}")
                    for i, c in enumerate(clients)
                ]
                for stream in streams:
                    await stream.send(ids[: len(ids) // 2])
                server.terminate()  # one SIGTERM, to the supervisor
                await asyncio.to_thread(_wait_for_count, server, "draining", 2)
                results = []
                for stream in streams:
                    await stream.send(ids[len(ids) // 2 :])
                    await stream.finish("stop")
                    results.append(([d async for d in stream.deltas()], stream.final))
                return results
            finally:
                for c in clients:
                    await c.close()

        results = asyncio.run(drain_with_open_sessions())
        for deltas, final in results:
            assert join(deltas).tool_calls() == EXPECTED_CALLS and final.finish_reason == 4
        assert server.wait(30) == 0
        stopped = [r for r in server.logs if r.get("msg") == "stopped"]
        assert sorted(str(r["worker"]) for r in stopped) == ["0", "1", "supervisor"]
        assert all(r["clean"] for r in stopped)
        assert all("worker" in r for r in server.logs if "raw" not in r)


def _aio_own_connection(target: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])


def _wait_for_count(server: ProcessServer, msg: str, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(r.get("msg") == msg for r in list(server.logs)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} {msg!r} lines: {server.logs}"
        time.sleep(0.02)
