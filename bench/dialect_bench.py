"""Wire dialect benchmark: what rendering a session's bytes (``Open.wire``) costs per token, as a
ratio to the session's own per-token cost, measured in the same run.

Run:  PYTHONPATH=server:client/python python bench/dialect_bench.py [--model qwen3] [--reps 5]

One real output (reasoning, content with CJK and emoji, then two tool calls) is encoded with the
model's tokenizer and fed one token per message, as a decode loop sends it, through the server's
per-token path (``SessionProtocol.feed_ids`` writing a ``ParseResponse``, then serialized):

* **deltas**: ``Open.output`` DELTAS, no wire: the baseline;
* **deltas + <dialect>**: the same session also rendering a streamed dialect: the difference to
  the baseline is the rendering's cost;
* **bytes only, <dialect>**: ``Open.output`` FINAL_ONLY with the dialect, what a gateway that
  forwards the bytes asks for.

* **render alone, <dialect>**: the renderer fed the deltas that output produced, one token's at a
  time, with the bytes set on a reply and serialized, minus the same loop without rendering: the
  rendering's own cost, as a ratio to the baseline's per-token cost (a smaller, steadier number
  than the difference of two whole-session timings on a busy machine).

Per row: CPU µs per token (median over ``--reps``; variants timed round-robin so load on a shared
machine hits them alike) and the cost over the baseline as a ratio ((with - without) / without).
The renderers consume the session's deltas whichever engine produced them. Timing only: nothing
here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from parsetier.dialects import WireRequest, renderer
from parsetier.messages import Delta, SessionOptions, Tool
from parsetier.models import Model, ModelRegistry
from parsetier.protocol import Limits, SessionProtocol
from parsetier.session import Session
from parsetier_api.v1 import parsetier_pb2 as pb

TEXT = (
    "<think>\nThe user asks about the weather in 東京 and Paris. Let me think about what to say: "
    "temperatures, rain 🌧️, and a short summary. 天気はどうですか? Maybe add an emoji 🎉👍🏽.\n</think>\n\n"
)
ANSWER = "In 東京 it is 18°C with light rain 🌧️; in Paris 21°C and sunny ☀️. Have a nice day 🎉! "
CALLS = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京", "unit": "celsius"}}\n</tool_call>'
)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
RENDERERS = {"OpenAI chat": "openai_chat", "Anthropic Messages": "anthropic_messages"}
RENDERERS["OpenAI Responses"] = "openai_responses"
DIALECTS = {
    "OpenAI chat": pb.WIRE_DIALECT_OPENAI_CHAT,
    "Anthropic Messages": pb.WIRE_DIALECT_ANTHROPIC_MESSAGES,
    "OpenAI Responses": pb.WIRE_DIALECT_OPENAI_RESPONSES,
}


def workload(model: Model, tokens: int) -> list[int]:
    tok = model.tokenizer
    ids = tok.encode(TEXT, add_special_tokens=False).ids
    answer = tok.encode(ANSWER, add_special_tokens=False).ids
    while len(ids) < tokens:
        ids += answer
    return ids[:tokens] + tok.encode(CALLS, add_special_tokens=False).ids


def run(model: Model, ids: list[int], output: int, dialect: int | None) -> float:
    """CPU seconds to open a session, feed ``ids`` one per message and finish, every reply
    written and serialized as the server sends it."""
    open_ = pb.Open(model="bench", tools_json=json.dumps(TOOLS), output=output)
    if dialect is not None:
        open_.wire.CopyFrom(pb.WireOptions(dialect=dialect, response_id="r-1", model="m", stream=True))
    protocol = SessionProtocol(Limits())
    start = time.process_time()
    protocol.receive(pb.ParseRequest(open=open_))
    protocol.supply_model(model)
    for tid in ids:
        reply = pb.ParseResponse()
        if protocol.feed_ids((tid,), reply):
            reply.SerializeToString()
    last = protocol.receive(pb.ParseRequest(finish=pb.Finish()))
    assert last.response is not None
    last.response.SerializeToString()
    return time.process_time() - start


def token_deltas(model: Model, ids: list[int]) -> list[list[Delta]]:
    """The deltas each token produced, as the renderer is fed them."""
    session = Session(model, SessionOptions(tools=(Tool("get_weather", {"type": "object"}),)))
    return [session.feed([tid]).deltas for tid in ids]


def render_alone(steps: list[list[Delta]], dialect: str | None) -> float:
    """CPU seconds to render ``steps`` (None: no renderer) into replies, serialized."""
    render = renderer(WireRequest(dialect, "r-1", "m", stream=True)).step if dialect else None  # type: ignore[arg-type]
    start = time.process_time()
    for deltas in steps:
        reply = pb.ParseResponse()
        if render is not None and deltas:
            wire = render(deltas)
            if wire:
                reply.wire = wire
        reply.SerializeToString()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()

    model = ModelRegistry().get(args.model)
    ids = workload(model, args.tokens)
    variants: dict[str, tuple[int, int | None]] = {"deltas": (pb.OUTPUT_KIND_DELTAS, None)}
    for name, dialect in DIALECTS.items():
        variants[f"deltas + {name}"] = (pb.OUTPUT_KIND_DELTAS, dialect)
        variants[f"bytes only, {name}"] = (pb.OUTPUT_KIND_FINAL_ONLY, dialect)
    for output, dialect in variants.values():
        run(model, ids, output, dialect)  # warm caches
    steps = token_deltas(model, ids)
    alone: dict[str | None, list[float]] = {name: [] for name in [None, *RENDERERS.values()]}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.reps):  # round-robin, so load changes hit every variant alike
        for name, (output, dialect) in variants.items():
            times[name].append(run(model, ids, output, dialect))
        for key in alone:
            alone[key].append(render_alone(steps, key))
    base = statistics.median(times["deltas"])
    print(f"model {args.model}: {len(ids)} tokens, one per message, median of {args.reps} runs (CPU time)\n")
    print("| session | µs/token | cost over deltas alone |")
    print("|---|---:|---:|")
    for name in variants:
        took = statistics.median(times[name])
        ratio = "(baseline)" if name == "deltas" else f"{(took - base) / base:+.2f}"
        print(f"| {name} | {took / len(ids) * 1e6:.2f} | {ratio} |")
    empty = statistics.median(alone[None])
    for name, key in RENDERERS.items():
        took = statistics.median(alone[key]) - empty
        print(f"| render alone, {name} | {took / len(ids) * 1e6:.2f} | {took / base:+.2f} |")


if __name__ == "__main__":
    main()
