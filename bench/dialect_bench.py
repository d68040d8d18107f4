"""Wire dialect benchmark: what rendering a session's bytes (``Open.wire``) costs per token, as a
ratio to the session's own per-token cost, measured in the same run.

Run:  PYTHONPATH=server:client/python:protos/python python bench/dialect_bench.py [--model qwen3] [--reps 5]

One real output (reasoning, content with CJK and emoji, then two tool calls) is encoded with the
model's tokenizer and fed ``--per-message`` tokens per message (1: as a decode loop sends it;
8: a speculative or batched step), on the server's default engine (the native core when built),
through the server's per-token path (``SessionProtocol.receive`` of a one-step ``ParseRequest``
writing a ``ParseResponse``, then serialized):

* **deltas**: ``Open.output`` DELTAS, no wire: the baseline;
* **deltas + <dialect>**: the same session also rendering a streamed dialect: the difference to
  the baseline is the rendering's cost;
* **bytes only, <dialect>**: ``Open.output`` FINAL_ONLY with the dialect, what a gateway that
  forwards the bytes asks for.

Each with the **server's renderer** (native for a native session: ``_core.WireRenderer``) and
with the **Python renderer** (the reference, ``parsetier/engine/wire/``: the cost before the native
one), in the same run.

* **render alone, <dialect>**: a session (the server's engine) fed the output ``--per-message``
  tokens at a time, its deltas rendered, the bytes set on a reply and serialized, minus the same
  loop without rendering: the rendering's own cost, as a ratio to the baseline's per-token cost
  (a smaller, steadier number than the difference of two whole-session timings on a busy
  machine).

Per row: CPU µs per token (median over ``--reps``; variants timed round-robin so load on a shared
machine hits them alike) and the cost over the baseline as a ratio ((with - without) / without).
The renderers consume the session's deltas whichever engine produced them. Timing only: nothing
here passes or fails.
"""

from __future__ import annotations

import json
import statistics
import time

from benchkit.one_output import arguments, workload

from parsetier.engine.wire import WireRequest, python_renderer, renderer
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model, ModelRegistry
from parsetier.native import engine, open_session
from parsetier.protocol import session as protocol_module
from parsetier.protocol.rules import Limits
from parsetier.protocol.session import SessionProtocol
from parsetier_api.v1 import parsetier_pb2 as pb

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


def run(
    model: Model, ids: list[int], output: int, dialect: int | None, per: int = 1, python: bool = False
) -> float:
    """CPU seconds to open a session, feed ``ids`` ``per`` per message and finish, every reply
    written and serialized as the server sends it. ``python``: with the Python renderer even
    where the native one would render (the reference, for the before/after ratio)."""
    open_ = pb.Open(model="bench", tools_json=json.dumps(TOOLS), output=output)
    if dialect is not None:
        open_.wire.CopyFrom(pb.WireOptions(dialect=dialect, response_id="r-1", model="m", stream=True))
    protocol = SessionProtocol(Limits())
    chosen = protocol_module.renderer
    if python:
        protocol_module.renderer = lambda request, session=None: python_renderer(request)
    try:
        start = time.process_time()
        protocol.receive(pb.ParseRequest(open=open_))
        protocol.supply_model(model)
    finally:
        protocol_module.renderer = chosen
    for at in range(0, len(ids), per):
        reply = protocol.receive(pb.ParseRequest(steps=[pb.Step(token_ids=ids[at : at + per])]))
        if reply.response is not None:
            reply.response.SerializeToString()
    last = protocol.receive(pb.ParseRequest(finish=pb.Finish()))
    assert last.response is not None
    last.response.SerializeToString()
    return time.process_time() - start


def render_alone(model: Model, ids: list[int], per: int, dialect: str | None, python: bool) -> float:
    """CPU seconds to feed a session (the server's engine) ``ids`` ``per`` per message and render
    its deltas (None: no renderer; ``python``: the Python renderer) into replies, serialized."""
    session = open_session(model, SessionOptions(tools=(Tool("get_weather", {"type": "object"}),)))
    render = None
    if dialect is not None:
        request = WireRequest(dialect, "r-1", "m", stream=True)  # type: ignore[arg-type]
        render = (python_renderer(request) if python else renderer(request, session)).step
    start = time.process_time()
    for at in range(0, len(ids), per):
        deltas = session.feed(ids[at : at + per]).deltas
        reply = pb.ParseResponse()
        if render is not None and deltas:
            wire = render(deltas)
            if wire:
                reply.wire = wire
        reply.SerializeToString()
    return time.process_time() - start


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--per-message", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()

    model = ModelRegistry().get(args.model)
    ids = workload(model, args.tokens) + model.tokenizer.encode(CALLS, add_special_tokens=False).ids
    print(f"model {args.model}, engine {engine()}: {len(ids)} tokens, median of {args.reps} runs (CPU time)")
    for per in args.per_message:
        measure(model, ids, per, args.reps)


def measure(model: Model, ids: list[int], per: int, reps: int) -> None:
    variants: dict[str, tuple[int, int | None, bool]] = {"deltas": (pb.OUTPUT_KIND_DELTAS, None, False)}
    for name, dialect in DIALECTS.items():
        for python, how in ((True, "Python"), (False, "server's")):
            variants[f"deltas + {name}, {how} renderer"] = (pb.OUTPUT_KIND_DELTAS, dialect, python)
            variants[f"bytes only, {name}, {how} renderer"] = (pb.OUTPUT_KIND_FINAL_ONLY, dialect, python)
    for output, dialect, python in variants.values():
        run(model, ids, output, dialect, per, python)  # warm caches
    alone_keys = [(None, False)] + [(key, python) for key in RENDERERS.values() for python in (True, False)]
    alone: dict[tuple[str | None, bool], list[float]] = {key: [] for key in alone_keys}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(reps):  # round-robin, so load changes hit every variant alike
        for name, (output, dialect, python) in variants.items():
            times[name].append(run(model, ids, output, dialect, per, python))
        for key, python in alone:
            alone[key, python].append(render_alone(model, ids, per, key, python))
    base = statistics.median(times["deltas"])
    print(f"\n{per} token(s) per message\n")
    print("| session | µs/token | cost over deltas alone |")
    print("|---|---:|---:|")
    for name in variants:
        took = statistics.median(times[name])
        ratio = "(baseline)" if name == "deltas" else f"{(took - base) / base:+.2f}"
        print(f"| {name} | {took / len(ids) * 1e6:.2f} | {ratio} |")
    empty = statistics.median(alone[None, False])
    for name, key in RENDERERS.items():
        for python, how in ((True, "Python"), (False, "server's")):
            took = statistics.median(alone[key, python]) - empty
            print(
                f"| render alone, {name}, {how} renderer | {took / len(ids) * 1e6:.2f} | {took / base:+.2f} |"
            )


if __name__ == "__main__":
    main()
