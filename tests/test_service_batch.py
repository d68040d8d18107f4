"""ParseBatch against a real server on loopback: many sessions over one stream, one reply per
client message, each session's output identical to a Parse stream's, errors confined to their
session, and every limit of the stream and its sessions."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from grpc_servers import wait_for
from parsetier.service import Limits
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, Delta, StepBuilder, open_message, session_error
from service_samples import WEATHER_TOOLS

Code = grpc.StatusCode
HELLO = 9707
SESSIONS = 1000


def _output(i: int) -> str:
    return (
        f"<think>\nS{i}.\n</think>\n\nA{i * 7919 % 10007}."
        f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "C{i}"}}}}\n</tool_call>'
    )


def _options(i: int) -> dict:
    """Sessions differ in what they ask for, so events and deltas are both compared."""
    return {"tools": WEATHER_TOOLS, "request_id": f"r{i}", "output": ("deltas", "both", "events")[i % 3]}


def _steps(ids: list[int], i: int) -> list[list[int]]:
    """Session ``i``'s decode steps: 1 to 4 tokens each (speculative decoding emits several)."""
    size = 1 + i % 4
    return [ids[at : at + size] for at in range(0, len(ids), size)]


def _comparable(output: pb.SessionOutput | pb.ParseResponse) -> bytes:
    """What a session's reply carries, in a form both RPCs share (the key aside)."""
    return pb.ParseResponse(
        sequence=output.sequence,
        client_messages=output.client_messages,
        output_digest=output.output_digest,
        deltas=output.deltas,
        events=output.events,
        final=output.final if output.HasField("final") else None,
    ).SerializeToString(deterministic=True)


@pytest.mark.slow  # a scale run (1,000 sessions); the module's other tests keep ParseBatch quick
def test_1000_sessions_over_one_stream_equal_1000_parse_streams(grpc_server, encode):
    outputs = {i: encode(_output(i)) for i in range(SESSIONS)}

    async def batched() -> dict[int, list[bytes]]:
        got: dict[int, list[bytes]] = {i: [] for i in range(SESSIONS)}
        async with AsyncClient(grpc_server.target, timeout=300) as client, client.batch() as batch:
            for i in range(SESSIONS):
                batch.open(f"k{i}", "qwen3", **_options(i))
            assert await batch.step() == {}  # opens alone produce nothing, as on a Parse stream
            step = 0
            live = set(range(SESSIONS))
            while live:
                for i in list(live):
                    chunk = _steps(outputs[i], i)
                    if step < len(chunk):
                        batch.feed(f"k{i}", chunk[step])
                    else:
                        batch.finish(f"k{i}", "stop")
                        live.discard(i)
                results = await batch.step()
                for key, output in results.items():
                    assert session_error(output) is None, (key, output.status)
                    got[int(key[1:])].append(_comparable(output))
                step += 1
            assert grpc_server.handle.servicer.gate.active == 0  # every session ended and freed
        return got

    async def streamed() -> dict[int, list[bytes]]:
        got: dict[int, list[bytes]] = {}
        clients = [AsyncClient(grpc_server.target, timeout=300) for _ in range(4)]
        limit = asyncio.Semaphore(64)

        async def one(i: int) -> None:
            async with limit:
                open_ = open_message("qwen3", **_options(i))
                messages = [pb.ParseRequest(open=open_)]
                messages += [pb.ParseRequest(steps=[pb.Step(token_ids=c)]) for c in _steps(outputs[i], i)]
                messages.append(pb.ParseRequest(finish=pb.Finish(reason=pb.FINISH_REASON_STOP)))
                got[i] = [_comparable(r) async for r in clients[i % 4].parse(messages)]

        try:
            await asyncio.gather(*(one(i) for i in range(SESSIONS)))
        finally:
            await asyncio.gather(*(c.close() for c in clients))
        return got

    via_batch = asyncio.run(batched())
    via_parse = asyncio.run(streamed())
    assert all(via_batch[i][-1] for i in range(SESSIONS))
    different = [i for i in range(SESSIONS) if via_batch[i] != via_parse[i]]
    assert not different, f"{len(different)} sessions differ, e.g. {different[:5]}"


