"""Multiplexed sessions (``Client(target, multiplex=True)``, ``AsyncClient`` alike): the ``Parse``
session API over one shared ``ParseBatch`` stream. Each session's replies are exactly its own
``Parse`` stream's (client_messages included: the session's own count); sends coalesce into one
message per flush; a session's error, cancel or deadline stays in that session; the wire dialects,
logprobs and completion sessions come out as on ``Parse``. (Resume across breaks: the scenario
corpus, ``tests/test_resume_scenarios.py::test_scenario_multiplexed``.)"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading

import grpc
import pytest

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, Client, logprob_step
from parsetier_client.mux import HIGH_WATER, AsyncMuxStream, MuxStream
from service_samples import REASONING_AND_TWO_CALLS, WEATHER_TOOLS

OUT_OF_VOCABULARY = 10_000_000


@pytest.fixture(scope="module")
def ids(encode) -> list[int]:
    return encode(REASONING_AND_TWO_CALLS)


def _sessions(n: int) -> list[dict]:
    return [{"tools": WEATHER_TOOLS, "request_id": f"mux-{i}"} for i in range(n)]


def _lockstep(client: Client, ids: list[int], n: int) -> tuple[list, int]:
    """``n`` sessions stepped together from one thread, one token each per step (an engine's
    decode loop), then each one's replies."""
    streams = [client.open("qwen3", **options) for options in _sessions(n)]
    for tid in ids:
        for stream in streams:
            stream.send([tid])
    for stream in streams:
        stream.finish("stop", 151645)
    return [list(stream) for stream in streams], len(ids) + 2


def test_sessions_get_their_parse_streams_replies_and_sends_coalesce(grpc_server, client, ids):
    want, _ = _lockstep(client, ids, 3)
    with Client(grpc_server.target, timeout=60, multiplex=True, flush_interval=0.05) as mux:
        got, messages_per_session = _lockstep(mux, ids, 3)
        assert mux.multiplexer is not None
        sent = mux.multiplexer.core.messages_sent
    assert got == want  # every reply, byte for byte
    # Three sessions' messages rode far fewer ParseBatch messages than the 3 Parse streams'.
    assert sent <= messages_per_session + 2, sent


def test_async_sessions_in_their_own_tasks(grpc_server, ids):
    async def run(multiplex: bool) -> tuple[list, int]:
        async with AsyncClient(grpc_server.target, timeout=60, multiplex=multiplex) as client:

            async def one(options: dict) -> list:
                stream = await client.open("qwen3", **options)
                assert isinstance(stream, AsyncMuxStream) == multiplex

                async def send() -> None:
                    for tid in ids:
                        await stream.send([tid])
                    await stream.finish("stop", 151645)

                sender = asyncio.create_task(send())
                replies = [reply async for reply in stream]
                await sender
                assert stream.final is not None and str(stream.final.finish_reason) == "tool_calls"
                return replies

            results = await asyncio.gather(*(one(options) for options in _sessions(40)))
            sent = client.multiplexer.core.messages_sent if client.multiplexer is not None else 0
            return results, sent

    want, _ = asyncio.run(run(False))
    got, sent = asyncio.run(run(True))
    assert got == want
    total = 40 * (len(ids) + 2)
    assert sent < total / 4, f"{sent} ParseBatch messages for {total} session messages"


