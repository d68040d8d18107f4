"""The Go example gateway (client/go/examples/gateway) end to end: an OpenAI- and
Anthropic-compatible front for a token-in/token-out engine made of one ``Render`` call before
generation and one ``Parse`` stream after, with the official ``openai`` and ``anthropic`` SDKs as
its HTTP clients over loopback and a real server behind it.

The engine is the gateway's scripted stand-in: a table from a prompt (the SHA-256 of its token
ids) to the output ids to emit. Each test adds the output for the request it is about to send:
it renders the same body through the Python client (the prompt the gateway must get, so a body
the gateway altered finds no output) and records the real tokenizer's ids of the assistant text
a model would write. What the SDKs rebuild must be exactly what the same output, parsed with the
``Open`` that ``Render`` returned, gives the Python client. The gateway maps nothing: no request
field is read and no response field written by its code (``test_the_gateway_maps_nothing``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from parsetier_client.rendering import RenderResult
from service_samples import PLAIN_ANSWER, REASONING_AND_TWO_CALLS, WEATHER_TOOLS
from test_go_client import GO_DIR, go_binary, run_go

pytestmark = pytest.mark.toolchain  # builds the Go gateway example

GATEWAY_DIR = GO_DIR / "examples" / "gateway"
IM_END = 151645  # Qwen3's end of turn: the engine stops on it (Sampling.stop_token_ids)
MODEL = "qwen3"
ANSWER = (
    "<think>\nBoth tools answered; I can reply now.\n</think>\n\n"
    "It is 18 degrees in Paris and 09:00 in Tokyo."
)
RESULTS = {"get_weather": '{"temperature": 18, "unit": "celsius"}', "get_time": '{"time": "09:00"}'}
ANTHROPIC_TOOLS = [
    {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
    | ({"description": t["function"]["description"]} if "description" in t["function"] else {})
    for t in WEATHER_TOOLS
]
RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in WEATHER_TOOLS]
USER = "What is the weather in Paris and the time in Tokyo?"


def prompt_key(ids: list[int]) -> str:
    """The scripted engine's key of a prompt (engine.go's promptKey)."""
    return hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()


class Script:
    """The scripted engine's table, written where the gateway reads it at each request."""

    def __init__(self, path: Path, client, encode: Callable[[str], list[int]]) -> None:
        self.path, self.client, self.encode = path, client, encode
        self.table: dict[str, list[list[int]]] = {}
        self.write()

    def write(self) -> None:
        staging = self.path.with_suffix(".new")
        staging.write_text(json.dumps(self.table))
        os.replace(staging, self.path)

    def add(self, dialect: str, body: dict, *texts: str) -> tuple[RenderResult, list[list[int]]]:
        """Record ``texts`` (choice i answers the (i mod count)-th) as the output for ``body``'s
        prompt; the rendering and the outputs' ids, each ending in the end of turn."""
        rendered = self.client.render(MODEL, body, dialect)
        outputs = [[*self.encode(text), IM_END] for text in texts]
        self.table[prompt_key(rendered.prompt_token_ids)] = outputs
        self.write()
        return rendered, outputs

    def expect(self, dialect: str, body: dict, *texts: str) -> list:
        """``add``, and what the Python client parses each choice's output into with the ``Open``
        Render returned: the finals the SDKs must rebuild."""
        rendered, outputs = self.add(dialect, body, *texts)
        finals = []
        for i in range(rendered.n):
            output = outputs[i % len(outputs)]
            stream = self.client.open(rendered.choice(i))
            stream.send(output[:-1])
            stream.finish("stop", matched_stop=output[-1])
            list(stream)
            finals.append(stream.final)
        return finals


@pytest.fixture(scope="module")
def gateway_binary(tmp_path_factory) -> Path:
    binary = tmp_path_factory.mktemp("gateway-build") / "gateway"
    code, output = run_go([go_binary(), "build", "-o", str(binary), "./examples/gateway"], cwd=GO_DIR)
    assert code == 0, f"go build ./examples/gateway failed:\n{output}"
    return binary


@pytest.fixture(scope="module")
def script(client, encode, tmp_path_factory) -> Script:
    return Script(tmp_path_factory.mktemp("gateway") / "script.json", client, encode)