def test_one_reply_per_message_and_errors_stay_in_their_session(client, encode):
    """Bad token ids, unknown models, steps without an open, a repeated key and a cancel each end
    only their own session; the healthy one beside them is unaffected and the stream goes on."""
    ids = encode(_output(7))
    with client.batch() as batch:
        batch.open("good", "qwen3", **_options(0))
        batch.open("bad-id", "qwen3")
        batch.open("no-model", "no-such-model")
        batch.feed("no-open", [HELLO])
        batch.open("cancelled", "qwen3")
        first = batch.step()
        assert session_error(first["no-model"])[0] == Code.NOT_FOUND
        assert session_error(first["no-open"])[0] == Code.FAILED_PRECONDITION
        assert set(first) == {"no-model", "no-open"}  # opens alone produce nothing

        batch.feed("bad-id", [HELLO, 10_000_000])
        batch.cancel("cancelled")
        batch.feed("good", ids[:5])
        second = batch.step()
        code, message = session_error(second["bad-id"])
        assert code == Code.INVALID_ARGUMENT and "10000000" in message
        assert session_error(second["cancelled"])[0] == Code.CANCELLED
        good = [second["good"]]

        batch.open("bad-id", "qwen3")  # an ended session's key can be opened again
        batch.feed("bad-id", [HELLO])
        batch.feed("good", ids[5:])
        batch.finish("good", "stop")
        fourth = batch.step()
        assert session_error(fourth["bad-id"]) is None and fourth["bad-id"].deltas[0].content == "Hello"
        good.append(fourth["good"])
        batch.cancel("bad-id")
        assert session_error(batch.step()["bad-id"])[0] == Code.CANCELLED

    # A key repeated in one message ends that session (its first entry's output stays valid).
    repeated = pb.ParseBatchRequest(
        sessions=[
            pb.SessionInput(key="twice", open=open_message("qwen3"), steps=[pb.Step(token_ids=[HELLO])]),
            pb.SessionInput(key="twice", steps=[pb.Step(token_ids=[HELLO])]),
        ]
    )
    (reply,) = client.stub.ParseBatch(iter([repeated]))
    assert [o.key for o in reply.sessions] == ["twice", "twice"]
    assert reply.sessions[0].deltas[0].content == "Hello"
    assert session_error(reply.sessions[1])[0] == Code.INVALID_ARGUMENT

    expected = client.parse_stream("qwen3", [ids[:5], ids[5:]], **_options(0))
    assert good[-1].final == expected.final.proto
    assert [Delta.of(d) for out in good for d in out.deltas] == expected.deltas


LIMITS = Limits(
    max_message_bytes=64 * 1024,
    max_steps_per_message=2,
    max_tokens_per_session=5,
    max_text_bytes_per_session=8,
    max_sessions=6,
    max_sessions_per_stream=3,
    max_items_per_message=4,
    idle_timeout=0.5,
)


def test_per_session_limits_end_only_their_session(small_client):
    with small_client.batch() as batch:
        for key in ("steps", "tokens", "text"):
            batch.open(key, "qwen3")
        batch.step()
        batch.feed("steps", [HELLO], [HELLO], [HELLO])  # 3 steps in one entry; the limit is 2
        batch.feed("tokens", [HELLO] * 6)
        batch.feed("text", "nine byte")
        results = batch.step()
        for key in ("steps", "tokens", "text"):
            assert session_error(results[key])[0] == Code.RESOURCE_EXHAUSTED, key
        batch.open("ok", "qwen3")
        batch.feed("ok", [HELLO] * 2)
        batch.finish("ok")
        assert batch.step()["ok"].final.usage.completion_tokens == 2


def test_sessions_per_stream_refuses_the_open_only(small_client, small_server):
    with small_client.batch() as batch:
        for key in ("a", "b", "c", "d"):
            batch.open(key, "qwen3")
        results = batch.step()
        code, message = session_error(results["d"])
        assert code == Code.RESOURCE_EXHAUSTED and "3" in message
        assert set(results) == {"d"}
        batch.finish("a")
        batch.open("d", "qwen3")  # "a" ends in this step's first entry, which frees a place
        results = batch.step()
        assert results["a"].HasField("final") and "d" not in results
    wait_for(lambda: small_server.handle.servicer.gate.active == 0)