def test_a_sessions_error_cancel_and_deadline_stay_in_that_session(grpc_server, ids):
    with Client(grpc_server.target, timeout=2, multiplex=True) as client:
        good, bad, dropped, idle = (client.open("qwen3", **options) for options in _sessions(4))
        assert isinstance(good, MuxStream)
        for tid in ids[:5]:
            for stream in (good, bad, dropped):
                stream.send([tid])
        bad.send([OUT_OF_VOCABULARY])
        dropped.cancel()
        for tid in ids[5:]:
            good.send([tid])
        good.finish("stop", 151645)
        with pytest.raises(grpc.RpcError) as error:
            list(bad)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as error:
            list(dropped)
        assert error.value.code() == grpc.StatusCode.CANCELLED
        with pytest.raises(grpc.RpcError) as error:
            list(idle)  # never finished: the client's timeout ends it
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert len(list(good.deltas())) > 10 and good.final is not None
        assert str(good.final.finish_reason) == "tool_calls"

    async def run() -> None:
        async with AsyncClient(grpc_server.target, timeout=2, multiplex=True) as client:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await client.open("no-such-model")
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
            bad, dropped, idle = [await client.open("qwen3") for _ in range(3)]
            await bad.send([OUT_OF_VOCABULARY])
            dropped.cancel()
            with pytest.raises(grpc.aio.AioRpcError) as error:
                [reply async for reply in bad]
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            with pytest.raises(asyncio.CancelledError):
                [reply async for reply in dropped]
            with pytest.raises(grpc.aio.AioRpcError) as error:
                [reply async for reply in idle]
            assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            result = await client.parse_stream("qwen3", [[tid] for tid in ids], tools=WEATHER_TOOLS)
            assert str(result.final.finish_reason) == "tool_calls"

    asyncio.run(run())


WIRES = [
    {"dialect": "openai_chat", "response_id": "chatcmpl-mux", "stream": True, "include_usage": True},
    {"dialect": "openai_chat", "response_id": "chatcmpl-mux", "stream": False},
    {"dialect": "openai_completions", "response_id": "cmpl-mux", "stream": True},
    {"dialect": "anthropic_messages", "response_id": "msg_mux", "stream": True},
    {"dialect": "anthropic_messages", "response_id": "msg_mux", "stream": False},
    {"dialect": "openai_responses", "response_id": "resp_mux", "stream": True},
    {"dialect": "openai_responses", "response_id": "resp_mux", "stream": False},
]


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: f"{w['dialect']}-{'stream' if w['stream'] else 'body'}")
def test_wire_dialects_give_the_parse_streams_bytes(grpc_server, client, ids, wire):
    wire = {**wire, "model": "served", "created": 1_700_000_000, "prompt_tokens": 7}
    completion = wire["dialect"] == "openai_completions"
    options = {"wire": wire, "output": "final", "request_id": "mux-wire"}
    options |= {"completion": True} if completion else {"tools": WEATHER_TOOLS}

    def run(c: Client) -> tuple[bytes, bytes]:
        stream = c.open("qwen3", **options)
        for tid in ids:
            stream.send([tid])
        stream.finish("stop", 151645)
        whole = b"".join(stream.wire())
        failing = c.open("qwen3", **options)  # an error ends it: its bytes say so in the dialect
        failing.send(ids[:3])
        failing.send([OUT_OF_VOCABULARY])
        pieces = []
        with pytest.raises(grpc.RpcError):
            pieces.extend(failing.wire())
        return whole, b"".join(pieces)

    want = run(client)
    with Client(grpc_server.target, timeout=60, multiplex=True) as mux:
        got = run(mux)
    assert got == want and want[0] and want[1]


def test_logprobs_and_completion_sessions_as_on_parse(grpc_server, client, ids):
    rng = random.Random(7)
    steps = [logprob_step([tid], [-rng.random()], [{tid: -0.1, (tid + 1) % 1000: -2.0}]) for tid in ids[:20]]
    options = {"completion": True, "stop": ["weather"], "return_token_ids": True, "request_id": "mux-lp"}

    def run(c: Client) -> list:
        stream = c.open("qwen3", **options)
        for step in steps:
            stream.send(step)
        stream.finish("length")
        return list(stream)

    want = run(client)
    with Client(grpc_server.target, timeout=60, multiplex=True) as mux:
        got = run(mux)
    assert got == want
    assert any(d.logprobs for reply in got for d in reply.deltas)

    async def arun() -> list:
        async with AsyncClient(grpc_server.target, timeout=60, multiplex=True) as c:
            stream = await c.open("qwen3", **options)
            for step in steps:
                await stream.send(step)
            await stream.finish("length")
            return [reply async for reply in stream]

    assert asyncio.run(arun()) == want


