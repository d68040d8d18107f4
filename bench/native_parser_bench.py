"""Native parser vs the reference engine, per piece: the parse alone (machine + assembler), no
detokenization, at 1 token per delta.

Run:  PYTHONPATH=server:bench:tests python bench/native_parser_bench.py [--family NAME ...] [--reps 5]

Each family's ~4,200-token ``mixed`` workload (``engine_bench.WORKLOADS``) runs once through a
reference ``Session``, one id per ``feed``, recording every piece its ``Machine`` is fed. The same
steps are then timed three ways, in the same run: the reference ``Machine`` + ``Assembler`` (a
fresh pair per repetition, ``feed`` per piece and ``add`` per step), the native parser driven
through its piece API (``_core.Parser.feed`` / ``deliver``, Python tuples out), and the native
parser running every step in one call (``run_steps``: the engine's own cost, no Python objects,
timed inside the engine).
Figures are µs per piece (median CPU time over ``--reps``) and ratios to the reference.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import engine_bench as eb

from parsetier import _core
from parsetier.engine.assembler import Assembler
from parsetier.engine.call_ids import call_id_seed
from parsetier.engine.describe import describe_config, describe_grammar
from parsetier.engine.machine import Machine
from parsetier.engine.session import Session, _tool_schemas
from parsetier.messages import SessionOptions
from parsetier.models import Model, ModelRegistry


def record(model: Model, options: SessionOptions, ids: list[int]) -> tuple[str, list[list[tuple[str, int]]]]:
    """The start state and the reference session's machine input, step by step."""
    session = Session(model, options)
    start = session._machine._state.name
    steps: list[list[tuple[str, int]]] = []
    feed = session._machine.feed_piece

    def rec(text: str, tokens: int = 0) -> Any:
        steps[-1].append((text, tokens))
        return feed(text, tokens)

    session._machine.feed_piece = rec  # type: ignore[method-assign]
    for tid in ids:
        steps.append([])
        session.feed([tid])
    return start, steps


def _cpu(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def bench(name: str, reps: int) -> tuple[float, float, float, int]:
    model = ModelRegistry().get(name)
    workload = eb.WORKLOADS[name](model)
    tok = model.tokenizer
    prompt_ids = tuple(tok.encode(workload.prompt, add_special_tokens=False).ids) if workload.prompt else ()
    options = SessionOptions(tools=workload.tools, prompt_token_ids=prompt_ids, request_id="bench")
    ids = tok.encode(workload.mixed, add_special_tokens=False).ids
    start, steps = record(model, options, ids)
    pieces = sum(len(s) for s in steps)
    schemas = _tool_schemas(options)
    grammar = _core.Grammar(describe_grammar(model.grammar))
    config = describe_config(start, schemas, call_id_seed=call_id_seed(options))

    def reference() -> None:
        machine, assembler = Machine(model.grammar, start, schemas), Assembler(options)
        for step in steps:
            events = []
            for text, tokens in step:
                events += machine.feed_piece(text, tokens)
            if events:
                assembler.add(events)

    def native_api() -> None:
        parser = _core.Parser(grammar, config)
        for step in steps:
            for text, tokens in step:
                parser.feed(text, tokens)
            parser.deliver()

    def native_engine() -> float:
        """Wall time of the steps inside the engine (``run_steps`` measures it)."""
        return _core.Parser(grammar, config).run_steps(steps)[2] / 1e9

    per = 1e6 / pieces
    return (
        _cpu(reference, reps) * per,
        _cpu(native_api, reps) * per,
        statistics.median(native_engine() for _ in range(reps)) * per,
        pieces,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", action="append", default=[])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    names = args.family or ["qwen3", "qwen3-coder"]
    print(
        f"{'family':<16}{'pieces':>8}{'ref µs':>9}{'api µs':>9}{'engine µs':>11}{'api/ref':>9}{'eng/ref':>9}"
    )
    for name in names:
        ref, api, eng, pieces = bench(name, args.reps)
        row = f"{name:<16}{pieces:>10}{ref:>10.2f}{api:>10.2f}{eng:>10.3f}"
        print(row + f"{api / ref:>10.3f}{eng / ref:>10.3f}")


if __name__ == "__main__":
    main()
