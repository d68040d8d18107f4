"""Engine benchmark: what streaming parsing costs per token, and that the cost does not grow.

Run:  PYTHONPATH=server python bench/engine_bench.py [--model qwen3 --model qwen3-coder] [--reps 5]

For one model family it feeds a ~4,000-token mixed output (reasoning, content, three tool calls with
long arguments) through a ``Session`` and prints:

* µs per token for **detok** (``TokenScanner.piece`` alone: ``DecodeStream`` + id classification)
  and **parse** (everything else: lexer, machine, argument streaming, assembler), at 1 and 8 tokens
  per delta;
* the cost of the **last 500 tokens vs the first 500** (per-delta cost must not grow with output
  length), and of a **delta inside a 16K-char argument vs inside a 100-char one**;
* the **replay baseline** parsetier replaces: derender-style, every chunk opens a fresh session that
  re-feeds all earlier ids and then the new chunk (O(n²) in total). Its CPU over the session's, at
  256, 1,024 and 4,096 tokens. Long replays are measured on every k-th step and scaled by k (each
  replay step is independent, so this is an unbiased estimate; the stride is printed).

Families are added by writing a workload function (model name → output texts) and listing it in
``WORKLOADS``; everything else (``bench_family``) takes a model name and output text.

Timings are CPU time (``time.process_time``) for whole runs and ``perf_counter_ns`` for single
deltas; every figure is the median over ``--reps`` repetitions. Single-process, single-thread.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

try:
    import parsetier  # noqa: F401
except ImportError:  # running from a checkout without PYTHONPATH=server
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))

from parsetier.detokenizer import TokenScanner
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model, ModelRegistry
from parsetier.session import Session

# ---------------------------------------------------------------------------------------------- workloads
_SENTENCE = (
    "the request asks for a summary of the quarterly report and a forecast for next year, so I "
    "should first read the file, then compare the numbers with last year's figures; revenue grew "
    "while costs stayed flat, which suggests the margin improved. 但是我们还需要检查数据是否完整。 "
    "Edge cases: empty rows, duplicated ids, and currency conversions (EUR → USD) 🚀."
)
_WORDS = _SENTENCE.split(" ")
_CODE = [
    "def load(path: str) -> list[dict]:",
    '    with open(path, encoding="utf-8") as f:',
    "        rows = [json.loads(line) for line in f if line.strip()]",
    '    return [r for r in rows if r.get("id") is not None]',
    "",
    "class Report:",
    '    """Quarterly report: totals per region, with a naive forecast."""',
    "    def __init__(self, rows):",
    "        self.rows = rows  # <tool_call> in a comment is just text",
    "    def total(self, region):",
    '        return sum(r["amount"] for r in self.rows if r["region"] == region)',
]


def _prose(rng: random.Random, words: int) -> str:
    out = []
    for i in range(words):
        out.append(rng.choice(_WORDS))
        if i % 17 == 16:
            out.append("\n\n" if i % 51 == 50 else "\n")
    return " ".join(out).replace(" \n", "\n").replace("\n ", "\n")


def _code(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < chars:
        lines.append(rng.choice(_CODE))
    return "\n".join(lines)[:chars]


@dataclass(frozen=True)
class Workload:
    """Output texts for one family, as the model writes them (markers included)."""

    mixed: str
    """~4,000 tokens: reasoning, content, 3 tool calls with long arguments."""
    arguments: str
    """One call with a ~100-char argument, then one with a ~16K-char argument."""
    short_span: tuple[int, int]
    """Where the short argument's value is written in ``arguments`` (character range)."""
    long_span: tuple[int, int]
    tools: tuple[Tool, ...] = ()


def _span(text: str, written: str, after: int = 0) -> tuple[int, int]:
    at = text.index(written, after)
    return at, at + len(written)


