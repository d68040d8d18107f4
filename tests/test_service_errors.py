"""Every error the contract names ends only its own stream with its status code, while a healthy
session on the same server (and the same channel) runs to a correct result beside it."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, finish_message, open_message
from service_samples import EXPECTED_CALLS, REASONING_AND_TWO_CALLS, WEATHER_TOOLS, join

Code = grpc.StatusCode


def _open(**kwargs) -> pb.ParseRequest:
    kwargs.setdefault("tools", WEATHER_TOOLS)
    return pb.ParseRequest(open=open_message("qwen3", **kwargs))


def _steps(*ids: int) -> pb.ParseRequest:
    return pb.ParseRequest(steps=[pb.Step(token_ids=[i]) for i in ids])


FINISH = pb.ParseRequest(finish=finish_message("stop"))

# name -> (client messages of the bad stream, expected code, a word the status message must contain)
STREAM_CASES = {
    "unknown model": (
        [pb.ParseRequest(open=open_message("no-such-model"))],
        Code.NOT_FOUND,
        "no-such-model",
    ),
    "step before open": ([_steps(1, 2)], Code.FAILED_PRECONDITION, "Open"),
    "finish before open": ([FINISH], Code.FAILED_PRECONDITION, "Open"),
    "second open": ([_open(), _steps(9707), _open()], Code.FAILED_PRECONDITION, "already open"),
    "data after finish": (
        [_open(), _steps(9707), FINISH, _steps(9707)],
        Code.FAILED_PRECONDITION,
        "finished",
    ),
    "closed before finish": ([_open(), _steps(9707)], Code.FAILED_PRECONDITION, "before Finish"),
    "token id outside the vocabulary": (
        [_open(), _steps(9707, 10_000_000)],
        Code.INVALID_ARGUMENT,
        "10000000",
    ),
    "prompt id outside the vocabulary": (
        [_open(prompt_token_ids=[1, 999_999])],
        Code.INVALID_ARGUMENT,
        "999999",
    ),
    "malformed tool parameters JSON": (
        [pb.ParseRequest(open=pb.Open(model="qwen3", tools=[pb.Tool(name="f", parameters_json="{nope")]))],
        Code.INVALID_ARGUMENT,
        "parameters_json",
    ),
    "tool parameters not an object": (
        [pb.ParseRequest(open=pb.Open(model="qwen3", tools=[pb.Tool(name="f", parameters_json="[1]")]))],
        Code.INVALID_ARGUMENT,
        "object",
    ),
    "malformed tools_json": (
        [pb.ParseRequest(open=pb.Open(model="qwen3", tools_json='[{"type": "function", "function": '))],
        Code.INVALID_ARGUMENT,
        "tools_json",
    ),
    "tools_json nested too deep": (
        [pb.ParseRequest(open=pb.Open(model="qwen3", tools_json="[" * 5000))],
        Code.INVALID_ARGUMENT,
        "levels deep",
    ),
    "parameters_json nested too deep": (
        [
            pb.ParseRequest(
                open=pb.Open(model="qwen3", tools=[pb.Tool(name="f", parameters_json='{"a":' * 5000)])
            )
        ],
        Code.INVALID_ARGUMENT,
        "levels deep",
    ),
    "parameters_json with a 5000-digit number": (
        [
            pb.ParseRequest(
                open=pb.Open(
                    model="qwen3", tools=[pb.Tool(name="f", parameters_json='{"x": ' + "9" * 5000 + "}")]
                )
            )
        ],
        Code.INVALID_ARGUMENT,
        "digits",
    ),
    **{
        f"tools_json parameters {literal}": (
            [
                pb.ParseRequest(
                    open=pb.Open(model="qwen3", tools_json=f'[{{"name": "f", "parameters": {literal}}}]')
                )
            ],
            Code.INVALID_ARGUMENT,
            "tools_json[0].parameters must be a JSON object",
        )
        for literal in ("[]", '""', "0", "false", "null")
    },
    "parameters_json null": (
        [pb.ParseRequest(open=pb.Open(model="qwen3", tools=[pb.Tool(name="f", parameters_json="null")]))],
        Code.INVALID_ARGUMENT,
        "tools[0].parameters_json must be a JSON object",
    ),
    "tool_choice names an unknown function": (
        [_open(tool_choice="book_flight")],
        Code.INVALID_ARGUMENT,
        "book_flight",
    ),
    "tool_choice required without tools": (
        [_open(tools=None, tool_choice="required")],
        Code.INVALID_ARGUMENT,
        "required",
    ),
    "duplicate tool names": (
        [_open(tools=WEATHER_TOOLS + WEATHER_TOOLS[:1])],
        Code.INVALID_ARGUMENT,
        "duplicate",
    ),
    "finish reason tool_calls": (
        [_open(), pb.ParseRequest(finish=pb.Finish(reason=pb.FINISH_REASON_TOOL_CALLS))],
        Code.INVALID_ARGUMENT,
        "TOOL_CALLS",
    ),
}


async def _bad_stream(client: AsyncClient, messages: list[pb.ParseRequest]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in client.parse(messages):
            pass
    return info.value


async def _healthy_beside(client: AsyncClient, ids: list[int], bad) -> grpc.aio.AioRpcError:
    """Open a healthy session, run ``bad`` while it is half-way, then finish it and check it."""
    stream = await client.open("qwen3", tools=WEATHER_TOOLS)
    half = len(ids) // 2
    for tid in ids[:half]:
        await stream.send([tid])
    error = await bad()
    for tid in ids[half:]:
        await stream.send([tid])
    await stream.finish("stop")
    deltas = [d async for d in stream.deltas()]
    assert stream.final is not None
    assert join(deltas).tool_calls() == EXPECTED_CALLS
    assert [(c.name, json.loads(c.arguments)) for c in stream.final.message.tool_calls] == EXPECTED_CALLS
    return error


@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_stream_error(grpc_server, encode, case):
    messages, code, word = STREAM_CASES[case]
    ids = encode(REASONING_AND_TWO_CALLS)

    async def run():
        async with AsyncClient(grpc_server.target, timeout=30) as client:
            return await _healthy_beside(client, ids, lambda: _bad_stream(client, messages))

    error = asyncio.run(run())
    assert error.code() == code, error.details()
    assert word in error.details()


PARSE_ONCE_CASES = {
    "unknown model": (pb.ParseOnceRequest(open=pb.Open(model="nope")), Code.NOT_FOUND),
    "token id outside the vocabulary": (
        pb.ParseOnceRequest(open=pb.Open(model="qwen3"), token_ids=[1, 151669]),
        Code.INVALID_ARGUMENT,
    ),
    "bad tool_choice": (
        pb.ParseOnceRequest(open=open_message("qwen3", tools=WEATHER_TOOLS, tool_choice="nope")),
        Code.INVALID_ARGUMENT,
    ),
}


@pytest.mark.parametrize("case", sorted(PARSE_ONCE_CASES))
def test_parse_once_error(grpc_server, encode, case):
    request, code = PARSE_ONCE_CASES[case]
    ids = encode(REASONING_AND_TWO_CALLS)

    async def bad_call(client: AsyncClient) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.stub.ParseOnce(request, timeout=20)
        return info.value

    async def run():
        async with AsyncClient(grpc_server.target, timeout=30) as client:
            return await _healthy_beside(client, ids, lambda: bad_call(client))

    assert asyncio.run(run()).code() == code


def test_last_valid_id_is_accepted_and_first_invalid_is_not(client, registry):
    vocab = registry.get("qwen3").vocab_size
    result = client.parse_stream("qwen3", [[9707, vocab - 1]])
    assert result.usage.completion_tokens == 2
    with pytest.raises(grpc.RpcError) as info:
        client.parse_stream("qwen3", [[9707, vocab]])
    assert info.value.code() == Code.INVALID_ARGUMENT
