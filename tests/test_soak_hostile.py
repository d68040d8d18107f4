"""A soak of misbehaving clients beside well-behaved ones (issue 37 item 5): slow readers, clients
that write and then neither read nor write, clients that vanish mid-stream, junk bytes on the
port and on the wire, and requests past the tool bounds, while ordinary sessions run and a probe
stream steps every 20 ms. Asserted: every ordinary session comes out exact, the probe gets every
reply with no gap of seconds, the stuck streams end with DEADLINE_EXCEEDED, the server's memory
stays bounded (not a few MB per stuck stream, as before its window and buffer budget), and it
still serves afterwards. Timings are asserted only as structure, generously: this runs on a loaded
2-core machine."""

from __future__ import annotations

import asyncio
import random
import socket
import time

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, open_message
from stuck_clients import STEP, StuckStream
from testkit.procfs import rss_bytes

pytestmark = pytest.mark.slow  # a soak: about a minute of both cores

Code = grpc.StatusCode
HELLO = 9707
STUCK = 30
"""Streams that write 10 messages, then neither read nor write: they must end DEADLINE_EXCEEDED."""
HOGS = 40
"""Streams that write as much as the server lets them (up to 1,000 messages of 5 KiB) and never
read: before the fixed window and the buffer budget each held ~4 MB of the server (40: ~160 MB).
Their writes are in flight when their status comes, so grpc's client reports it as INTERNAL
(grpc/grpc#36066): only the memory they cost is asserted."""
ORDINARY = 40
SLOW_READERS = 4
VANISHING = 20


async def _ordinary(target: str, count: int, results: list[str]) -> None:
    """``count`` sessions one after another: 20 one-token steps each, exact text expected."""
    async with AsyncClient(target, timeout=60) as client:
        for _ in range(count):
            result = await client.parse_stream("qwen3", [[HELLO]] * 20)
            results.append(result.message.content)


async def _slow_reader(target: str) -> int:
    """A stream that sends 6 steps of long tokens and reads a reply every 0.5 s: slow, but never
    idle for the server's timeout (2 s); it must get everything."""
    async with grpc.aio.insecure_channel(target) as channel:
        from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

        call = pb_grpc.ParserServiceStub(channel).Parse()
        await call.write(pb.ParseRequest(open=open_message("qwen3")))
        await call.initial_metadata()
        for _ in range(6):
            await call.write(STEP)
        await call.write(pb.ParseRequest(finish=pb.Finish()))
        await call.done_writing()
        replies = 0
        while (reply := await call.read()) is not grpc.aio.EOF:
            replies += 1
            if reply.HasField("final"):
                break
            await asyncio.sleep(0.5)
        return replies


async def _vanishing(target: str) -> None:
    """Open, send a few steps, read one reply, then drop the connection without a word."""
    channel = grpc.aio.insecure_channel(target)
    from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

    call = pb_grpc.ParserServiceStub(channel).Parse()
    await call.write(pb.ParseRequest(open=open_message("qwen3"), steps=[pb.Step(token_ids=[HELLO])]))
    await call.read()
    await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=[HELLO])] * 100))
    await channel.close(grace=None)


def _junk_bytes(port: int, rounds: int) -> None:
    """Random bytes, a half-sent HTTP/2 preface, and a preface followed by garbage frames."""
    rng = random.Random(37)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    for i in range(rounds):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            payload = [rng.randbytes(rng.randint(1, 4096)), preface[:10], preface + rng.randbytes(512)][i % 3]
            try:
                sock.sendall(payload)
                sock.settimeout(0.2)
                sock.recv(4096)
            except OSError:
                pass


async def _junk_messages(target: str, count: int) -> list[grpc.StatusCode]:
    """Undecodable bytes as a ParseOnce request: INVALID_ARGUMENT each time."""
    codes = []
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary("/parsetier.v1.ParserService/ParseOnce")
        rng = random.Random(7)
        for _ in range(count):
            try:
                await call(b"\xff\xff\xff" + rng.randbytes(64), timeout=10)
                codes.append(Code.OK)
            except grpc.aio.AioRpcError as exc:
                codes.append(exc.code())
    return codes


