"""Per-request bounds on tools, and BuildConstraint off the event loop (issue 37 item 3): a request
with more tools than ``--max-tools``, or a tool schema over ``--max-schema-bytes``, is refused with
INVALID_ARGUMENT naming the flag on every RPC that reads an Open, and a large constraint being
built does not hold up other sessions."""

from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client import AsyncClient, Client, open_message

Code = grpc.StatusCode
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}


def _tools(count: int, strict: bool = False, schema: dict = SCHEMA) -> list[dict]:
    return [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": schema, "strict": strict}}
        for i in range(count)
    ]


TOO_MANY = _tools(1025)
"""One more than the default ``--max-tools``."""
HUGE = {
    "type": "object",
    "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(700)},
}
"""A schema of about 90 KB, over the default ``--max-schema-bytes`` (64 KiB)."""


@pytest.mark.parametrize("as_json", [False, True], ids=["tools", "tools_json"])
def test_too_many_tools_are_refused_on_every_rpc(grpc_server, as_json):
    """1,025 tools: INVALID_ARGUMENT naming --max-tools, at once (they were built: 1.5 s for
    BuildConstraint, on the event loop)."""
    tools = json.dumps(TOO_MANY) if as_json else TOO_MANY
    with Client(grpc_server.target, timeout=30) as client:
        calls = {
            "BuildConstraint": lambda: client.build_constraint("qwen3", tools=tools),
            "ParseOnce": lambda: client.parse_once("qwen3", [9707], tools=tools),
            "Parse": lambda: client.parse_stream("qwen3", [[9707]], tools=tools),
        }
        for rpc, call in calls.items():
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == Code.INVALID_ARGUMENT, rpc
            assert "1025 tools in one request; the limit is 1024 (--max-tools)" in info.value.details(), rpc
            assert time.monotonic() - started < 5, rpc


def test_too_many_tools_end_only_that_batch_session(grpc_server):
    async def run():
        async with AsyncClient(grpc_server.target, timeout=30) as client:
            batch = client.batch()
            batch.open("big", "qwen3", tools=TOO_MANY)
            batch.open("small", "qwen3")
            batch.feed("small", [9707])
            outputs = await batch.step()
            await batch.close()
            return outputs

    outputs = asyncio.run(run())
    assert outputs["big"].status.code == Code.INVALID_ARGUMENT.value[0]
    assert "--max-tools" in outputs["big"].status.message
    assert outputs["small"].deltas[0].content == "Hello"


def test_a_schema_over_the_limit_is_refused(grpc_server):
    with Client(grpc_server.target, timeout=30) as client:
        for tools in (_tools(1, schema=HUGE), json.dumps(_tools(1, schema=HUGE))):
            with pytest.raises(grpc.RpcError) as info:
                client.build_constraint("qwen3", tools=tools)
            assert info.value.code() == Code.INVALID_ARGUMENT
            assert "tool 'tool_0': its JSON is" in info.value.details()
            assert "the limit is 65536 (--max-schema-bytes)" in info.value.details()
        assert client.build_constraint("qwen3", tools=_tools(3)).lark_grammar  # ordinary ones pass


def test_the_bounds_fast_path_and_the_limits():
    """Up to the limits passes, one past each is refused (for both ways of giving tools)."""
    from parsetier.status import StatusError
    from parsetier.tool_limits import check_tools  # imported here: the other tests run on any server

    for count, ok in ((4, True), (5, False)):
        for open_ in (
            open_message("m", tools=_tools(count)),
            open_message("m", tools=json.dumps(_tools(count))),
        ):
            if ok:
                check_tools(open_, 4, 10_000)
            else:
                with pytest.raises(StatusError, match="--max-tools"):
                    check_tools(open_, 4, 10_000)
    size = len(json.dumps(SCHEMA))
    check_tools(open_message("m", tools=_tools(2)), 4, size)
    with pytest.raises(StatusError, match="--max-schema-bytes"):
        check_tools(open_message("m", tools=_tools(2)), 4, size - 1)
    check_tools(pb.Open(model="m", tools_json="not json " * 10_000), 4, 100)  # left to the reader


@pytest.mark.slow
def test_building_a_large_constraint_does_not_stall_other_sessions():
    """While another client builds constraints of 1,000 strict tools (seconds each), a probe
    stream sending a step every 20 ms gets every reply, none later than half a build.
    Before, the build ran on the event loop and the probe waited the whole build."""
    request = pb.BuildConstraintRequest(open=open_message("qwen3", tools=_tools(1000, strict=True)))

    async def run(target: str):
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.ParserServiceStub(channel)
            builds: list[float] = []

            async def build() -> None:
                for _ in range(2):
                    started = time.monotonic()
                    await stub.BuildConstraint(request, timeout=120)
                    builds.append(time.monotonic() - started)

            builder = asyncio.create_task(build())
            call = stub.Parse()
            await call.write(pb.ParseRequest(open=open_message("qwen3")))
            await call.initial_metadata()
            gaps = []
            while not builder.done():
                started = time.monotonic()
                await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=[9707])]))
                reply = await call.read()
                assert reply.deltas[0].content == "Hello"
                gaps.append(time.monotonic() - started)
                await asyncio.sleep(0.02)
            await builder
            call.cancel()
            return builds, gaps

    with ProcessServer("--preload", "qwen3", "--max-loop-lag-ms", "0") as server:
        builds, gaps = asyncio.run(run(server.target))
    # A stalled loop makes the probe wait out a whole build; a slow, shared machine makes single
    # replies late (seen: 1.1 s at a load average of 10 on 2 cores), never half a build.
    assert max(builds) > 1.0  # a build long enough to tell a stall from a slow machine
    assert max(gaps) < max(builds) / 2, (max(gaps), builds)