def _hermes_call(name: str, args: dict[str, object]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n</tool_call>"


def qwen3_workload() -> Workload:
    rng = random.Random(7)
    reasoning = _prose(rng, 700)
    content = _prose(rng, 250)
    calls = [
        _hermes_call("write_file", {"path": "src/report.py", "content": _code(rng, 4200)}),
        _hermes_call(
            "search", {"query": _prose(rng, 120), "filters": {"year": [2023, 2024], "exact": False}}
        ),
        _hermes_call(
            "update_rows",
            {
                "rows": [
                    {"id": i, "region": rng.choice(["EU", "US", "亚洲"]), "amount": i * 3.5}
                    for i in range(60)
                ]
            },
        ),
    ]
    mixed = f"<think>\n{reasoning}\n</think>\n\n{content}\n\n" + "\n".join(calls)
    short_value = _prose(rng, 40)[:100]
    long_value = _code(rng, 16_000)
    arguments = (
        "Writing both files.\n\n"
        + _hermes_call("note", {"text": short_value})
        + "\n"
        + _hermes_call("write_file", {"path": "big.py", "content": long_value})
    )
    short = _span(arguments, json.dumps(short_value, ensure_ascii=False)[1:-1])
    long = _span(arguments, json.dumps(long_value, ensure_ascii=False)[1:-1], short[1])
    return Workload(mixed, arguments, short, long)


def _xml_call(name: str, params: dict[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def qwen3_coder_workload() -> Workload:
    rng = random.Random(7)
    reasoning = _prose(rng, 1000)
    content = _prose(rng, 250)
    rows = json.dumps([{"id": i, "amount": i * 3.5} for i in range(60)])
    calls = [
        _xml_call("write_file", {"path": "src/report.py", "content": _code(rng, 4200)}),
        _xml_call("search", {"query": _prose(rng, 120), "limit": "20"}),
        _xml_call("update_rows", {"rows": rows}),
    ]
    mixed = f"<think>\n{reasoning}\n</think>\n\n{content}\n\n" + "\n".join(calls)
    short_value = _prose(rng, 40)[:100]
    long_value = _code(rng, 16_000)
    arguments = (
        "Writing both files.\n\n"
        + _xml_call("note", {"text": short_value})
        + "\n"
        + _xml_call("write_file", {"path": "big.py", "content": long_value})
    )
    short = _span(arguments, short_value)
    long = _span(arguments, long_value, short[1])
    schema = {"type": "object", "properties": {"limit": {"type": "integer"}, "rows": {"type": "array"}}}
    tools = (Tool("write_file"), Tool("search", schema), Tool("update_rows", schema), Tool("note"))
    return Workload(mixed, arguments, short, long, tools)


WORKLOADS: dict[str, Callable[[], Workload]] = {"qwen3": qwen3_workload, "qwen3-coder": qwen3_coder_workload}


# ---------------------------------------------------------------------------------------------- timing
def _median(fn: Callable[[], float], reps: int) -> float:
    return statistics.median(fn() for _ in range(reps))


def _groups(ids: Sequence[int], size: int) -> list[list[int]]:
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


def detok_cpu(model: Model, ids: Sequence[int]) -> float:
    """CPU seconds for ``TokenScanner.piece`` over all ids (the detokenizer stage alone)."""
    scanner = TokenScanner(model.tokenizer, model.grammar)
    piece = scanner.piece
    t = time.process_time()
    for tid in ids:
        piece(tid)
    return time.process_time() - t


def session_cpu(model: Model, options: SessionOptions, deltas: Sequence[Sequence[int]]) -> float:
    """CPU seconds for a whole streamed session: open, feed every delta, finish."""
    t = time.process_time()
    session = Session(model, options)
    for delta in deltas:
        session.feed(delta)
    session.finish()
    return time.process_time() - t


def per_delta_ns(model: Model, options: SessionOptions, deltas: Sequence[Sequence[int]]) -> list[int]:
    """Wall time of each ``feed`` call, in ns."""
    session = Session(model, options)
    out = []
    clock = time.process_time_ns  # CPU time: robust to other load on the machine
    for delta in deltas:
        t = clock()
        session.feed(delta)
        out.append(clock() - t)
    session.finish()
    return out


def replay_cpu(model: Model, options: SessionOptions, ids: Sequence[int], chunk: int, stride: int) -> float:
    """Derender-style replay: for every chunk, a fresh session re-fed all earlier ids, then the
    new chunk, then finished (a full re-parse per step). Measures every ``stride``-th step and
    scales by ``stride``."""
    ends = list(range(chunk, len(ids) + chunk, chunk))
    total = 0.0
    for step in range(stride - 1, len(ends), stride):
        end = min(ends[step], len(ids))
        start = end - chunk if end - chunk > 0 else 0
        t = time.process_time()
        session = Session(model, options)
        if start:
            session.feed(ids[:start])
        session.feed(ids[start:end])
        session.finish()
        total += time.process_time() - t
    return total * stride


def _token_span(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """Token index range whose characters lie inside ``text[start:end]``."""
    first = next(i for i, (a, _) in enumerate(offsets) if a >= start)
    last = max(i for i, (_, b) in enumerate(offsets) if b <= end)
    return first, last + 1


# ---------------------------------------------------------------------------------------------- report
@dataclass
class Row:
    label: str
    value: str
    note: str = ""


def bench_family(model_name: str, workload: Workload, reps: int, quick: bool = False) -> list[Row]:
    """Every measurement for one model and its output texts."""
    model = ModelRegistry().get(model_name)
    tok = model.tokenizer
    options = SessionOptions(tools=workload.tools)
    ids = tok.encode(workload.mixed, add_special_tokens=False).ids
    n = len(ids)
    rows: list[Row] = [Row("mixed output", f"{n} tokens", f"{len(workload.mixed)} chars")]

    # Throughput, detok vs parse.
    detok = _median(lambda: detok_cpu(model, ids), reps) / n * 1e6
    for size in (1, 8):
        deltas = _groups(ids, size)
        total = _median(lambda d=deltas: session_cpu(model, options, d), reps) / n * 1e6
        rows.append(
            Row(
                f"{size} token{'s' if size > 1 else ''}/delta",
                f"detok {detok:6.2f}  parse {total - detok:6.2f}  total {total:6.2f} µs/token",
            )
        )

    # First 500 vs last 500 tokens, 1 token per delta.
    def first_last() -> tuple[float, float]:
        times = per_delta_ns(model, options, _groups(ids, 1))
        return sum(times[:500]) / 500 / 1e3, sum(times[-500:]) / 500 / 1e3

    samples = [first_last() for _ in range(reps)]
    first = statistics.median(s[0] for s in samples)
    last = statistics.median(s[1] for s in samples)
    rows.append(
        Row("first 500 vs last 500", f"{first:6.2f} vs {last:6.2f} µs/token", f"ratio {last / first:4.2f}")
    )

    # A delta inside a 100-char argument vs inside a 16K-char argument.
    enc = tok.encode(workload.arguments, add_special_tokens=False)
    arg_ids, offsets = enc.ids, enc.offsets
    spans = {
        "100-char": _token_span(offsets, *workload.short_span),
        "16K-char": _token_span(offsets, *workload.long_span),
    }
    long_first, long_end = spans["16K-char"]
    for size in (1, 8):
        deltas = _groups(arg_ids, size)
        starts = [k * size for k in range(len(deltas))]
        # Every delta wholly inside the short value; the last 100 deltas inside the long one.
        pick = {
            label: [k for k, s in enumerate(starts) if lo <= s and s + size <= hi]
            for label, (lo, hi) in spans.items()
        }
        pick["16K-char"] = pick["16K-char"][-100:]
        per: dict[str, list[float]] = {label: [] for label in pick}
        for _ in range(reps):
            times = per_delta_ns(model, options, deltas)
            for label, ks in pick.items():
                per[label].append(statistics.median(times[k] for k in ks) / 1e3)
        short, long = statistics.median(per["100-char"]), statistics.median(per["16K-char"])
        rows.append(
            Row(
                f"delta in arg, {size}/delta",
                f"100-char {short:6.2f} vs 16K-char {long:6.2f} µs/delta",
                f"ratio {long / short:4.2f}",
            )
        )

    # Within the 16K argument: its first 500 tokens vs its last 500.
    def in_long() -> tuple[float, float]:
        times = per_delta_ns(model, options, _groups(arg_ids, 1))[long_first:long_end]
        return sum(times[:500]) / 500 / 1e3, sum(times[-500:]) / 500 / 1e3

    samples = [in_long() for _ in range(reps)]
    a, b = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
    rows.append(Row("16K arg: first vs last 500", f"{a:6.2f} vs {b:6.2f} µs/token", f"ratio {b / a:4.2f}"))

    # Replay baseline vs session, 1 and 8 tokens per chunk.
    for chunk in (1, 8):
        for length in (256, 1024, 4096):
            if length > n:
                continue
            prefix = ids[:length]
            steps = -(-length // chunk)
            stride = max(1, steps // (24 if quick else 96))
            session = _median(lambda p=prefix, c=chunk: session_cpu(model, options, _groups(p, c)), reps)
            replay = replay_cpu(model, options, prefix, chunk, stride)
            note = f"session {session * 1e3:7.1f} ms, replay {replay * 1e3:9.1f} ms"
            note += f" (sampled, stride {stride})" if stride > 1 else ""
            rows.append(Row(f"replay/session {chunk}/chunk @{length}", f"{replay / session:7.1f}×", note))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=sorted(WORKLOADS), help="default: qwen3")
    parser.add_argument("--reps", type=int, default=5, help="repetitions per figure (median)")
    parser.add_argument("--quick", action="store_true", help="fewer replay samples")
    args = parser.parse_args(argv)
    for name in args.model or ["qwen3"]:
        started = time.perf_counter()
        rows = bench_family(name, WORKLOADS[name](), args.reps, args.quick)
        print(f"\n== {name}  (python {sys.version.split()[0]}, median of {args.reps})")
        width = max(len(r.label) for r in rows)
        for r in rows:
            print(f"  {r.label:<{width}}  {r.value}  {r.note}".rstrip())
        print(f"  ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