@pytest.fixture(scope="module")
def gateway(grpc_server, gateway_binary, script) -> Iterator[str]:
    """The example started against the shared server; its base URL."""
    args = ["-parsetier", grpc_server.target, "-listen", "127.0.0.1:0", "-model", MODEL]
    args += ["-script", str(script.path)]
    proc = subprocess.Popen(
        [str(gateway_binary), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(30)
        assert line and line[0].startswith("listening on "), f"gateway did not start: {line}"
        yield line[0].removeprefix("listening on ").strip()
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="module")
def openai_sdk(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def anthropic_sdk(gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway, api_key="unused", max_retries=0)


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.name, json.loads(c.arguments)) for c in message.tool_calls]


# ---------------------------------------------------------------- OpenAI chat completions
def chat(sdk: openai.OpenAI, request: dict, stream: bool):
    if not stream:
        return sdk.chat.completions.create(**request)
    with sdk.chat.completions.stream(**request, stream_options={"include_usage": True}) as events:
        kinds = {event.type for event in events}
        completion = events.get_final_completion()
    assert "content.delta" in kinds
    return completion


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_openai_chat_tool_conversation(openai_sdk, script, stream) -> None:
    """Two turns: the first answers with reasoning, text and two calls; the second carries those
    calls and their results back and gets the final answer."""
    messages: list[dict] = [{"role": "user", "content": USER}]
    request = {"model": "my-model", "messages": messages, "tools": WEATHER_TOOLS}
    (want,) = script.expect("openai_chat", request, REASONING_AND_TWO_CALLS)
    completion = chat(openai_sdk, request, stream)
    assert completion.model == "my-model" and completion.id.startswith("chatcmpl-")
    (choice,) = completion.choices
    message = choice.message
    assert (message.content, message.reasoning_content) == (want.message.content, want.message.reasoning)
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls]
    assert calls == [(c.name, c.arguments) for c in want.message.tool_calls]
    assert all(c.id.startswith("call_") for c in message.tool_calls)
    assert choice.finish_reason == "tool_calls"
    assert completion.usage.completion_tokens == want.usage.completion_tokens
    assert completion.usage.prompt_tokens == script.client.render(MODEL, request).prompt_tokens

    messages.append(
        {
            "role": "assistant",
            "content": message.content,
            "reasoning_content": message.reasoning_content,
            "tool_calls": [c.model_dump() for c in message.tool_calls],
        }
    )
    for call in message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": RESULTS[call.function.name]})
    (want,) = script.expect("openai_chat", request, ANSWER)
    completion = chat(openai_sdk, request, stream)
    (choice,) = completion.choices
    assert (choice.message.content, choice.message.reasoning_content) == (
        want.message.content,
        want.message.reasoning,
    )
    assert choice.message.content == "It is 18 degrees in Paris and 09:00 in Tokyo."
    assert choice.finish_reason == "stop" and not choice.message.tool_calls


def test_openai_chat_max_tokens_ends_the_output(openai_sdk, script) -> None:
    """The engine honours Render's sampling (max_tokens): the parse reports the length finish."""
    request = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 4}
    script.add("openai_chat", request, PLAIN_ANSWER)
    completion = openai_sdk.chat.completions.create(**request)
    assert completion.choices[0].finish_reason == "length" and completion.usage.completion_tokens == 4