def test_the_session_api_is_parses(grpc_server):
    """What a program calls on a session is there on the multiplexed one too."""
    from parsetier_client.aio import AsyncParseStream
    from parsetier_client.sync import ParseStream

    public = {"send", "finish", "cancel", "deltas", "wire", "final", "resumes"}
    for plain, mux in ((ParseStream, MuxStream), (AsyncParseStream, AsyncMuxStream)):
        assert all(hasattr(plain, name) or name in ("final", "resumes") for name in public)
        assert all(hasattr(mux, name) or name in ("final", "resumes") for name in public)
    with Client(grpc_server.target, multiplex=True) as client:
        stream = client.open("qwen3")
        assert stream.final is None and stream.resumes == 0
        stream.finish("stop")
        replies = list(stream)
        assert [type(reply) for reply in replies] == [pb.ParseResponse]
        assert replies[0].HasField("final") and stream.final is not None


@pytest.mark.slow  # a server process of its own, killed
def test_with_resume_off_a_broken_stream_ends_every_session_on_it(ids):
    from grpc_servers import ProcessServer

    server = ProcessServer("--preload", "qwen3").start()
    with server, Client(server.target, timeout=60, resume=False, multiplex=True) as client:
        streams = [client.open("qwen3", **options) for options in _sessions(3)]
        for stream in streams:
            stream.send(ids[:4])
        first = [next(iter(stream)) for stream in streams]  # each answered: the stream is up
        assert all(reply.deltas for reply in first)
        server.kill()
        for stream in streams:
            with pytest.raises(grpc.RpcError) as error:
                list(stream)
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.slow  # a server process of its own, stopped
def test_a_blocking_sessions_sends_wait_while_the_stream_cannot_write(ids):
    """Back-pressure, as the asyncio client's: once ``HIGH_WATER`` flushed messages are unwritten
    (the server stopped reading: its 64 KiB stream window is full), ``send`` waits; when the
    server reads again, the sends go on and every message is answered."""
    from grpc_servers import ProcessServer

    step = (ids * (1 + 1000 // len(ids)))[:1000]  # ~3 KB a message: the window holds a few dozen
    sends = 3 * HIGH_WATER
    server = ProcessServer("--preload", "qwen3").start()
    with server, Client(server.target, timeout=120, multiplex=True) as client:
        stream = client.open("qwen3", completion=True)
        stream.send(step)
        assert next(iter(stream)).deltas  # the stream is up
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)
        sent = [1]

        def flood() -> None:
            for _ in range(sends):
                stream.send(step)
                sent[0] += 1

        sender = threading.Thread(target=flood, daemon=True)
        try:
            sender.start()
            sender.join(5)
            waiting, unwritten = sender.is_alive(), client.multiplexer._unwritten
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert waiting, f"all {sends} sends returned while the server read nothing"
        assert HIGH_WATER <= unwritten <= HIGH_WATER + 1 and sent[0] < sends, (unwritten, sent[0])
        sender.join(60)
        assert not sender.is_alive() and sent[0] == sends + 1
        stream.finish("length")
        replies = list(stream)
    assert replies[-1].final.usage.completion_tokens == len(step) * (sends + 1)


def test_with_the_bound_0_sends_wait_while_a_message_is_unanswered(grpc_server, ids, monkeypatch):
    """What the sessions send while a message is unanswered goes out together at its reply (or
    ``HOLD`` after it went out; long here, so the reply is what releases it), not one message per
    wake-up of the loop."""
    from parsetier_client import mux

    monkeypatch.setattr(mux, "HOLD", 30.0)

    async def run() -> None:
        async with AsyncClient(grpc_server.target, timeout=60, multiplex=True) as client:
            first, second, third = [await client.open("qwen3", completion=True) for _ in range(3)]
            assert client.multiplexer is not None
            core = client.multiplexer.core
            sent = core.messages_sent
            await first.send(ids[:1])
            await asyncio.sleep(0)  # the loop's next turn: its message goes out
            assert (core.messages_sent, core.in_flight) == (sent + 1, 1)
            await second.send(ids[:1])
            await asyncio.sleep(0)
            await third.send(ids[:1])
            await asyncio.sleep(0)
            assert core.messages_sent == sent + 1  # held while the first is unanswered
            for stream in (first, second, third):
                async for reply in stream:
                    assert reply.deltas
                    break
            assert core.messages_sent == sent + 2  # the second and the third in one message

    asyncio.run(run())
