"""The native engine against the reference engine, per token, in one run (same-run ratios).

Run:  python bench/native_bench.py [--runs 7] [--sizes 1,8] [--peer-bench ../shared/peer-bench]

Workloads: peer-bench's 4,096-token Qwen3 output (``corpus.py``: reasoning with CJK and code,
markdown content, 3 tool calls with long arguments), ``xml`` on the ``qwen3-coder`` preset and
``json`` on ``qwen3``, seeded with the prompt tail ``<|im_start|>assistant\\n``. Each run times one
whole request (open, feeds of SIZE ids, finish) on each engine back to back, in CPU time
(``time.thread_time``), after checking both give the same deltas and final. The caller is
peer-bench's: it reads each step's deltas (joining the tool calls' arguments) and drops the
output, as the service does once it has written its reply. Printed: µs/token of the reference,
of the native session, of the native session with ``SessionOptions.events`` off (what the
service opens unless the client asked for events), and the floor (the same loop calling a no-op
C method, ``[].count``, with each step's list); the medians of the per-run ratios native/reference
(the targets' form: below 1 is cheaper); then the native session's flat cost (µs/token of the last
500 tokens over the first 500, single-id steps), a session's open and finish with no tokens (a
3-id and a 4,000-id prompt) on both engines, and the detokenizer alone (``TokenScanner`` vs
``_core.Scanner``).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "tests")]

from parsetier import native  # noqa: E402
from parsetier.engine.detokenizer import TokenScanner  # noqa: E402
from parsetier.engine.session import Session  # noqa: E402
from parsetier.messages import SessionOptions, Tool  # noqa: E402
from parsetier.models import ModelRegistry  # noqa: E402

PROMPT_IDS = (151644, 77091, 198)
WORKLOADS = {"xml": "qwen3-coder", "json": "qwen3"}


def _corpus(peer_bench: Path):
    spec = importlib.util.spec_from_file_location("peer_corpus", peer_bench / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _whole(make, steps: list[list[int]]) -> float:
    """One whole request (open, a feed per step, finish) read as peer-bench's caller reads it:
    its CPU time."""
    clock = time.thread_time
    start = clock()
    session = make()
    calls: dict[int, str] = {}
    for step in steps:
        for delta in session.feed(step).deltas:
            for call in delta.tool_calls:
                calls[call.index] = calls.get(call.index, "") + call.arguments
    session.finish("stop")
    return clock() - start


def _floor(steps: list[list[int]]) -> float:
    """The same loop calling a no-op C method with each step's list: the least a per-call API
    can cost."""
    clock = time.thread_time
    start = clock()
    noop = [].count
    for step in steps:
        noop(step)
    return clock() - start


def _outputs(make, steps: list[list[int]]) -> tuple[list, object, object]:
    """Every step's deltas, then the last step's and the final result (events aside)."""
    session = make()
    deltas = [session.feed(step).deltas for step in steps]
    last = session.finish("stop")
    return deltas, last.deltas, last.final


def _ratio(times: dict[str, list[float]], name: str) -> float:
    """The median of the per-run ratios ``name`` / reference."""
    return statistics.median(n / r for n, r in zip(times[name], times["ref"], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sizes", default="1,8")
    parser.add_argument("--peer-bench", type=Path, default=ROOT.parent / "shared" / "peer-bench")
    args = parser.parse_args()
    corpus = _corpus(args.peer_bench)
    registry = ModelRegistry()
    tools = tuple(Tool(t["function"]["name"], t["function"]["parameters"]) for t in corpus.TOOLS)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"{'workload':8} {'size':>4} {'reference':>9} {'native':>7} {'no events':>9} {'floor':>6}"
        f" {'native/ref':>10} {'no events/ref':>13}   (µs per token; ratios: medians of per-run)"
    )
    for fmt, preset in WORKLOADS.items():
        model = registry.get(preset)
        ids = corpus.build_token_ids(model.tokenizer, fmt)
        options = SessionOptions(tools=tools, prompt_token_ids=PROMPT_IDS)
        quiet = replace(options, events=False)
        parts = native.native_parts(model)
        assert parts is not None, native.fallback_reason(preset)
        makers = {
            "ref": partial(Session, model, options),
            "nat": partial(native.NativeSession, model, options, parts),
            "quiet": partial(native.NativeSession, model, quiet, parts),
        }
        for size in sizes:
            steps = [ids[i : i + size] for i in range(0, len(ids), size)]
            want = _outputs(makers["ref"], steps)
            assert _outputs(makers["nat"], steps) == want, (fmt, size)
            assert _outputs(makers["quiet"], steps) == want, (fmt, size)
            times: dict[str, list[float]] = {name: [] for name in (*makers, "floor")}
            for _ in range(args.runs):
                for name, make in makers.items():
                    times[name].append(_whole(make, steps))
                times["floor"].append(_floor(steps))
            per = 1e6 / len(ids)
            med = {name: statistics.median(t) * per for name, t in times.items()}

            print(
                f"{fmt:8} {size:>4} {med['ref']:>9.2f} {med['nat']:>7.3f} {med['quiet']:>9.3f} "
                f"{med['floor']:>6.3f} {_ratio(times, 'nat'):>10.3f} {_ratio(times, 'quiet'):>13.3f}"
            )
    # Flat cost: per-token CPU of the last 500 single-id steps against the first 500.
    model = registry.get("qwen3-coder")
    ids = corpus.build_token_ids(model.tokenizer, "xml")
    options = SessionOptions(tools=tools, prompt_token_ids=PROMPT_IDS)
    parts = native.native_parts(model)
    assert parts is not None
    flats = []
    for _ in range(args.runs):
        session = native.NativeSession(model, options, parts)
        clock = time.thread_time_ns
        spent = []
        for tid in ids:
            t = clock()
            session.feed((tid,))
            spent.append(clock() - t)
        flats.append(sum(spent[-500:]) / sum(spent[:500]))
    print(f"flat cost (native, xml, 1 id/step): last 500 / first 500 tokens = {statistics.median(flats):.2f}")
    # A session's open and finish (no tokens), peer-bench's tools, a short and a long prompt.
    for length in (3, 4000):
        prompt = tuple(range(100_000, 100_000 + length - 3)) + PROMPT_IDS
        options = SessionOptions(tools=tools, prompt_token_ids=prompt, events=False)
        opens: dict[str, list[float]] = {"ref": [], "nat": []}
        for _ in range(args.runs):
            for name, make in (
                ("ref", partial(Session, model, options)),
                ("nat", partial(native.NativeSession, model, options, parts)),
            ):
                t = time.thread_time()
                for _ in range(50):
                    make().finish("stop")
                opens[name].append((time.thread_time() - t) / 50)
        ref, nat = (statistics.median(opens[name]) * 1e6 for name in ("ref", "nat"))
        print(
            f"open + finish, prompt of {length} ids: reference {ref:.1f} µs, native {nat:.1f} µs,"
            f" ratio {_ratio(opens, 'nat'):.2f}"
        )
    # The detokenizer alone.
    detok = native.detokenizer(model.tokenizer, model.grammar)
    ratios, ref_t, nat_t = [], [], []
    for _ in range(args.runs):
        scanner = TokenScanner(model.tokenizer, model.grammar, PROMPT_IDS)
        t = time.thread_time()
        for tid in ids:
            scanner.piece(tid)
        r = time.thread_time() - t
        fast = detok.scanner(list(PROMPT_IDS))
        t = time.thread_time()
        for tid in ids:
            fast.piece(tid)
        n = time.thread_time() - t
        ref_t.append(r)
        nat_t.append(n)
        ratios.append(r / n)
    per = 1e6 / len(ids)
    print(
        f"detokenizer per token: TokenScanner {statistics.median(ref_t) * per:.2f} µs, "
        f"_core.Scanner {statistics.median(nat_t) * per:.3f} µs (one Python call each), "
        f"ratio {statistics.median(ratios):.1f}"
    )


if __name__ == "__main__":
    main()
