"""The loads the service benchmark sends: the workload (a Qwen3 output with reasoning and two tool
calls), ``Parse`` streams and ``ParseBatch`` engine steps, and the server CPU a load used."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from tests.testkit.servers import ProcessServer

OUTPUT = (
    "<think>\nThe user asks for the weather in Paris and the local time in Tokyo. Both are "
    "independent lookups, so I can call the two tools at once and then answer in one sentence. "
    "Paris wants celsius; Tokyo only needs a time zone.\n</think>\n\n"
    "Let me look both of those up for you."
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>'
)
TOOLS = json.dumps(
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    ]
)


def workload() -> list[int]:
    import tokenizers

    from parsetier.models import ModelRegistry

    model = ModelRegistry().get("qwen3")
    assert isinstance(model.tokenizer, tokenizers.Tokenizer)
    return model.tokenizer.encode(OUTPUT, add_special_tokens=False).ids


def open_channel(target: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ],
    )


async def parse_load(target: str, ids: list[int], per_message: int, streams: int, rounds: int) -> int:
    """``streams`` concurrent Parse sessions, each fed the workload ``rounds`` times in turn;
    returns the tokens sent."""
    channel = open_channel(target)
    stub = pb_grpc.ParserServiceStub(channel)
    open_ = pb.Open(model="qwen3", tools_json=TOOLS)
    chunks = [ids[i : i + per_message] for i in range(0, len(ids), per_message)]

    async def one() -> None:
        for _ in range(rounds):
            call = stub.Parse()
            await call.write(pb.ParseRequest(open=open_))
            await call.initial_metadata()

            async def reader(call=call) -> None:
                async for _ in call:
                    pass

            task = asyncio.create_task(reader())
            for chunk in chunks:
                await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=chunk)]))
            await call.write(pb.ParseRequest(finish=pb.Finish()))
            await call.done_writing()
            await task

    await asyncio.gather(*(one() for _ in range(streams)))
    await channel.close()
    return streams * rounds * len(ids)


def opens(keys: list[str]) -> pb.ParseBatchRequest:
    return pb.ParseBatchRequest(
        sessions=[pb.SessionInput(key=k, open=pb.Open(model="qwen3", tools_json=TOOLS)) for k in keys]
    )


def batch_step(
    keys: list[str], position: list[int], ids: list[int], shape: str = "packed", per_item: int = 1
) -> tuple[pb.ParseBatchRequest, int]:
    """One engine step: ``per_item`` tokens (fewer at the output's end) for every session; a
    session past the end of the output finishes, and opens again (with its first tokens, as an
    entry) in the next step. ``shape``: the usual steps as packed items (``PackedSteps``, as the
    batch clients send them), or as entries of one step per token (``steps``). Returns the
    message and the tokens in it."""
    message = pb.ParseBatchRequest()
    entries = message.sessions
    packed_keys: list[str] = []
    counts: list[int] = []
    packed_ids: list[int] = []
    tokens = 0
    for i, key in enumerate(keys):
        p = position[i]
        if p == len(ids):
            entries.add(key=key).finish.SetInParent()
            position[i] = -1
            continue
        opening = p == -1
        p = max(p, 0)
        chunk = ids[p : p + per_item]
        if opening or shape == "steps":
            entry = entries.add(key=key)
            if opening:
                entry.open.model, entry.open.tools_json = "qwen3", TOOLS
            if shape == "steps":
                for token in chunk:
                    entry.steps.add().token_ids.append(token)
            else:
                entry.steps.add().token_ids.extend(chunk)
        else:
            packed_keys.append(key)
            counts.append(len(chunk))
            packed_ids.extend(chunk)
        position[i] = p + len(chunk)
        tokens += len(chunk)
    if packed_keys:
        message.packed.keys.extend(packed_keys)
        if any(count != 1 for count in counts):
            message.packed.token_counts.extend(counts)
        message.packed.token_ids.extend(packed_ids)
    return message, tokens


async def pipelined(
    target: str, keys: list[str], messages: Iterable[tuple[pb.ParseBatchRequest, int]]
) -> int:
    """A ParseBatch stream on its own channel: ``keys`` opened, then ``messages`` (each with the
    tokens it carries) written with two in flight, every reply read, the stream closed. Returns the
    tokens sent."""
    channel = open_channel(target)
    call = pb_grpc.ParserServiceStub(channel).ParseBatch()
    await call.write(opens(keys))
    await call.read()
    sent = in_flight = 0
    for message, tokens in messages:
        sent += tokens
        await call.write(message)
        in_flight += 1
        if in_flight == 2:
            await call.read()
            in_flight -= 1
    while in_flight:
        await call.read()
        in_flight -= 1
    await call.done_writing()
    await call.code()
    await channel.close()
    return sent


async def batch_load(
    target: str, ids: list[int], sessions: int, steps: int, streams: int = 1, packed: bool = True
) -> int:
    """ParseBatch streams of ``sessions`` sessions each, one token per session per step, two steps
    in flight; sessions start at different points of the output and start over when done.
    ``packed``: the usual steps as packed items (else as entries). Returns the tokens sent."""

    async def one(index: int) -> int:
        keys = [f"s{index}-{i}" for i in range(sessions)]
        position = [i % len(ids) for i in range(sessions)]
        return await pipelined(
            target,
            keys,
            (batch_step(keys, position, ids, "packed" if packed else "steps") for _ in range(steps)),
        )

    return sum(await asyncio.gather(*(one(i) for i in range(streams))))


def measured(server: ProcessServer, coroutine) -> tuple[int, float, float]:
    """Run a load; (tokens, server CPU seconds, wall seconds)."""
    cpu, wall = server.cpu(), time.monotonic()
    tokens = asyncio.run(coroutine)
    return tokens, server.cpu() - cpu, time.monotonic() - wall
