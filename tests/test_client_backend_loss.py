"""A client with resume off whose server dies mid-session fails promptly with UNAVAILABLE, sync and
async. (With resume on, the default, the session moves to another server: tests/test_fleet_resume.py.)"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier_client import AsyncClient, Client

HELLO = 9707
PROMPT_SECONDS = 10.0


def test_sync_send_fails_promptly_after_the_backend_died():
    with ProcessServer("--preload", "qwen3") as server, Client(server.target, resume=False) as client:
        stream = client.open("qwen3")
        replies = iter(stream)
        stream.send([HELLO])
        next(replies)
        server.kill()
        killed = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            while time.monotonic() - killed < PROMPT_SECONDS:
                stream.send([HELLO])
                time.sleep(0.01)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - killed < PROMPT_SECONDS
        with pytest.raises(grpc.RpcError):
            next(replies)


def test_async_client_reports_unavailable_after_the_backend_died():
    with ProcessServer("--preload", "qwen3") as server:

        async def run() -> tuple[grpc.StatusCode, str]:
            async with AsyncClient(server.target, timeout=60, resume=False) as client:
                stream = await client.open("qwen3")
                replies = stream.__aiter__()
                await stream.send([HELLO])
                await replies.__anext__()
                server.kill()
                try:
                    while True:
                        await stream.send([HELLO])
                        await asyncio.sleep(0.01)
                except grpc.aio.AioRpcError as exc:
                    return exc.code(), exc.details()

        code, details = asyncio.run(asyncio.wait_for(run(), PROMPT_SECONDS * 3))
        assert code == grpc.StatusCode.UNAVAILABLE, details