async def _too_many_tools(target: str) -> grpc.StatusCode:
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {}}} for i in range(5000)]
    async with AsyncClient(target, timeout=30) as client:
        try:
            await client.build_constraint("qwen3", tools=tools)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return Code.OK


async def _probe(target: str, stop: asyncio.Event) -> list[float]:
    """One Parse stream, a step every 20 ms until ``stop``: each reply's latency."""
    latencies = []
    async with grpc.aio.insecure_channel(target) as channel:
        from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

        call = pb_grpc.ParserServiceStub(channel).Parse()
        await call.write(pb.ParseRequest(open=open_message("qwen3")))
        await call.initial_metadata()
        while not stop.is_set():
            started = time.monotonic()
            await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=[HELLO])]))
            reply = await call.read()
            assert reply.deltas[0].content == "Hello"
            latencies.append(time.monotonic() - started)
            await asyncio.sleep(0.02)
        await call.write(pb.ParseRequest(finish=pb.Finish()))
        await call.done_writing()
        while await call.read() is not grpc.aio.EOF:
            pass
    return latencies


def test_misbehaving_clients_beside_ordinary_ones():
    args = ("--preload", "qwen3", "--idle-timeout", "2", "--max-loop-lag-ms", "0")
    with ProcessServer(*args) as server:
        pid = server.pids()[0]

        async def warm() -> None:
            await _ordinary(server.target, 5, [])

        asyncio.run(warm())
        baseline = rss_bytes(pid)

        async def soak():
            stop = asyncio.Event()
            probe = asyncio.create_task(_probe(server.target, stop))
            results: list[str] = []
            stuck = [StuckStream(server.target) for _ in range(STUCK)]
            hogs = [StuckStream(server.target, messages=1000) for _ in range(HOGS)]
            for stream in stuck + hogs:
                await stream.start()
            ordinary = [
                asyncio.create_task(_ordinary(server.target, ORDINARY // 4, results)) for _ in range(4)
            ]
            slow = [asyncio.create_task(_slow_reader(server.target)) for _ in range(SLOW_READERS)]
            for _ in range(VANISHING):
                await _vanishing(server.target)
            junk = asyncio.create_task(asyncio.to_thread(_junk_bytes, server.port, 30))
            junk_codes = await _junk_messages(server.target, 20)
            tools_code = await _too_many_tools(server.target)
            for stream in stuck + hogs:
                await stream.stalled(quiet=0.3)
            peak = rss_bytes(pid)
            await asyncio.gather(*ordinary)
            slow_replies = await asyncio.gather(*slow)
            await junk
            await asyncio.sleep(3)  # the idle timeout (2 s) and a sweep: the stuck streams end
            outcomes = [await stream.read_all() for stream in stuck]
            for stream in stuck + hogs:
                await stream.close()
            stop.set()
            latencies = await probe
            return results, slow_replies, junk_codes, tools_code, outcomes, latencies, peak

        results, slow_replies, junk_codes, tools_code, outcomes, latencies, peak = asyncio.run(soak())

        async def after() -> str:
            async with AsyncClient(server.target, timeout=30) as client:
                return (await client.parse_stream("qwen3", [[HELLO]] * 3)).message.content

        assert asyncio.run(after()) == "Hello" * 3  # the server still serves
        assert server.proc is not None and server.proc.poll() is None

    grown = (peak - baseline) / 2**20
    assert grown < 60, f"server grew {grown:.0f} MiB with {HOGS} streams that never read (was ~4 MiB each)"
    assert results == ["Hello" * 20] * ORDINARY  # no ordinary session lost or changed
    assert all(replies >= 7 for replies in slow_replies), slow_replies  # 6 steps + final, all read
    assert set(junk_codes) == {Code.INVALID_ARGUMENT}
    assert tools_code == Code.INVALID_ARGUMENT
    assert {code for _, code, _ in outcomes} == {Code.DEADLINE_EXCEEDED}, outcomes[:3]
    assert len(latencies) > 50 and max(latencies) < 3.0, (len(latencies), max(latencies, default=0))
    print(f"rss {baseline / 2**20:.0f} -> {peak / 2**20:.0f} MiB; probe max {max(latencies) * 1000:.0f} ms")
