"""One client's large messages must not stall the other streams or the health check."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from grpc_servers import ProcessServer, subprocess_env
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

HEAVY_IDS = 500_000
"""One message of this many ordinary ids (1 MB, inside every default limit) takes a few tenths of
a second to parse; ``HEAVY_MESSAGES`` of them back to back keep the server busy for seconds."""
HEAVY_MESSAGES = 6

HEAVY_CLIENT = f"""
import sys, time
from parsetier_client import Client
with Client(sys.argv[1], timeout=300) as client:
    client.parse_stream("qwen3", [[3409] * 9000])  # first use of the model, untimed
    print("ready", flush=True)
    started = time.monotonic()
    steps = [[3409] * {HEAVY_IDS}] * {HEAVY_MESSAGES}
    result = client.parse_stream("qwen3", steps, steps_per_message=1)
    assert result.final.usage.completion_tokens == {HEAVY_IDS} * {HEAVY_MESSAGES}
    print((time.monotonic() - started) / {HEAVY_MESSAGES}, flush=True)
"""


def test_large_messages_do_not_stall_other_calls():
    """Server and heavy client each in a process of their own: the stalls the probes measure
    are the server's, not those of a client sharing the probes' GIL."""
    tokens = str(HEAVY_IDS * HEAVY_MESSAGES)
    with ProcessServer("--preload", "qwen3", "--max-tokens-per-session", tokens) as server:
        server.wait_for_log("models loaded", timeout=120)
        probes, per_message = _probe_while_heavy(server.target)
    # Stalled, every message holds the server for its whole parse: a probe meets one at a random
    # point and waits out the rest of it, so about two probes in three wait a third of a message
    # or more. Served, a probe waits a few GIL switch intervals. The native engine parses a
    # message in under a tenth of a second, as short as the waits a shared, loaded machine adds
    # now and then (three of 24 probes in one CI run), so the bound is a share of the probes.
    assert len(probes) >= 10, (len(probes), per_message)
    assert statistics.median(probes) < per_message / 5, (probes, per_message)
    slow = [p for p in probes if p >= per_message / 3]
    assert len(slow) <= len(probes) / 5, (slow, per_message, len(probes))


def _probe_while_heavy(target: str) -> tuple[list[float], float]:
    """Health-check round trips timed while another process streams the heavy messages, and the
    time that process took per message."""
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        health.Check(health_pb2.HealthCheckRequest(), timeout=30)  # connected before timing
        heavy = subprocess.Popen(
            [sys.executable, "-c", HEAVY_CLIENT, target],
            stdout=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        assert heavy.stdout is not None
        assert heavy.stdout.readline().strip() == "ready"
        probes: list[float] = []
        while heavy.poll() is None:
            started = time.monotonic()
            health.Check(health_pb2.HealthCheckRequest(), timeout=300)
            probes.append(time.monotonic() - started)
            time.sleep(0.01)
        out = heavy.stdout.read()
    assert heavy.returncode == 0, "the heavy session failed"
    return probes, float(out.strip())


BATCH_SESSIONS = 2000
"""One ParseBatch step of this many one-token sessions is ~25 KB (under the worker-thread size).
Its sessions render the OpenAI chat dialect, so every item takes the protocol's Python path: tens
of milliseconds, which applied whole would hold every other stream meanwhile. (Plain sessions on
the native core step 64 items per call, and the whole step takes a few milliseconds: too short
for the order of two replies to show anything.)"""
CHAT = pb.WireOptions(dialect=pb.WIRE_DIALECT_OPENAI_CHAT)
TRIALS = 5


def test_a_large_parse_batch_step_lets_other_streams_through():
    """A ``Parse`` step sent while a 2,000-session ``ParseBatch`` step is being applied is
    answered before that step is: the batch is applied in slices, and the other stream's message
    is served between two. Applied whole, the batch's reply would come first every time."""
    with ProcessServer("--preload", "qwen3") as server:
        server.wait_for_log("models loaded", timeout=120)
        orders = asyncio.run(_orders_of_replies(server.target))
    assert sum(first == "parse" for first in orders) >= TRIALS - 1, orders


async def _orders_of_replies(target: str) -> list[str]:
    """Per trial, which reply came first: the Parse step's or the batch step's."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.ParserServiceStub(channel)
        keys = [f"s{i}" for i in range(BATCH_SESSIONS)]
        batch = stub.ParseBatch()
        await batch.write(
            pb.ParseBatchRequest(
                sessions=[pb.SessionInput(key=k, open=pb.Open(model="qwen3", wire=CHAT)) for k in keys]
            )
        )
        await batch.read()
        parse = stub.Parse()
        await parse.write(pb.ParseRequest(open=pb.Open(model="qwen3")))
        await parse.initial_metadata()
        step = pb.ParseBatchRequest(packed=pb.PackedSteps(keys=keys, token_ids=[3409] * len(keys)))
        orders: list[str] = []
        for _ in range(TRIALS):
            arrived: list[str] = []
            await batch.write(step)
            batch_reply = asyncio.create_task(_note("batch", batch, arrived))
            await asyncio.sleep(0.003)  # the server is applying the step now
            await parse.write(pb.ParseRequest(steps=[pb.Step(token_ids=[3409])]))
            await asyncio.gather(batch_reply, _note("parse", parse, arrived))
            orders.append(arrived[0])
        await batch.done_writing()
        await parse.done_writing()
    return orders


async def _note(name: str, call: grpc.aio.StreamStreamCall, arrived: list[str]) -> None:
    await call.read()
    arrived.append(name)


def test_a_models_native_parts_are_built_off_the_event_loop(monkeypatch) -> None:
    """A model's first session needs its native parts (the vocabulary's tables, the grammar's
    description: 0.1-0.5 s). Built on the event loop, they stall every other session for that
    long (and the loop-lag admission refuses new calls); the servicer builds them in the worker
    thread that loads the model, for the first Parse and the first ParseBatch alike."""
    import marker_tokenizers
    from grpc_servers import ThreadServer
    from parsetier import native
    from parsetier_client import Client

    built_on_loop: list[str] = []
    build = native.native_parts

    def watched(model):
        if not native.prepared(model):
            try:
                asyncio.get_running_loop()
                built_on_loop.append(model.name)
            except RuntimeError:
                pass
        return build(model)

    monkeypatch.setattr(native, "native_parts", watched)
    for cache in ("_vocabularies", "_detokenizers", "_grammars", "_model_parts"):  # nothing built yet
        monkeypatch.setattr(native, cache, {})
    registry = marker_tokenizers.registry()
    with ThreadServer(registry) as server, Client(server.target, timeout=60) as client:
        assert not native.prepared(registry.get("qwen3"))
        assert client.parse_stream("qwen3", [[3409] * 4]).final.usage.completion_tokens == 4
        batch_model = registry.loaded("qwen3-coder") or registry.get("qwen3-coder")  # loaded, unprepared
        assert not native.prepared(batch_model)
        with client.batch() as batch:
            batch.open("s", "qwen3-coder")
            batch.feed("s", [3409, 3409])
            batch.finish("s")
            final = batch.step()["s"].final
        assert final.usage.completion_tokens == 2
    assert native.prepared(registry.get("qwen3")) and native.prepared(batch_model)
    assert built_on_loop == []
