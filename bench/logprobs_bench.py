"""Logprob benchmark: what resolving logprobs costs per token, as a ratio to parsing alone.

Run:  PYTHONPATH=server:client/python:protos/python python bench/logprobs_bench.py [--model qwen3] [--reps 5]

One real output (reasoning, content with CJK and emoji, so byte pieces occur) is encoded with the
model's tokenizer and fed one token per step, as a decode loop sends it, to fresh sessions:

* **parse**: ``Session.feed(ids)``, the baseline;
* **+ logprobs, top-k = 0 / 5 / 20**: ``Session.feed(ids, StepLogprobs(...))`` with k alternatives
  per token (ids drawn from the vocabulary, so most are whole-token lookups, as real alternatives
  are);
* the same with the reply built and serialized as the server sends it (``delta_to_pb`` +
  ``SerializeToString``), against serializing the parse-only reply.

Per row: CPU µs per token (median over ``--reps``; the variants are timed round-robin so load on a
shared machine hits them alike), and the extra cost of logprobs over the baseline measured in the
same run, as a ratio ((with - without) / without). Timing only: nothing here passes or fails.
"""

from __future__ import annotations

import random
import statistics
import time

from benchkit.one_output import arguments, workload

from parsetier.convert import delta_to_pb
from parsetier.engine.session import Session
from parsetier.messages import SessionOptions, StepLogprobs
from parsetier.models import Model, ModelRegistry
from parsetier_api.v1 import parsetier_pb2 as pb


def steps_for(ids: list[int], k: int, vocab: int, seed: int = 0) -> list[StepLogprobs]:
    rng = random.Random(seed)
    return [
        StepLogprobs(
            (-0.25,), tuple(rng.randrange(vocab) for _ in range(k)), tuple(-1.0 - j for j in range(k))
        )
        for _ in ids
    ]


def run(model: Model, ids: list[int], steps: list[StepLogprobs] | None, serialize: bool) -> float:
    """CPU seconds to feed ``ids`` one per step (with ``steps``' logprobs) and finish."""
    session = Session(model, SessionOptions())
    start = time.process_time()
    for i, tid in enumerate(ids):
        out = session.feed([tid], steps[i] if steps is not None else None)
        if serialize:
            pb.ParseResponse(deltas=[delta_to_pb(d) for d in out.deltas]).SerializeToString()
    session.finish()
    return time.process_time() - start


def main() -> None:
    parser = arguments(__doc__)
    args = parser.parse_args()

    model = ModelRegistry().get(args.model)
    ids = workload(model, args.tokens)
    print(f"model {args.model}: {len(ids)} tokens, one per step, median of {args.reps} runs (CPU time)\n")
    print("| workload | µs/token | logprobs' extra cost / parsing alone |")
    print("|---|---:|---:|")
    for serialize in (False, True):
        variants: dict[int | None, list[StepLogprobs] | None] = {None: None}
        variants.update({k: steps_for(ids, k, model.vocab_size) for k in (0, 5, 20)})
        run(model, ids, variants[20], serialize)  # warm the byte vocabulary's caches
        times: dict[int | None, list[float]] = {k: [] for k in variants}
        for _ in range(args.reps):  # round-robin, so load changes hit every variant alike
            for k, steps in variants.items():
                times[k].append(run(model, ids, steps, serialize))
        base = statistics.median(times[None])
        label = "parse + reply serialized" if serialize else "parse"
        print(f"| {label} | {base / len(ids) * 1e6:.2f} | (baseline) |")
        for k in (0, 5, 20):
            took = statistics.median(times[k])
            per_token, ratio = took / len(ids) * 1e6, (took - base) / base
            print(f"| {label} + logprobs, top-k {k} | {per_token:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