def test_items_per_message_and_empty_keys_end_the_stream(small_client, small_server):
    batch = small_client.batch()
    batch.open("a", "qwen3")
    batch.step()
    for key in "vwxyz":
        batch.feed(key, [HELLO])
    batch.send()
    with pytest.raises(grpc.RpcError) as info:
        batch.receive()
    assert info.value.code() == Code.RESOURCE_EXHAUSTED and "4" in info.value.details()
    wait_for(lambda: small_server.handle.servicer.gate.active == 0)  # "a" was freed with the stream

    batch = small_client.batch()
    batch.feed("", [HELLO])
    batch.send()
    with pytest.raises(grpc.RpcError) as info:
        batch.receive()
    assert info.value.code() == Code.INVALID_ARGUMENT


def test_server_session_limit_counts_batch_sessions(small_server, small_client):
    """``max_sessions`` holds across RPCs: Parse streams and ParseBatch sessions share it."""

    async def run():
        async with AsyncClient(small_server.target, timeout=30) as client:
            streams = [await client.open("qwen3") for _ in range(4)]
            async with client.batch() as batch:
                for key in ("a", "b", "c"):
                    batch.open(key, "qwen3")
                results = await batch.step()
                assert session_error(results["c"])[0] == Code.RESOURCE_EXHAUSTED
                assert set(results) == {"c"}
                for stream in streams:
                    await stream.finish()
                    [m async for m in stream]
                batch.open("c", "qwen3")
                batch.feed("c", [HELLO])
                assert session_error((await batch.step())["c"]) is None
                for key in ("a", "b", "c"):
                    batch.cancel(key)
                await batch.step()

    asyncio.run(run())


def test_message_size_limit(small_client):
    with small_client.batch() as batch:
        batch.open("a", "qwen3")
        batch.feed("a", "x" * 100_000)
        batch.send()
        with pytest.raises(grpc.RpcError) as info:
            batch.receive()
        assert info.value.code() == Code.RESOURCE_EXHAUSTED


def test_idle_stream_with_open_sessions_is_ended(small_server):
    async def run():
        async with AsyncClient(small_server.target, timeout=30) as client:
            idle_empty = client.batch()
            await idle_empty.step()  # no session open: silence ends the stream with OK
            await asyncio.sleep(1.0)
            await idle_empty.close()

            batch = client.batch()
            batch.open("a", "qwen3")
            await batch.step()
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await batch.receive()
            return info.value.code(), time.monotonic() - started

    code, waited = asyncio.run(run())
    assert code == Code.DEADLINE_EXCEEDED and waited < 5
    wait_for(lambda: small_server.handle.servicer.gate.active == 0)


def test_closing_or_cancelling_the_stream_frees_its_sessions(small_server, small_client):
    batch = small_client.batch()
    for key in ("a", "b"):
        batch.open(key, "qwen3")
    batch.feed("a", [HELLO])
    batch.step()
    assert small_server.handle.servicer.gate.active == 2
    batch.close()
    wait_for(lambda: small_server.handle.servicer.gate.active == 0)

    batch = small_client.batch()
    batch.open("a", "qwen3")
    batch.step()
    assert small_server.handle.servicer.gate.active == 1
    batch.cancel_stream()
    wait_for(lambda: small_server.handle.servicer.gate.active == 0)


def test_step_builder_merges_a_sessions_parts():
    builder = StepBuilder()
    builder.open("a", "qwen3")
    builder.feed("a", [1, 2], [3])
    builder.finish("a", "length")
    builder.feed("b", "text")
    message = builder.take()
    assert [e.key for e in message.sessions] == ["a", "b"]
    entry = message.sessions[0]
    assert entry.open.model == "qwen3" and [list(s.token_ids) for s in entry.steps] == [[1, 2], [3]]
    assert entry.finish.reason == pb.FINISH_REASON_LENGTH and message.sessions[1].steps[0].text == "text"
    assert not builder.take().sessions
