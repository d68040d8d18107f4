"""Reply size: the server never sends more than it says, and its own clients accept that much."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from grpc_servers import ThreadServer
from parsetier.service import Limits
from parsetier_client import AsyncClient, Client

CHUNK = "word " * 700_000  # 3.5 MB of text in one step


def test_a_14_mb_final_reaches_the_python_clients(grpc_server):
    with Client(grpc_server.target, timeout=120) as client:
        result = client.parse_stream("qwen3", [CHUNK] * 4, include_reasoning=False)
    assert result.message.content == (CHUNK * 4).strip()  # the edge whitespace policy trims the end

    async def run():
        async with AsyncClient(grpc_server.target, timeout=120) as client:
            return await client.parse_stream("qwen3", [CHUNK] * 4)

    assert asyncio.run(run()).message.content == result.message.content


def test_a_reply_larger_than_the_server_sends_is_a_clear_status(registry):
    with (
        ThreadServer(registry, Limits(max_reply_bytes=1024 * 1024)) as server,
        Client(server.target, timeout=60) as client,
    ):
        with pytest.raises(grpc.RpcError) as info:
            client.parse_stream("qwen3", ["x" * 2_000_000])
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the reply would be" in info.value.details()
        with pytest.raises(grpc.RpcError) as info:
            client.parse_once("qwen3", text="x" * 2_000_000)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
