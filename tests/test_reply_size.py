"""Reply size: the server never sends more than it says, its own clients accept that much, and a
reply too large for one message arrives in parts that the clients join, so nothing is lost."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from grpc_servers import ProcessServer, ThreadServer
from parsetier.service import Limits
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client import AsyncClient, Client, open_message
from parsetier_client.parts import Joiner, PartsError

CHUNK = "word " * 700_000  # 3.5 MB of text in one step
LIMIT = 256 * 1024
"""A small --max-reply-bytes: a 1 MB output's replies are several times larger."""
TEXT = "".join(f"line {i} of a long answer\n" for i in range(40_000))  # about 1 MB
HELLO = 9707


def test_a_14_mb_final_reaches_the_python_clients(grpc_server):
    with Client(grpc_server.target, timeout=120) as client:
        result = client.parse_stream("qwen3", [CHUNK] * 4, include_reasoning=False)
    assert result.message.content == (CHUNK * 4).strip()  # the edge whitespace policy trims the end

    async def run():
        async with AsyncClient(grpc_server.target, timeout=120) as client:
            return await client.parse_stream("qwen3", [CHUNK] * 4)

    assert asyncio.run(run()).message.content == result.message.content


def _raw_replies(target: str, messages: list[pb.ParseRequest]) -> list[pb.ParseResponse]:
    """What the server actually sends, unjoined (a plain stub, grpc's default receive limit)."""
    with grpc.insecure_channel(target) as channel:
        return list(pb_grpc.ParserServiceStub(channel).Parse(iter(messages), timeout=60))


def test_a_reply_past_the_limit_is_sent_in_parts_and_the_clients_join_them(registry, grpc_server):
    messages = [  # framed as the clients' streams send them: Open alone first
        pb.ParseRequest(open=open_message("qwen3", request_id="big")),
        pb.ParseRequest(steps=[pb.Step(text=TEXT)]),
        pb.ParseRequest(steps=[pb.Step(text=TEXT)], finish=pb.Finish()),
    ]
    whole = _raw_replies(grpc_server.target, messages)  # the default limit: sent whole
    assert [m.HasField("part") for m in whole] == [False, False]
    with ThreadServer(registry, Limits(max_reply_bytes=LIMIT)) as server:
        raw = _raw_replies(server.target, messages)
        assert all(m.ByteSize() <= LIMIT for m in raw)
        assert len(raw) > 8 and all(m.HasField("part") and not m.deltas and not m.sequence for m in raw)
        assert [m.part.more for m in raw].count(False) == 2  # two replies, each in parts
        joiner = Joiner()
        assert [r for r in map(joiner.push, raw) if r is not None] == whole

        for resume in (True, False):
            with Client(server.target, timeout=60, resume=resume) as client:
                stream = client.open("qwen3", request_id="big")
                stream.send(TEXT)
                stream.finish(steps=[TEXT])
                assert list(stream) == whole
                assert list(client.parse(messages)) == whole
                assert client.parse_stream("qwen3", [TEXT, TEXT]).message.content == (TEXT * 2).strip()

            async def run(resume=resume) -> tuple[list, list]:
                async with AsyncClient(server.target, timeout=60, resume=resume) as client:
                    stream = await client.open("qwen3", request_id="big")
                    await stream.send(TEXT)
                    await stream.finish(steps=[TEXT])
                    streamed = [m async for m in stream]
                    return streamed, [m async for m in client.parse(messages)]

            assert asyncio.run(run()) == (whole, whole)


def test_a_parse_batch_reply_past_the_limit_arrives_whole(registry):
    with ThreadServer(registry, Limits(max_reply_bytes=LIMIT)) as server:
        with Client(server.target, timeout=60) as client, client.batch() as batch:
            for key in ("big", "small"):
                batch.open(key, "qwen3")
            batch.feed("big", TEXT)
            batch.feed("small", [HELLO])
            batch.finish("big")
            outputs = batch.step()
            assert outputs["big"].final.message.content == TEXT.strip()
            assert "".join(d.content for d in outputs["big"].deltas) == TEXT.strip()
            assert outputs["small"].deltas[0].content == "Hello"
            batch.feed("small", [HELLO])
            batch.finish("small")
            assert batch.step()["small"].final.message.content == "HelloHello"

        async def run() -> pb.SessionOutput:
            async with AsyncClient(server.target, timeout=60) as client, client.batch() as batch:
                batch.open("big", "qwen3")
                batch.feed("big", TEXT, TEXT)
                batch.finish("big")
                return (await batch.step())["big"]

        assert asyncio.run(run()).final.message.content == (TEXT * 2).strip()


def test_parse_once_cannot_send_parts_and_says_so(registry):
    with (
        ThreadServer(registry, Limits(max_reply_bytes=LIMIT)) as server,
        Client(server.target, timeout=60) as client,
    ):
        with pytest.raises(grpc.RpcError) as info:
            client.parse_once("qwen3", text=TEXT)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the reply would be" in info.value.details() and "in parts" in info.value.details()
        assert client.parse_once("qwen3", [HELLO]).final.message.content == "Hello"


def test_the_flag_sets_the_limit():
    with (
        ProcessServer("--preload", "qwen3", "--max-reply-bytes", str(LIMIT)) as server,
        Client(server.target, timeout=60) as client,
    ):
        assert client.parse_stream("qwen3", [TEXT]).message.content == TEXT.strip()
        opening = pb.ParseRequest(open=open_message("qwen3"), steps=[pb.Step(text=TEXT)], finish=pb.Finish())
        raw = _raw_replies(server.target, [opening])
        assert len(raw) > 1 and all(m.ByteSize() <= LIMIT and m.HasField("part") for m in raw)


def test_a_whole_reply_inside_a_parted_one_is_a_framing_error():
    joiner = Joiner()
    assert joiner.push(pb.ParseResponse(part=pb.ReplyPart(data=b"\x08", more=True))) is None
    with pytest.raises(PartsError):
        joiner.push(pb.ParseResponse(sequence=1))
