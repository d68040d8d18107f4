"""The native engine against the reference engine, per token, in one run (same-run ratios).

Run:  python bench/native_bench.py [--runs 7] [--sizes 1,8] [--peer-bench ../shared/peer-bench]

Workloads: peer-bench's 4,096-token Qwen3 output (``corpus.py``: reasoning with CJK and code,
markdown content, 3 tool calls with long arguments), ``xml`` on the ``qwen3-coder`` preset and
``json`` on ``qwen3``, seeded with the prompt tail ``<|im_start|>assistant\\n``. Each run times one
whole request (open, feeds of SIZE ids, finish) on each engine back to back, in CPU time
(``time.thread_time``), after checking both give the same deltas and final. Printed: µs/token
per engine and the median of the per-run ratios reference/native (how many times cheaper the
native session is), then the native session's flat cost (µs/token of the last 500 tokens over
the first 500, single-id steps) and the detokenizer alone (``TokenScanner`` vs ``_core.Scanner``).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "tests")]

from parsetier import native  # noqa: E402
from parsetier.detokenizer import TokenScanner  # noqa: E402
from parsetier.messages import SessionOptions, Tool  # noqa: E402
from parsetier.models import ModelRegistry  # noqa: E402
from parsetier.session import Session  # noqa: E402

PROMPT_IDS = (151644, 77091, 198)
WORKLOADS = {"xml": "qwen3-coder", "json": "qwen3"}


def _corpus(peer_bench: Path):
    spec = importlib.util.spec_from_file_location("peer_corpus", peer_bench / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _whole(make, ids: list[int], size: int) -> tuple[float, list, object]:
    """One whole request (open, feeds of ``size`` ids, finish): its CPU time and its output."""
    clock = time.thread_time
    start = clock()
    session = make()
    outs = [session.feed(ids[i : i + size]) for i in range(0, len(ids), size)]
    last = session.finish("stop")
    return clock() - start, outs, last


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
        f"{'workload':8} {'size':>4} {'reference µs/tok':>17} {'native µs/tok':>14} {'ratio ref/native':>17}"
    )
    for fmt, preset in WORKLOADS.items():
        model = registry.get(preset)
        ids = corpus.build_token_ids(model.tokenizer, fmt)
        options = SessionOptions(tools=tools, prompt_token_ids=PROMPT_IDS)
        parts = native.native_parts(model)
        assert parts is not None, native.fallback_reason(preset)

        def ref(model=model, options=options):
            return Session(model, options)

        def nat(model=model, options=options, parts=parts):
            return native.NativeSession(model, options, parts)

        for size in sizes:
            _, want_outs, want = _whole(ref, ids, size)
            _, got_outs, got = _whole(nat, ids, size)
            assert [o.deltas for o in got_outs] == [o.deltas for o in want_outs], (fmt, size)
            assert got == want, (fmt, size)
            ref_t, nat_t, ratios = [], [], []
            for _ in range(args.runs):
                r, _, _ = _whole(ref, ids, size)
                n, _, _ = _whole(nat, ids, size)
                ref_t.append(r)
                nat_t.append(n)
                ratios.append(r / n)
            per = 1e6 / len(ids)
            print(
                f"{fmt:8} {size:>4} {statistics.median(ref_t) * per:>17.2f} "
                f"{statistics.median(nat_t) * per:>14.3f} {statistics.median(ratios):>17.1f}"
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
