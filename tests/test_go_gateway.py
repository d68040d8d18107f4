"""The Go example gateway (client/go/examples/gateway) end to end: the official SDKs call it over
loopback HTTP, it runs a Parse session per request against a real server and forwards the bytes
parsetier renders, and the SDKs rebuild exactly the message the same session gives the Python
client. The gateway maps nothing itself, so this is the wire dialects through a Go hop. A request
with ``n`` > 1 is one session per choice, and the SDKs see every choice at its index with the
usage of all of them.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from service_samples import PLAIN_ANSWER, REASONING_AND_TWO_CALLS, WEATHER_TOOLS
from test_go_client import GO_DIR, go_binary, run_go

pytestmark = pytest.mark.toolchain  # builds the Go gateway example


@pytest.fixture(scope="module")
def steps(encode) -> list[list[int]]:
    ids = encode(REASONING_AND_TWO_CALLS)
    return [ids[at : at + 3] for at in range(0, len(ids), 3)]


@pytest.fixture(scope="module")
def answer_steps(encode) -> list[list[int]]:
    """The engine output of the second choice (``-steps`` given twice: choice i replays the
    (i mod 2)-th)."""
    ids = encode(PLAIN_ANSWER)
    return [ids[at : at + 2] for at in range(0, len(ids), 2)]


@pytest.fixture(scope="module")
def gateway(grpc_server, steps, answer_steps, tmp_path_factory) -> Iterator[str]:
    """The example built and started against the shared server; its base URL."""
    go = go_binary()
    work: Path = tmp_path_factory.mktemp("gateway")
    binary = work / "gateway"
    code, output = run_go([go, "build", "-o", str(binary), "./examples/gateway"], cwd=GO_DIR)
    assert code == 0, f"go build ./examples/gateway failed:\n{output}"
    (work / "steps.json").write_text(json.dumps(steps))
    (work / "answer.json").write_text(json.dumps(answer_steps))
    (work / "tools.json").write_text(json.dumps(WEATHER_TOOLS))
    args = ["-parsetier", grpc_server.target, "-listen", "127.0.0.1:0", "-model", "qwen3"]
    args += ["-steps", str(work / "steps.json"), "-steps", str(work / "answer.json")]
    args += ["-tools", str(work / "tools.json")]
    proc = subprocess.Popen([str(binary), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
def reference(client, steps):
    """The same session through the Python client: what the SDKs must rebuild."""
    return client.parse_stream("qwen3", steps, tools=WEATHER_TOOLS, request_id="chatcmpl-1")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_openai_sdk_through_the_go_gateway(gateway, reference, stream) -> None:
    sdk = openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "weather?"}]
    request = {"model": "my-model", "messages": messages, "tools": WEATHER_TOOLS}
    if stream:
        with sdk.chat.completions.stream(**request, stream_options={"include_usage": True}) as events:
            kinds = {event.type for event in events}
            completion = events.get_final_completion()
        assert "tool_calls.function.arguments.delta" in kinds  # the arguments streamed in pieces
    else:
        completion = sdk.chat.completions.create(**request)
    assert completion.model == "my-model" and completion.id.startswith("chatcmpl-")
    (choice,) = completion.choices
    want = reference.final.message
    assert (choice.message.content, choice.message.reasoning_content) == (want.content, want.reasoning)
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls]
    assert calls == [(c.name, c.arguments) for c in want.tool_calls]
    # The ids derive from the gateway's own request ids: OpenAI's prefix, one per call.
    ids = [c.id for c in choice.message.tool_calls]
    assert all(i.startswith("call_") and len(i) == 29 for i in ids) and len(set(ids)) == len(ids)
    assert choice.finish_reason == "tool_calls"
    assert completion.usage.completion_tokens == reference.final.usage.completion_tokens


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_anthropic_sdk_through_the_go_gateway(gateway, reference, stream) -> None:
    sdk = anthropic.Anthropic(base_url=gateway, api_key="unused", max_retries=0)
    request = {"model": "my-model", "max_tokens": 256, "messages": [{"role": "user", "content": "weather?"}]}
    if stream:
        with sdk.messages.stream(**request) as events:
            for _ in events:
                pass
            reply = events.get_final_message()
    else:
        reply = sdk.messages.create(**request)
    message = reference.final.message
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert (reply.content[0].thinking, reply.content[1].text) == (message.reasoning, message.content)
    uses = [(b.name, b.input) for b in reply.content[2:]]
    assert all(b.id.startswith("toolu_") for b in reply.content[2:])
    assert uses == [(c.name, json.loads(c.arguments)) for c in message.tool_calls]
    assert reply.stop_reason == "tool_use"


# ------------------------------------------------------------------------------------- n > 1
N = 3  # choices 0 and 2 replay the calls, choice 1 the plain answer


@pytest.fixture(scope="module")
def choice_references(client, steps, answer_steps):
    """Each choice's session through the Python client (choice_index i, its own output)."""
    outputs = [steps, answer_steps]
    options = {"tools": WEATHER_TOOLS, "request_id": "chatcmpl-n"}
    return [client.parse_stream("qwen3", outputs[i % 2], choice_index=i, **options) for i in range(N)]


