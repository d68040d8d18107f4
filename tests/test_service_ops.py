"""Operations: health checking, reflection, SIGTERM drain and the session log lines."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from grpc_servers import ProcessServer
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, Client
from service_samples import EXPECTED_CALLS, REASONING_AND_TWO_CALLS, WEATHER_TOOLS, join

SERVICE = "parsetier.v1.ParserService"


def _health(target: str, service: str = "") -> int:
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


def test_health_serving(grpc_server):
    assert _health(grpc_server.target) == health_pb2.HealthCheckResponse.SERVING
    assert _health(grpc_server.target, SERVICE) == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_and_describes_the_service(grpc_server):
    with grpc.insecure_channel(grpc_server.target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
        ]
        listed, described = list(stub.ServerReflectionInfo(iter(requests), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in described.file_descriptor_response.file_descriptor_proto
    ]
    (proto,) = [f for f in files if f.package == "parsetier.v1"]
    (service,) = proto.service
    served = pb.DESCRIPTOR.services_by_name["ParserService"].methods
    assert [m.name for m in service.method] == [m.name for m in served]


@pytest.fixture
def process_server():
    with ProcessServer("--grace", "20", "--preload", "qwen3") as server:
        yield server


def test_sigterm_drains_an_open_session(process_server, encode):
    """SIGTERM: health NOT_SERVING, new streams UNAVAILABLE, the open session completes, exit 0."""
    server = process_server
    ids = encode(REASONING_AND_TWO_CALLS)
    half = len(ids) // 2

    async def run():
        async with AsyncClient(server.target, timeout=30, resume=False) as client:
            stream = await client.open("qwen3", tools=WEATHER_TOOLS, request_id="draining")
            for tid in ids[:half]:
                await stream.send([tid])
            signalled = time.monotonic()
            server.terminate()
            await asyncio.to_thread(server.wait_for_log, "draining")

            assert _health(server.target) == health_pb2.HealthCheckResponse.NOT_SERVING
            sync_client = Client(server.target, timeout=10, resume=False)
            with sync_client, pytest.raises(grpc.RpcError) as refused:
                sync_client.parse_stream("qwen3", [[9707]])
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            with pytest.raises(grpc.aio.AioRpcError) as refused_async:
                await client.parse_stream("qwen3", [[9707]])
            assert refused_async.value.code() == grpc.StatusCode.UNAVAILABLE

            for tid in ids[half:]:
                await stream.send([tid])
            await stream.finish("stop")
            deltas = [d async for d in stream.deltas()]
            return signalled, deltas, stream.final

    signalled, deltas, final = asyncio.run(run())
    assert join(deltas).tool_calls() == EXPECTED_CALLS
    assert final.finish_reason == 4  # FINISH_REASON_TOOL_CALLS
    assert server.wait(15) == 0
    assert time.monotonic() - signalled < 15, "the server waited out the grace instead of exiting"

    ends = [r for r in server.logs if r.get("msg") == "session_end"]
    drained = next(r for r in ends if r.get("request_id") == "draining")
    assert drained["outcome"] == "OK"
    assert drained["model"] == "qwen3"
    assert drained["tokens"] == len(ids)
    assert drained["deltas"] == len(deltas)
    assert drained["finish_reason"] == "tool_calls"
    assert drained["duration_ms"] > 0
    assert sum(r["outcome"] == "UNAVAILABLE" for r in ends) == 2
    assert next(r for r in server.logs if r.get("msg") == "stopped")["clean"] is True


def test_grace_expiry_cuts_a_stalled_session():
    with ProcessServer("--grace", "1", "--preload", "none") as server:

        async def run():
            async with AsyncClient(server.target, timeout=30, resume=False) as client:
                stream = await client.open("qwen3")
                await stream.send([9707])
                signalled = time.monotonic()
                server.terminate()
                with pytest.raises(grpc.aio.AioRpcError):
                    async for _ in stream:
                        pass
                return signalled

        signalled = asyncio.run(run())
        assert server.wait(15) == 1  # not clean: a session was cut
        assert 0.9 < time.monotonic() - signalled < 10
        assert next(r for r in server.logs if r.get("msg") == "stopped")["cut_sessions"] == 1
