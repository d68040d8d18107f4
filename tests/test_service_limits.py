"""Limits: a client past one gets RESOURCE_EXHAUSTED (idling: DEADLINE_EXCEEDED) on its own stream."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import grpc
import pytest

from parsetier.service import Limits
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, open_message

Code = grpc.StatusCode
LIMITS = Limits(
    max_message_bytes=64 * 1024,
    max_steps_per_message=4,
    max_tokens_per_session=50,
    max_sessions=2,
    idle_timeout=0.5,
)


def _code(fn) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value.code()


def test_steps_per_message(small_client):
    ok = small_client.parse_stream("qwen3", [[9707]] * 4, steps_per_message=4)
    assert ok.usage.completion_tokens == 4
    code = _code(lambda: small_client.parse_stream("qwen3", [[9707]] * 5, steps_per_message=5))
    assert code == Code.RESOURCE_EXHAUSTED


def test_tokens_per_session(small_client):
    assert small_client.parse_stream("qwen3", [[9707] * 50]).usage.completion_tokens == 50
    assert (
        _code(lambda: small_client.parse_stream("qwen3", [[9707] * 40, [9707] * 11]))
        == Code.RESOURCE_EXHAUSTED
    )
    assert _code(lambda: small_client.parse_once("qwen3", [9707] * 51)) == Code.RESOURCE_EXHAUSTED


def test_message_size(small_client):
    assert _code(lambda: small_client.parse_once("qwen3", text="x" * 100_000)) == Code.RESOURCE_EXHAUSTED


def test_idle_timeout(small_server):
    async def run():
        async with AsyncClient(small_server.target, timeout=30) as client:
            stream = await client.open("qwen3")
            await stream.send([9707])
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as info:
                async for _ in stream:
                    pass
            return info.value.code(), time.monotonic() - started

    code, waited = asyncio.run(run())
    assert code == Code.DEADLINE_EXCEEDED
    assert 0.4 < waited < 5  # never before the timeout (the read began just before ``started``)


def test_idle_timeout_is_per_read(small_server):
    """Messages closer together than the timeout keep a stream alive for longer than it."""

    async def run():
        async with AsyncClient(small_server.target, timeout=30) as client:
            stream = await client.open("qwen3")
            started = time.monotonic()
            for _ in range(5):
                await asyncio.sleep(0.3)
                await stream.send([9707])
            await stream.finish()
            replies = [reply async for reply in stream]
            return replies[-1].final.usage.completion_tokens, time.monotonic() - started

    tokens, lived = asyncio.run(run())
    assert tokens == 5 and lived > 1.0  # twice the timeout, and never ended


def test_concurrent_sessions(registry):
    """Two sessions open: a third is refused; once one ends, a new one is accepted. Its own server
    has the same limits but a long idle timeout: under load, the module's 0.5 s ended the second
    session while it waited for the first to finish (the limit tested here is the count)."""
    from grpc_servers import ThreadServer

    async def run(target: str):
        async with AsyncClient(target, timeout=30) as client:
            first = await client.open("qwen3")
            second = await client.open("qwen3")
            await first.send([9707])
            await second.send([9707])
            await asyncio.sleep(0.1)  # both streams are open on the server
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.parse_stream("qwen3", [[9707]])
            assert info.value.code() == Code.RESOURCE_EXHAUSTED
            await first.finish()
            assert [m async for m in first][-1].final.usage.completion_tokens == 1
            third = await client.parse_stream("qwen3", [[9707]])
            await second.finish()
            assert [m async for m in second][-1].final.usage.completion_tokens == 1
            return third

    with ThreadServer(registry, dataclasses.replace(LIMITS, idle_timeout=60.0)) as server:
        assert asyncio.run(run(server.target)).final.usage.completion_tokens == 1


def test_refused_session_has_no_effect_on_counts(small_client):
    for _ in range(5):
        assert _code(lambda: small_client.parse_stream("nope", [[1]])) == Code.NOT_FOUND
    assert small_client.parse_stream("qwen3", [[9707]]).usage.completion_tokens == 1


def test_unknown_enum_values_are_invalid(small_client):
    request = pb.ParseOnceRequest(open=open_message("qwen3"))
    request.open.output = 99
    assert _code(lambda: small_client.stub.ParseOnce(request)) == Code.INVALID_ARGUMENT
    request = pb.ParseOnceRequest(open=open_message("qwen3"))
    request.open.tool_choice.mode = 42
    assert _code(lambda: small_client.stub.ParseOnce(request)) == Code.INVALID_ARGUMENT
