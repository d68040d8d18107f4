"""A ``ParseBatch`` session's life in process, from several source trees, measured in turn: the
CPU of an open with its first token and of its finish, each tree in a process of its own, the
trees alternated round by round, so a slow phase of a shared machine hits them all.

    python -m bench.servicebench.lives /tmp/before /path/to/after    # ROUNDS=20

(from the repository's root, ``PYTHONPATH=server:client/python:protos/python``; not part of ``make bench``: it
needs the trees to compare). A round is 256 sessions opened by one message (each an ``Open`` of
the bench's workload with its first token) and finished by the next (a plain ``Finish`` each),
read as the servicer reads them (``decoding.read_batch_request``), applied by ``BatchProtocol``
with the servicer's hooks (admission, the gate, the ``session_end`` lines on ``/dev/null``,
metrics off as in the service bench) and the reply serialized; the collector set as the server
sets it. The figures are CPU µs per session (``time.thread_time``).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

SESSIONS = 256

WORKER = r"""
import json, sys, time
sys.path[:0] = [sys.argv[1] + p for p in ("/server", "/client/python", "/protos/python")] + [sys.argv[2]]
from bench.servicebench.loads import TOOLS, workload
from parsetier import native
from parsetier.protocol.batch import BatchProtocol, to_the_end
from parsetier.models import ModelRegistry
from parsetier.service import collector, logs
from parsetier.service.admission import Admission
from parsetier.service.decoding import read_batch_request
from parsetier.service.limits import Limits, SessionGate
from parsetier.service.servicer import _GatedSessions
from parsetier_api.v1 import parsetier_pb2 as pb

logs.configure(stream=open("/dev/null", "w"))
registry = ModelRegistry()
model = native.prepare(registry.get("qwen3"))
first = workload()[0]
collector.freeze_loaded()
collector.tune()
limits = Limits(max_sessions=20000, max_sessions_per_stream=4096, max_items_per_message=4096, max_loop_lag=0)
hooks = _GatedSessions(SessionGate(limits.max_sessions), Admission(0), frozenset(registry.names()))
batch = BatchProtocol(limits, hooks)
batch.models["qwen3"] = model  # as after the stream's first Open loaded it
n = int(sys.argv[3])


def run(message):
    data = message.SerializeToString()
    start = time.thread_time()
    reply = to_the_end(batch.receiving(read_batch_request(data)))
    reply if type(reply) is bytes else reply.SerializeToString()
    return (time.thread_time() - start) / n * 1e6


def life(r):
    keys = [f"r{r}-{i}" for i in range(n)]
    opens, finishes = pb.ParseBatchRequest(), pb.ParseBatchRequest()
    for key in keys:
        entry = opens.sessions.add(key=key)
        entry.open.model, entry.open.tools_json = "qwen3", TOOLS
        entry.steps.add().token_ids.append(first)
        finishes.sessions.add(key=key).finish.SetInParent()
    return run(opens), run(finishes)


life(-1), life(-2)
for r, _ in enumerate(sys.stdin):
    print(json.dumps(life(r)), flush=True)
"""


def main() -> None:
    trees = sys.argv[1:]
    if not trees:
        sys.exit("usage: python -m bench.servicebench.lives TREE [TREE...]")
    rounds = int(os.environ.get("ROUNDS", "20"))
    here = os.getcwd()
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, tree, here, str(SESSIONS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for tree in trees
    ]
    got: dict[str, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for r in range(rounds):
        order = list(zip(trees, workers, strict=True))
        for tree, worker in order if r % 2 == 0 else order[::-1]:
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
            got[tree].append(tuple(json.loads(worker.stdout.readline())))
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
    lives = {tree: [o + f for o, f in values] for tree, values in got.items()}
    for tree, values in got.items():
        opens, finishes = [o for o, _ in values], [f for _, f in values]
        print(
            f"{tree}: µs per session: open with its first token median {statistics.median(opens):.1f}"
            f" (min {min(opens):.1f}), finish {statistics.median(finishes):.1f} (min {min(finishes):.1f}),"
            f" life {statistics.median(lives[tree]):.1f} (min {min(lives[tree]):.1f})"
        )
    base = lives[trees[0]]
    for tree in trees[1:]:
        ratios = sorted(b / a for a, b in zip(base, lives[tree], strict=True))
        q = len(ratios) // 4
        print(
            f"{tree} / {trees[0]}, life, pairwise: median {statistics.median(ratios):.3f}"
            f" (quartiles {ratios[q]:.3f}-{ratios[-q - 1]:.3f})"
        )


if __name__ == "__main__":
    main()
