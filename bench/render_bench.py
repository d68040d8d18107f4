"""Render benchmark: ``Render`` through the service against ``apply_chat_template(tokenize=True)`` in
process, on Qwen3 conversations of about 1k, 8k and 32k prompt tokens, as ratios measured in one run.

Run:  PYTHONPATH=server:client/python:protos/python:tests python bench/render_bench.py \
      [--reps 5] [--model qwen3]

* **baseline**: transformers' tokenizer of the packaged files, ``apply_chat_template(messages,
  tools=..., add_generation_prompt=True, tokenize=True)`` in this process (no gRPC, no JSON);
* **Render, whole**: the same conversation as an OpenAI chat body through a ``parsetier serve``
  subprocess on loopback (client wall time: JSON, gRPC, reading, template, tokenization), its
  first user message varied per repetition so that no cached prefix applies;
* **Render, next turn**: the conversation rendered once, then the next turn (the assistant's reply
  and a new user message appended), as a chat client sends it: the prefix cache applies;
* **server CPU per prompt token**: the server process's CPU time over the whole renders, per prompt
  token.

Medians over ``--reps``; variants timed round-robin so load on a shared machine hits them alike.
Timing only: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(ROOT / "server"),
    str(ROOT / "client" / "python"),
    str(ROOT / "protos" / "python"),
    str(ROOT / "tests"),
]

import grpc  # noqa: E402

from parsetier.tokenizers import packaged  # noqa: E402
from parsetier_api.v1 import parsetier_pb2 as pb  # noqa: E402
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc  # noqa: E402
from testkit.procfs import cpu_seconds  # noqa: E402
from testkit.servers import ProcessServer  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
USER = "Tell me about the weather in Paris and 東京 this week, and what to wear 🌧️. "
ANSWER = (
    "In Paris it will be mild, 18 to 22 °C with some rain on Wednesday; in 東京 warmer and humid. "
    "Bring a light jacket and an umbrella ☂️. "
)


def conversation(tokens: int, salt: str) -> list[dict]:
    """About ``tokens`` prompt tokens of alternating turns (a tool call every few turns)."""
    messages = [{"role": "system", "content": f"You are a helpful assistant ({salt})."}]
    turn = 0
    while len(json.dumps(messages)) < tokens * 4.1:
        messages.append({"role": "user", "content": USER * 3 + f"(turn {turn})"})
        if turn % 3 == 2:
            call = {"id": f"c{turn}", "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}  # fmt: skip
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": '{"temp": 21}'})
        messages.append({"role": "assistant", "content": ANSWER * 4})
        turn += 1
    messages.append({"role": "user", "content": USER})
    return messages


def body(messages: list[dict]) -> bytes:
    def wire(m: dict) -> dict:
        if not m.get("tool_calls"):
            return m
        calls = [{**c, "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])}}
                 for c in m["tool_calls"]]  # fmt: skip
        return {**m, "tool_calls": calls}

    return json.dumps({"model": "m", "messages": [wire(m) for m in messages], "tools": TOOLS}).encode()


def reference(model: str):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(packaged.data_file(model).parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--model", default="qwen3")
    args = parser.parse_args()
    tok = reference(args.model)
    with ProcessServer("--workers", "1", "--preload", args.model) as server:
        pid = server.pids()[0]
        channel = grpc.insecure_channel(
            server.target, options=[("grpc.max_receive_message_length", 64 << 20)]
        )
        stub = pb_grpc.ParserServiceStub(channel)

        def render(messages: list[dict]) -> tuple[float, int]:
            request = pb.RenderRequest(
                model=args.model, dialect=pb.WIRE_DIALECT_OPENAI_CHAT, request_json=body(messages)
            )
            start = time.perf_counter()
            reply = stub.Render(request, timeout=120)
            return time.perf_counter() - start, reply.prompt_tokens

        render(conversation(500, "warm-up"))
        columns = ("prompt tokens", "baseline ms", "Render whole ms", "ratio", "next turn ms", "next / whole")
        print("| " + " | ".join((*columns, "server CPU µs / token")) + " |")
        print("|---|---|---|---|---|---|---|")
        for size in (1000, 8000, 32000):
            base, whole, nexts, cpu, counted = [], [], [], 0.0, 0
            for rep in range(args.reps):
                messages = conversation(size, f"rep {rep} of {size}")
                start = time.perf_counter()
                ids = tok.apply_chat_template(
                    messages, tools=TOOLS, add_generation_prompt=True, tokenize=True, return_dict=False
                )
                base.append(time.perf_counter() - start)
                before = cpu_seconds(pid)
                seconds, count = render(messages)
                cpu += cpu_seconds(pid) - before
                counted += count
                assert count == len(ids), (count, len(ids))
                whole.append(seconds)
                following = [
                    *messages,
                    {"role": "assistant", "content": ANSWER},
                    {"role": "user", "content": USER},
                ]
                nexts.append(render(following)[0])
            b, w, n = (statistics.median(x) * 1000 for x in (base, whole, nexts))
            print(f"| {counted // args.reps} | {b:.1f} | {w:.1f} | {w / b:.2f} | {n:.1f} | {n / w:.2f} | "
                  f"{cpu / counted * 1e6:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