def usage_of(references) -> tuple[int, int]:
    return (
        sum(r.final.usage.completion_tokens for r in references),
        sum(r.final.usage.reasoning_tokens for r in references),
    )


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_openai_sdk_n_choices_through_the_go_gateway(gateway, choice_references, stream) -> None:
    """n = 3: every choice at its index with its own message and finish reason, the calls of the
    two choices that replay the same output with ids of their own, and one usage that counts every
    choice (the last choice's Finish carried the others' usage)."""
    sdk = openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0)
    request = {"model": "my-model", "messages": [{"role": "user", "content": "weather?"}], "n": N}
    if stream:
        with sdk.chat.completions.stream(
            **request, tools=WEATHER_TOOLS, stream_options={"include_usage": True}
        ) as events:
            for _ in events:
                pass
            completion = events.get_final_completion()
    else:
        completion = sdk.chat.completions.create(**request, tools=WEATHER_TOOLS)
    assert [choice.index for choice in completion.choices] == list(range(N))
    for choice, reference in zip(completion.choices, choice_references, strict=True):
        want = reference.final.message
        assert (choice.message.content or "", choice.message.reasoning_content or "") == (
            want.content,
            want.reasoning,
        )
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()]
        assert calls == [(c.name, c.arguments) for c in want.tool_calls]
        assert choice.finish_reason == ("tool_calls" if want.tool_calls else "stop")
    ids = [c.id for choice in completion.choices for c in choice.message.tool_calls or ()]
    assert len(ids) == 4 and len(set(ids)) == 4  # choice 2's ids are not choice 0's
    completion_tokens, reasoning_tokens = usage_of(choice_references)
    assert completion.usage.completion_tokens == completion_tokens
    assert completion.usage.completion_tokens_details.reasoning_tokens == reasoning_tokens


def test_n_choices_stream_has_one_usage_chunk_and_one_done(gateway, choice_references) -> None:
    """The raw SSE of n = 3: every choice's chunks, and the closing bytes of one choice only."""
    body = {"model": "m", "messages": [], "n": N, "stream": True, "stream_options": {"include_usage": True}}
    post = urllib.request.Request(gateway + "/v1/chat/completions", json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(post, timeout=60) as reply:
        assert reply.status == 200 and reply.headers["content-type"] == "text/event-stream"
        text = reply.read().decode()
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert len(usage) == 1 and chunks[-1]["choices"] == []
    assert usage[0]["completion_tokens"] == usage_of(choice_references)[0]
    assert {choice["index"] for c in chunks for choice in c["choices"]} == set(range(N))


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_completions_n_choices_through_the_go_gateway(gateway, client, steps, answer_steps, stream) -> None:
    """/v1/completions with n = 2: each choice's text at its index, the usage of both."""
    outputs = [steps, answer_steps]
    want = [client.parse_stream("qwen3", outputs[i], completion=True, choice_index=i) for i in range(2)]
    sdk = openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0)
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    if stream:
        usage = None
        for chunk in sdk.completions.create(
            model="m", prompt="hi", n=2, stream=True, stream_options={"include_usage": True}
        ):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + choice.text
                reasons[choice.index] = choice.finish_reason or reasons.get(choice.index, "")
    else:
        completion = sdk.completions.create(model="m", prompt="hi", n=2)
        usage = completion.usage
        texts = {choice.index: choice.text for choice in completion.choices}
        reasons = {choice.index: choice.finish_reason for choice in completion.choices}
    assert texts == {i: w.final.message.content for i, w in enumerate(want)}
    assert reasons == {0: "stop", 1: "stop"}
    assert usage is not None and usage.completion_tokens == usage_of(want)[0]
