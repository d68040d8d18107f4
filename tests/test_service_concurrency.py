"""300 sessions at once on one server, interleaved step by step: each sees only its own output."""

from __future__ import annotations

import asyncio
import json
import random

from parsetier_client import AsyncClient
from service_samples import WEATHER_TOOLS, join

SESSIONS = 300
CHANNELS = 4  # several HTTP/2 connections, many streams on each


def _output(i: int) -> str:
    city = f"City{i}"
    return (
        f"<think>\nSession {i} reasons about {city}.\n</think>\n\n"
        f"Answer for session {i}: {i * 7919 % 10007}."
        "<tool_call>\n"
        f'{{"name": "get_weather", "arguments": {{"city": "{city}", "unit": "u{i}"}}}}'
        "\n</tool_call>"
    )


def test_300_concurrent_sessions_stay_separate(grpc_server, encode):
    outputs = {i: encode(_output(i)) for i in range(SESSIONS)}

    opened = 0
    all_open = asyncio.Event()

    async def one(client: AsyncClient, i: int, rng: random.Random):
        nonlocal opened
        stream = await client.open("qwen3", tools=WEATHER_TOOLS, request_id=f"s{i}")
        opened += 1
        if opened == SESSIONS:
            all_open.set()
        await all_open.wait()  # every session is open on the server before any sends a step

        async def send() -> None:
            ids = outputs[i]
            pos = 0
            while pos < len(ids):
                size = rng.randint(1, 4)
                await stream.send(ids[pos : pos + size])
                pos += size
                await asyncio.sleep(0)  # let the other sessions' steps interleave with ours
            await stream.finish("stop")

        sender = asyncio.create_task(send())
        deltas = [d async for d in stream.deltas()]
        await sender
        return i, deltas, stream.final

    async def run():
        clients = [AsyncClient(grpc_server.target, timeout=120) for _ in range(CHANNELS)]
        try:
            rng = random.Random(3)
            tasks = [one(clients[i % CHANNELS], i, random.Random(rng.random())) for i in range(SESSIONS)]
            return await asyncio.wait_for(asyncio.gather(*tasks), 120)
        finally:
            for client in clients:
                await client.close()

    results = asyncio.run(run())
    assert len(results) == SESSIONS
    for i, deltas, final in results:
        joined = join(deltas)
        assert joined.reasoning == f"Session {i} reasons about City{i}."
        assert joined.content == f"Answer for session {i}: {i * 7919 % 10007}."
        assert joined.tool_calls() == [("get_weather", {"city": f"City{i}", "unit": f"u{i}"})]
        assert final.message.content == joined.content
        assert json.loads(final.message.tool_calls[0].arguments) == {"city": f"City{i}", "unit": f"u{i}"}
        assert final.usage.completion_tokens == len(outputs[i])
    gate = grpc_server.handle.servicer.gate
    assert gate.peak >= SESSIONS
    assert gate.active == 0
