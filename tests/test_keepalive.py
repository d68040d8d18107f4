"""Keepalive end to end: the clients' default pings agree with the server's ping policy.

The server runs gRPC core's default policy: a ping at most every 5 minutes while no data flows,
none on a connection without calls, GOAWAY ``too_many_pings`` after repeated violations. A session
that stays quiet for a few seconds shows both sides of it on a real server: through a channel that
pings every second (the negative control), the server closes the connection and the session ends
with UNAVAILABLE "Too many pings"; through each Python client's default channel, the same quiet
session completes. The C++ client's counterpart is ``Keepalive.*`` in client/cpp/tests/client_test.cc
(tests/test_cpp_client.py), Go's ``TestDefaultKeepalive*`` in client/go (tests/test_go_client.py).
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier_client import AsyncClient, Client
from parsetier_client.security import KEEPALIVE_OPTIONS

HELLO = 9707
QUIET = 6.0
"""Seconds the session sends nothing: a 1 s pinger is GOAWAY'd after 3 or 4 pings."""
POLICY_MS = 300_000
"""The server's minimum interval between pings without data (gRPC core's default)."""
EAGER = (
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),  # gRPC core stops after 2 by default
)


@pytest.fixture(scope="module")
def server():
    with ProcessServer("--preload", "qwen3") as running:
        yield running


def quiet_session(client: Client) -> str:
    """One reply, QUIET seconds of nothing, one more step and the finish: "ok" or the status."""
    stream = client.open("qwen3")
    replies = iter(stream)
    try:
        stream.send([HELLO])
        next(replies)
        time.sleep(QUIET)
        stream.send([HELLO])
        stream.finish("stop")
        for _ in replies:
            pass
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    return "ok"


def test_default_keepalive_is_within_the_servers_policy():
    options = dict(KEEPALIVE_OPTIONS)
    assert options["grpc.keepalive_time_ms"] >= POLICY_MS
    assert options["grpc.keepalive_permit_without_calls"] == 0
    assert 0 < options["grpc.keepalive_timeout_ms"] <= 60_000


def test_eager_pings_get_goaway_on_a_quiet_session(server):
    channel = grpc.insecure_channel(server.target, options=EAGER)
    with Client(server.target, channel=channel, resume=False) as client:
        outcome = quiet_session(client)
    assert outcome.startswith("UNAVAILABLE") and "ping" in outcome.lower(), outcome


@pytest.mark.slow  # QUIET seconds asleep; the quick lane keeps the eager-ping GOAWAY
def test_sync_client_defaults_survive_the_same_quiet_session(server):
    with Client(server.target, resume=False) as client:
        assert quiet_session(client) == "ok"


@pytest.mark.slow  # QUIET seconds asleep, as the sync client's
def test_async_client_defaults_survive_the_same_quiet_session(server):
    async def run() -> None:
        async with AsyncClient(server.target, timeout=60, resume=False) as client:
            stream = await client.open("qwen3")
            replies = stream.__aiter__()
            await stream.send([HELLO])
            await replies.__anext__()
            await asyncio.sleep(QUIET)
            await stream.send([HELLO])
            await stream.finish("stop")
            async for _ in replies:
                pass
            assert stream.final.usage.completion_tokens == 2

    asyncio.run(asyncio.wait_for(run(), 60))