def test_a_request_the_tier_refuses_gets_the_dialects_error(openai_sdk, anthropic_sdk) -> None:
    """Render's refusal, forwarded: the API's own error body with its HTTP status, streamed or not."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            openai_sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": [image]}], stream=stream
            )
        assert caught.value.code == "invalid_argument" and "messages[0].content[0]" in caught.value.message
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_sdk.messages.create(model="m", max_tokens=5, messages=[{"role": "assistant", "content": 7}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"


# ---------------------------------------------------------------- Anthropic Messages
def sdk_reply(api: Any, final: str, request: dict, stream: bool):
    """The reply of ``api.create`` or, with ``stream``, what the SDK accumulates from every event
    of ``api.stream`` (its ``final`` getter)."""
    if not stream:
        return api.create(**request)
    with api.stream(**request) as events:
        for _ in events:
            pass
        return getattr(events, final)()


def anthropic_message(sdk: anthropic.Anthropic, request: dict, stream: bool):
    return sdk_reply(sdk.messages, "get_final_message", request, stream)


def texts_of(reply) -> tuple[str, str]:
    """An Anthropic message's thinking and text (its first two blocks)."""
    return reply.content[0].thinking, reply.content[1].text


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_anthropic_tool_conversation(anthropic_sdk, script, stream) -> None:
    messages: list[dict] = [{"role": "user", "content": USER}]
    request = {"model": "my-model", "max_tokens": 512, "messages": messages, "tools": ANTHROPIC_TOOLS}
    (want,) = script.expect("anthropic_messages", request, REASONING_AND_TWO_CALLS)
    reply = anthropic_message(anthropic_sdk, request, stream)
    assert reply.model == "my-model" and reply.id.startswith("msg_")
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert texts_of(reply) == (want.message.reasoning, want.message.content)
    uses = reply.content[2:]
    assert [(b.name, b.input) for b in uses] == calls_of(want.message)
    assert all(b.id.startswith("toolu_") for b in uses) and reply.stop_reason == "tool_use"
    assert reply.usage.output_tokens == want.usage.completion_tokens

    turn = [block.model_dump(exclude_none=True) for block in reply.content]
    messages.append({"role": "assistant", "content": turn})
    results = [{"type": "tool_result", "tool_use_id": b.id, "content": RESULTS[b.name]} for b in uses]
    messages.append({"role": "user", "content": results})
    (want,) = script.expect("anthropic_messages", request, ANSWER)
    reply = anthropic_message(anthropic_sdk, request, stream)
    assert [b.type for b in reply.content] == ["thinking", "text"] and reply.stop_reason == "end_turn"
    assert texts_of(reply) == (want.message.reasoning, want.message.content)


# ---------------------------------------------------------------- OpenAI Responses
def responses(sdk: openai.OpenAI, request: dict, stream: bool):
    return sdk_reply(sdk.responses, "get_final_response", request, stream)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_openai_responses_tool_conversation(openai_sdk, script, stream) -> None:
    items: list[dict] = [{"role": "user", "content": USER}]
    request = {"model": "my-model", "input": items, "tools": RESPONSES_TOOLS}
    (want,) = script.expect("openai_responses", request, REASONING_AND_TWO_CALLS)
    response = responses(openai_sdk, request, stream)
    assert response.model == "my-model" and response.id.startswith("resp_")
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == calls_of(want.message)
    assert response.output_text == want.message.content
    (reasoning,) = [item for item in response.output if item.type == "reasoning"]
    assert "".join(part.text for part in reasoning.content or reasoning.summary) == want.message.reasoning
    assert response.usage.output_tokens == want.usage.completion_tokens

    items.extend(item.model_dump(exclude_none=True) for item in response.output)
    items.extend(
        {"type": "function_call_output", "call_id": c.call_id, "output": RESULTS[c.name]} for c in calls
    )
    (want,) = script.expect("openai_responses", request, ANSWER)
    response = responses(openai_sdk, request, stream)
    assert response.output_text == want.message.content
    assert not [item for item in response.output if item.type == "function_call"]
    assert response.status == "completed"


# ---------------------------------------------------------------- n > 1 choices
N = 3  # choices 0 and 2 answer with the calls, choice 1 with the plain answer


def usage_of(finals) -> tuple[int, int]:
    return (
        sum(f.usage.completion_tokens for f in finals),
        sum(f.usage.reasoning_tokens for f in finals),
    )


