"""The Go example gateway (client/go/examples/gateway) end to end: the official SDKs call it over
loopback HTTP, it runs a Parse session per request against a real server and forwards the bytes
parsetier renders, and the SDKs rebuild exactly the message the same session gives the Python
client. The gateway maps nothing itself, so this is the wire dialects through a Go hop.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from service_samples import REASONING_AND_TWO_CALLS, WEATHER_TOOLS
from test_go_client import GO_DIR, go_binary, run_go

pytestmark = pytest.mark.toolchain  # builds the Go gateway example


@pytest.fixture(scope="module")
def steps(encode) -> list[list[int]]:
    ids = encode(REASONING_AND_TWO_CALLS)
    return [ids[at : at + 3] for at in range(0, len(ids), 3)]


@pytest.fixture(scope="module")
def gateway(grpc_server, steps, tmp_path_factory) -> Iterator[str]:
    """The example built and started against the shared server; its base URL."""
    go = go_binary()
    work: Path = tmp_path_factory.mktemp("gateway")
    binary = work / "gateway"
    code, output = run_go([go, "build", "-o", str(binary), "./examples/gateway"], cwd=GO_DIR)
    assert code == 0, f"go build ./examples/gateway failed:\n{output}"
    (work / "steps.json").write_text(json.dumps(steps))
    (work / "tools.json").write_text(json.dumps(WEATHER_TOOLS))
    args = ["-parsetier", grpc_server.target, "-listen", "127.0.0.1:0", "-model", "qwen3"]
    args += ["-steps", str(work / "steps.json"), "-tools", str(work / "tools.json")]
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
