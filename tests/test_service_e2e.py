"""End-to-end Qwen3 sessions through a real server on loopback, with the real tokenizer."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, Delta, FinishReason, Usage, finish_message, open_message
from service_samples import (
    EXPECTED_CALLS,
    PLAIN_ANSWER,
    REASONING_AND_TWO_CALLS,
    WEATHER_TOOLS,
    join,
    message_key,
    one_per_step,
)

IM_END = 151645
THINK_END = 151668
TOOL_CALL_END = 151658


def test_reasoning_and_parallel_tool_calls(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    result = client.parse_stream(
        "qwen3", [*one_per_step(ids), [IM_END]], "stop", matched_stop=IM_END, tools=WEATHER_TOOLS
    )
    message, deltas = result

    assert message.reasoning.startswith("The user wants the weather in Paris")
    assert message.content == "Let me look that up."
    assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == EXPECTED_CALLS
    assert all(c.id for c in message.tool_calls)
    assert len({c.id for c in message.tool_calls}) == 2

    joined = join(deltas)
    assert joined.reasoning == message.reasoning
    assert joined.content == message.content
    assert sorted(joined.calls) == [0, 1]  # parallel calls get their own index
    assert joined.tool_calls() == EXPECTED_CALLS
    assert [joined.calls[i]["id"] for i in (0, 1)] == [c.id for c in message.tool_calls]
    assert all(call["fragments"] > 1 for call in joined.calls.values()), "arguments were not streamed"

    assert result.finish_reason == "tool_calls"
    assert result.usage.completion_tokens == len(ids) + 1
    assert 0 < result.usage.reasoning_tokens < len(ids)

    sequences = [m.sequence for m in result.messages]
    assert sequences == list(range(1, len(sequences) + 1))
    assert [m.client_messages for m in result.messages] == sorted(m.client_messages for m in result.messages)
    assert all(not m.HasField("final") for m in result.messages[:-1])


def test_arguments_arrive_before_the_call_ends(grpc_server, encode):
    """Fragments of a call's arguments reach the client while the model is still inside the call."""
    ids = encode(REASONING_AND_TWO_CALLS)
    first_end = ids.index(TOOL_CALL_END)

    async def run() -> None:
        async with AsyncClient(grpc_server.target, timeout=30) as client:
            stream = await client.open("qwen3", tools=WEATHER_TOOLS)
            for tid in ids[:first_end]:  # everything before the first </tool_call>
                await stream.send([tid])
            replies = aiter(stream)
            arguments = ""
            while '"Paris"' not in arguments:
                reply = await asyncio.wait_for(anext(replies), 10)
                assert not reply.HasField("final")
                arguments += "".join(t.arguments for d in reply.deltas for t in d.tool_calls if t.index == 0)
            assert arguments.startswith('{"city": "Paris"')
            await stream.finish("stop", IM_END, steps=[[tid] for tid in ids[first_end:]])
            rest = [reply async for reply in replies]
            assert rest[-1].final.finish_reason == pb.FINISH_REASON_TOOL_CALLS
            assert len(rest[-1].final.message.tool_calls) == 2

    asyncio.run(run())