N_REQUEST = {"model": "my-model", "messages": [{"role": "user", "content": "weather?"}], "n": N}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_openai_sdk_n_choices(openai_sdk, script, stream) -> None:
    """n = 3: every choice at its index with its own message and finish reason, the calls of the
    two choices that answer alike with ids of their own, and one usage that counts every choice
    (the last choice's Finish carried the others' usage)."""
    request = {**N_REQUEST, "tools": WEATHER_TOOLS}
    finals = script.expect("openai_chat", request, REASONING_AND_TWO_CALLS, PLAIN_ANSWER)
    completion = chat(openai_sdk, request, stream)
    assert [choice.index for choice in completion.choices] == list(range(N))
    for choice, final in zip(completion.choices, finals, strict=True):
        want = final.message
        assert (choice.message.content or "", choice.message.reasoning_content or "") == (
            want.content,
            want.reasoning,
        )
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()]
        assert calls == [(c.name, c.arguments) for c in want.tool_calls]
        assert choice.finish_reason == ("tool_calls" if want.tool_calls else "stop")
    ids = [c.id for choice in completion.choices for c in choice.message.tool_calls or ()]
    assert len(ids) == 4 and len(set(ids)) == 4  # choice 2's ids are not choice 0's
    completion_tokens, reasoning_tokens = usage_of(finals)
    assert completion.usage.completion_tokens == completion_tokens
    assert completion.usage.completion_tokens_details.reasoning_tokens == reasoning_tokens


def test_n_choices_stream_has_one_usage_chunk_and_one_done(gateway, script) -> None:
    """The raw SSE of n = 3: every choice's chunks, and the closing bytes of one choice only."""
    body = {**N_REQUEST, "stream": True, "stream_options": {"include_usage": True}}
    finals = script.expect("openai_chat", body, REASONING_AND_TWO_CALLS, PLAIN_ANSWER)
    post = urllib.request.Request(gateway + "/v1/chat/completions", json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(post, timeout=60) as reply:
        assert reply.status == 200 and reply.headers["content-type"] == "text/event-stream"
        text = reply.read().decode()
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert len(usage) == 1 and chunks[-1]["choices"] == []
    assert usage[0]["completion_tokens"] == usage_of(finals)[0]
    assert {choice["index"] for c in chunks for choice in c["choices"]} == set(range(N))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_completions_n_choices(openai_sdk, script, stream) -> None:
    """/v1/completions with n = 2: each choice's text at its index, the usage of both."""
    request = {"model": "m", "prompt": "The weather in Paris is", "n": 2}
    finals = script.expect("openai_completions", request, " mild today.", " cold and wet.")
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    if stream:
        usage = None
        for chunk in openai_sdk.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        ):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + choice.text
                reasons[choice.index] = choice.finish_reason or reasons.get(choice.index, "")
    else:
        completion = openai_sdk.completions.create(**request)
        usage = completion.usage
        texts = {choice.index: choice.text for choice in completion.choices}
        reasons = {choice.index: choice.finish_reason for choice in completion.choices}
    assert texts == {0: " mild today.", 1: " cold and wet."}
    assert texts == {i: final.message.content for i, final in enumerate(finals)}
    assert reasons == {0: "stop", 1: "stop"}
    assert usage is not None and usage.completion_tokens == usage_of(finals)[0]


# ---------------------------------------------------------------- no mapping
DIALECT_FIELDS = (
    "messages", "tools", "tool_choice", "tool_calls", "stream", "stream_options", "max_tokens", "n",
    "choices", "content", "delta", "usage", "finish_reason", "input", "output", "system", "role",
    "input_schema", "tool_use", "tool_result", "function_call", "reasoning", "thinking", "stop",
)  # fmt: skip


def test_the_gateway_maps_nothing() -> None:
    """No request field is read and no response field written by the gateway's code: it decodes
    no JSON into a struct of its own (no `json:"..."` tag), and no API field name appears in it
    as a string. The one JSON it reads is the scripted engine's table."""
    sources = {path.name: path.read_text() for path in sorted(GATEWAY_DIR.glob("*.go"))}
    assert set(sources) == {"main.go", "engine.go", "choices.go"}
    for name, source in sources.items():
        assert 'json:"' not in source, f"{name} maps JSON fields itself"
        strings = set(re.findall(r'"((?:[^"\\\n]|\\.)*)"', source))
        mapped = strings & set(DIALECT_FIELDS)
        assert not mapped, f"{name} names API fields: {mapped}"
    assert "json.Unmarshal(data, &script)" in sources["engine.go"]  # the script, nothing else
    assert sum(source.count("json.") for source in sources.values()) == 1