def test_final_message_equals_parse_once(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    streamed = client.parse_stream("qwen3", one_per_step(ids), "stop", tools=WEATHER_TOOLS)
    once = client.parse_once("qwen3", ids, "stop", tools=WEATHER_TOOLS)
    assert message_key(once.final.message) == message_key(streamed.message)
    assert once.final.finish_reason == streamed.final.finish_reason  # the enum is the proto's number
    assert f"{streamed.final.finish_reason}" == streamed.finish_reason == "tool_calls"
    assert Usage.of(once.final.usage) == streamed.final.usage == streamed.usage
    assert streamed.final.proto.usage == once.final.usage
    assert not once.deltas  # ParseOnce sends only the final result unless asked

    with_deltas = client.parse_once("qwen3", ids, "stop", tools=WEATHER_TOOLS, output="deltas")
    assert join(with_deltas.deltas).tool_calls() == EXPECTED_CALLS


@pytest.mark.parametrize("steps_per_message", [2, 7, 1000])
def test_several_steps_per_message_equal_one_step_per_message(client, encode, steps_per_message):
    ids = encode(REASONING_AND_TWO_CALLS)
    single = client.parse_stream("qwen3", one_per_step(ids), tools=WEATHER_TOOLS)
    batched = client.parse_stream(
        "qwen3", one_per_step(ids), tools=WEATHER_TOOLS, steps_per_message=steps_per_message
    )
    assert message_key(batched.message) == message_key(single.message)
    assert batched.final.usage == single.final.usage
    a, b = join(single.deltas), join(batched.deltas)
    assert (a.reasoning, a.content, a.tool_calls()) == (b.reasoning, b.content, b.tool_calls())
    # One server message per client message that produced output: batching sends fewer.
    assert len(batched.messages) <= -(-len(ids) // steps_per_message) + 1
    assert len(batched.messages) < len(single.messages)


def test_multi_token_steps_as_under_speculative_decoding(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    steps = [ids[i : i + 5] for i in range(0, len(ids), 5)]
    result = client.parse_stream("qwen3", steps, tools=WEATHER_TOOLS)
    assert join(result.deltas).tool_calls() == EXPECTED_CALLS
    assert result.usage.completion_tokens == len(ids)


def test_plain_answer_finishes_with_stop(client, encode):
    ids = encode(PLAIN_ANSWER)
    result = client.parse_stream("qwen3", [*one_per_step(ids), [IM_END]], matched_stop=IM_END)
    assert result.message.content == "Two plus two is four."
    assert result.message.reasoning == "Simple arithmetic."
    assert result.finish_reason == "stop"
    assert "<|im_end|>" not in result.message.content


def test_length_cut_mid_call(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    cut = ids.index(TOOL_CALL_END) - 3
    result = client.parse_stream("qwen3", one_per_step(ids[:cut]), "length", tools=WEATHER_TOOLS)
    assert result.finish_reason == "length"
    assert result.usage.completion_tokens == cut
    assert result.message.content == "Let me look that up."


def test_text_steps_for_stacks_that_detokenize(client):
    text = "<think>\nHmm.\n</think>\n\nHello there."
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    result = client.parse_stream("qwen3", pieces)
    assert result.message.reasoning == "Hmm."
    assert result.message.content == "Hello there."
    once = client.parse_once("qwen3", text=text)
    assert message_key(once.final.message) == message_key(result.message)
    assert result.usage.completion_tokens == 0, "text alone says nothing about tokens"


def test_text_steps_count_their_tokens_when_told(client):
    """``Step.text_tokens`` lets a stack that detokenizes itself still get exact usage: one step
    per token gives the same usage as the ids would."""
    steps = [pb.Step(text="<think>", text_tokens=1), pb.Step(text="\nHmm.\n", text_tokens=3)]
    steps += [pb.Step(text="</think>", text_tokens=1), pb.Step(text="\n\nHello there.", text_tokens=3)]
    result = client.parse_stream("qwen3", steps)
    assert (result.message.reasoning, result.message.content) == ("Hmm.", "Hello there.")
    assert (result.usage.completion_tokens, result.usage.reasoning_tokens) == (8, 4)
    once = client.parse_once("qwen3", text="plain answer", text_tokens=2)
    assert once.final.usage.completion_tokens == 2


def test_whole_session_in_one_client_message(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    message = pb.ParseRequest(
        open=open_message("qwen3", tools=WEATHER_TOOLS),
        steps=[pb.Step(token_ids=ids[i : i + 3]) for i in range(0, len(ids), 3)],
        finish=finish_message("stop"),
    )
    (reply,) = list(client.parse([message]))
    assert (reply.sequence, reply.client_messages) == (1, 1)
    assert join(reply.deltas).tool_calls() == EXPECTED_CALLS
    assert reply.final.finish_reason == pb.FINISH_REASON_TOOL_CALLS


def test_options_reach_the_session(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    hidden = client.parse_stream("qwen3", [ids], tools=WEATHER_TOOLS, include_reasoning=False)
    assert hidden.message.reasoning == ""
    assert join(hidden.deltas).reasoning == ""
    assert hidden.usage.reasoning_tokens > 0

    complete = client.parse_stream("qwen3", one_per_step(ids), tools=WEATHER_TOOLS, complete_tool_calls=True)
    joined = join(complete.deltas)
    assert joined.tool_calls() == EXPECTED_CALLS
    assert all(call["fragments"] == 1 for call in joined.calls.values())

    events = client.parse_stream("qwen3", [ids], tools=WEATHER_TOOLS, output="events")
    assert not events.deltas
    kinds = [pb.EventKind.Name(e.kind) for e in events.events]
    assert kinds[0] == "EVENT_KIND_REASONING_START"
    assert kinds.count("EVENT_KIND_TOOL_CALL_START") == 2

    final_only = client.parse_stream("qwen3", one_per_step(ids), tools=WEATHER_TOOLS, output="final")
    assert len(final_only.messages) == 1
    assert message_key(final_only.message) == message_key(events.message)

    stop_text = client.parse_stream("qwen3", [encode("Hi")], matched_stop=IM_END, include_stop_text=True)
    assert stop_text.message.content == "Hi<|im_end|>"


def test_event_tokens_add_up_to_completion_length(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    result = client.parse_stream("qwen3", one_per_step(ids), tools=WEATHER_TOOLS, output="events")
    assert sum(e.tokens for e in result.events) == len(ids) == result.usage.completion_tokens


def test_named_tool_choice_keeps_stop(client, encode):
    ids = encode('<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>')
    result = client.parse_stream("qwen3", [ids], tools=WEATHER_TOOLS, tool_choice="get_time", thinking=False)
    assert [c.name for c in result.message.tool_calls] == ["get_time"]
    assert result.finish_reason == "stop"


def test_prompt_that_opened_reasoning(client, encode):
    """A template that puts <think> in the prompt: the output starts inside reasoning."""
    prompt_tail = encode("<|im_start|>assistant\n<think>\n")
    ids = encode("Thinking already.\n</think>\n\nDone.")
    result = client.parse_stream("qwen3", [ids], prompt_token_ids=prompt_tail)
    assert result.message.reasoning == "Thinking already."
    assert result.message.content == "Done."


def test_qwen3_coder_xml_tool_call(client, encode):
    text = (
        "I'll check.<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    result = client.parse_stream(
        "qwen3-coder", one_per_step(encode(text)), tools=WEATHER_TOOLS, thinking=False
    )
    assert result.message.content == "I'll check."
    assert [(c.name, json.loads(c.arguments)) for c in result.message.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]


def test_tools_json_verbatim(client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)
    result = client.parse_stream("qwen3", [ids], tools=json.dumps(WEATHER_TOOLS))
    assert join(result.deltas).tool_calls() == EXPECTED_CALLS


def test_list_models(client):
    models = {m.name: m for m in client.list_models()}
    assert {"qwen3", "qwen3-coder"} <= set(models)
    assert models["qwen3"].format == "qwen3"
    assert models["qwen3"].tokenizer_available
    assert models["qwen3"].capabilities.reasoning and models["qwen3"].capabilities.tool_calls


def test_async_client_one_call_and_sync_streaming(grpc_server, client, encode):
    ids = encode(REASONING_AND_TWO_CALLS)

    async def run():
        async with AsyncClient(grpc_server.target, timeout=30) as aclient:
            return await aclient.parse_stream("qwen3", one_per_step(ids), tools=WEATHER_TOOLS)

    async_result = asyncio.run(run())
    stream = client.open("qwen3", tools=WEATHER_TOOLS)
    for tid in ids:
        stream.send([tid])
    stream.finish("stop")
    deltas = list(stream.deltas())
    assert stream.final is not None
    assert message_key(stream.final.message) == message_key(async_result.message)
    assert join(deltas).tool_calls() == EXPECTED_CALLS
    # Both clients' results are the typed records, equal but for the random call ids.
    assert async_result.final.finish_reason is stream.final.finish_reason is FinishReason.TOOL_CALLS
    assert async_result.final.usage == stream.final.usage and isinstance(async_result.deltas[0], Delta)


def test_async_client_unary_calls_equal_the_sync_clients(grpc_server, client, encode):
    """AsyncClient.parse_once, list_models and build_constraint answer as the blocking client's do."""
    ids = encode(REASONING_AND_TWO_CALLS)

    async def run():
        async with AsyncClient(grpc_server.target, timeout=30) as aclient:
            once = await aclient.parse_once("qwen3", ids, "stop", tools=WEATHER_TOOLS, request_id="e2e-once")
            models = await aclient.list_models()
            constraint = await aclient.build_constraint("qwen3", tools=WEATHER_TOOLS, tool_choice="required")
            return once, models, constraint

    once, models, constraint = asyncio.run(run())
    # (a request id: without one, nor prompt ids, each session's call ids are random)
    assert once == client.parse_once("qwen3", ids, "stop", tools=WEATHER_TOOLS, request_id="e2e-once")
    assert once.final.finish_reason == pb.FINISH_REASON_TOOL_CALLS
    assert [m.name for m in models] == [m.name for m in client.list_models()]
    want = client.build_constraint("qwen3", tools=WEATHER_TOOLS, tool_choice="required")
    assert constraint == want and constraint.lark_grammar


def test_cancel_ends_the_stream_with_cancelled(grpc_server, client, encode):
    """ParseStream.cancel mid-session: iteration ends with CANCELLED; AsyncParseStream.cancel: with
    asyncio.CancelledError, as grpc.aio reports a call its caller cancelled. Neither resumes: the
    caller asked for it."""
    ids = encode(REASONING_AND_TWO_CALLS)
    stream = client.open("qwen3", tools=WEATHER_TOOLS)
    replies = iter(stream)
    stream.send(*([tid] for tid in ids[:20]))
    next(replies)
    stream.cancel()
    with pytest.raises(grpc.RpcError) as info:
        for _ in replies:
            pass
    assert info.value.code() == grpc.StatusCode.CANCELLED

    async def run() -> None:
        async with AsyncClient(grpc_server.target, timeout=30) as aclient:
            astream = await aclient.open("qwen3", tools=WEATHER_TOOLS)
            areplies = astream.__aiter__()
            await astream.send(*([tid] for tid in ids[:20]))
            await areplies.__anext__()
            astream.cancel()
            with pytest.raises(asyncio.CancelledError):
                async for _ in areplies:
                    pass
            assert astream.resumes == 0

    asyncio.run(asyncio.wait_for(run(), 30))
