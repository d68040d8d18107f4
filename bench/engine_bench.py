"""Engine benchmark: what streaming parsing costs per token, per model family, and that it does not grow.

Run:  PYTHONPATH=server python bench/engine_bench.py [--family NAME ...] [--full] [--reps 5] [--quick]

The default run (a few minutes on two shared cores) prints two things:

1. The **detailed report for qwen3**, the reference family (below).
2. A **per-family table**: for every family with a preset, a ~4,200-token output written in that
   family's real syntax (reasoning where the family has it, content, three tool calls with long
   arguments), encoded with the preset's own tokenizer so markers are their special ids. Per family:
   the **floor** (``DecodeStream`` alone, one id per step, as every streaming detokenizer does it),
   then µs per token for whole sessions at 1, 2, 8 and 16 tokens per delta, and how far above the
   floor the session is at 1 and at 8; the last 500 tokens' cost over the first 500's; and the cost
   at 1 token per delta relative to qwen3's, measured in the same run, per token and per character
   (marker tokenizers, used where no real vocabulary is on PyPI, spend one token per byte, so
   per-token figures alone would flatter them). The table's last/first ratio compares different
   text (reasoning prose first, call arguments last), so it moves by a few tens of percent with the
   syntax; growth with length would put it far above that, and the detailed report's 16K-argument
   rows isolate growth from content.

``--family NAME`` (repeatable; ``--model`` is an alias) prints the detailed report for NAME and
limits the table to NAME and qwen3; ``--full`` prints the detailed report for every family.
``--check`` only builds and verifies the workloads. A run whose table covers every family (no
``--family``; what ``make bench`` runs) rewrites the table of the ``## Engine`` section of
docs/performance.md (its ``engine-families`` block) and its plot (docs/performance/engine_families.png),
keeping every hand-written subsection and the other blocks; ``--markdown FILE`` writes FILE instead (and its
plot next to it), ``--no-write`` writes nothing.
``--sessions N`` only runs every family's session at N tokens per delta, ``--reps`` times, and
prints nothing: the workload for whole-process CPU comparisons (``bench/engine_ab.py``).

The detailed report for one family:

* µs per token for the **floor** (``DecodeStream`` alone), **detok** (``TokenScanner.piece``:
  ``DecodeStream`` + id classification) and whole sessions (**total**; **parse** = total − detok) at
  1, 2, 8 and 16 tokens per delta. From 2 tokens per delta on, runs of plain ids take the fast
  path (one decoder step, one machine call per run), so the session can cost less than the floor;
* the cost of the **last 500 tokens vs the first 500** (per-delta cost must not grow with output
  length), and of a **delta inside a 16K-char argument vs inside a 100-char one**;
* the **replay baseline** parsetier replaces: derender-style, every chunk opens a fresh session that
  re-feeds all earlier ids and then the new chunk (O(n²) in total). Its CPU over the session's, at
  256, 1,024 and 4,096 tokens. Long replays are measured on every k-th step and scaled by k (each
  replay step is independent, so this is an unbiased estimate; the stride is printed).

Every figure is a ratio against a baseline measured in the same run (replay vs session, last vs
first, family vs qwen3, session vs floor) or a plain cost; nothing here passes or fails on an
absolute threshold, because absolute CPU figures depend on the machine.

Workloads are verified before they are timed: each text must decode back from its ids exactly,
contain marker tokens, and ``parse`` must give back the reasoning, content and calls it was rendered
from. A marker that tokenized as plain text, or a renderer that drifted from the format, stops the
run instead of silently timing a broken parse.

Families are added by writing a renderer (``Parts`` → output text in the family's syntax) and listing
a ``Family`` under its preset name in ``WORKLOADS``; everything else takes a model and a ``Workload``.

Timings are CPU time (``time.process_time``) for whole runs and ``process_time_ns`` for single
deltas; every figure is the median over ``--reps`` repetitions. Single-process, single-thread.
"""

from __future__ import annotations

import argparse
import json
import os
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.testkit: workloads shared with tests

from tokenizers.decoders import DecodeStream

from parsetier import native
from parsetier.engine.detokenizer import TokenScanner
from parsetier.engine.session import parse
from parsetier.messages import Message, SessionOptions, Tool
from parsetier.models import Model, ModelRegistry
from parsetier.native import open_session
from parsetier.tokenizers import tokenizer_available
from tests.testkit.format_renderers import (
    Call,
    Parts,
    hermes_call,
    raw_value,
    render_deepseek_r1,
    render_deepseek_v31,
    render_dsml,
    render_gemma4,
    render_glm47,
    render_harmony,
    render_kimi_k2,
    render_kimi_k3,
    render_llama3,
    render_llama4,
    render_minimax,
    render_mistral_tekken,
    render_mistral_v3,
    render_qwen35,
    render_seed_oss,
    xml_call,
)

BASELINE = "qwen3"
"""The family every other one is compared with (per-token cost ratio, same run)."""

_REGISTRY = ModelRegistry()
"""One registry for the whole run, so each tokenizer is loaded and each grammar bound once."""

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
    prompt: str = ""
    """Tail of the generation prompt, as text. Families whose template opens (or closes) reasoning
    in the prompt need its ids to start where a server would start them."""
    expect_mixed: Parts | None = None
    """What ``parse`` must give for ``mixed``; checked before anything is timed."""
    expect_arguments: Parts | None = None

    def options(self, model: Model) -> SessionOptions:
        prompt = model.tokenizer.encode(self.prompt, add_special_tokens=False).ids if self.prompt else []
        return SessionOptions(tools=self.tools, prompt_token_ids=tuple(prompt))


def _span(text: str, written: str, after: int = 0) -> tuple[int, int]:
    at = text.index(written, after)
    return at, at + len(written)


def _written_span(text: str, value: str, after: int = 0) -> tuple[int, int]:
    """Where a string value is written in ``text``: raw (XML-style values), JSON-escaped, or as the
    inside of a Python literal (pythonic calls), whichever the family's syntax used."""
    for form in (value, json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1]):
        if form in text[after:]:
            return _span(text, form, after)
    raise WorkloadError(f"argument value {value[:40]!r}… is not written in the text")


def qwen3_workload() -> Workload:
    rng = random.Random(7)
    reasoning = _prose(rng, 700)
    content = _prose(rng, 250)
    calls: list[Call] = [
        ("write_file", {"path": "src/report.py", "content": _code(rng, 4200)}),
        ("search", {"query": _prose(rng, 120), "filters": {"year": [2023, 2024], "exact": False}}),
        (
            "update_rows",
            {
                "rows": [
                    {"id": i, "region": rng.choice(["EU", "US", "亚洲"]), "amount": i * 3.5}
                    for i in range(60)
                ]
            },
        ),
    ]
    mixed = f"<think>\n{reasoning}\n</think>\n\n{content}\n\n" + "\n".join(hermes_call(*c) for c in calls)
    short_value = _prose(rng, 40)[:100]
    long_value = _code(rng, 16_000)
    arg_calls: list[Call] = [
        ("note", {"text": short_value}),
        ("write_file", {"path": "big.py", "content": long_value}),
    ]
    arguments = "Writing both files.\n\n" + hermes_call(*arg_calls[0]) + "\n" + hermes_call(*arg_calls[1])
    short = _span(arguments, json.dumps(short_value, ensure_ascii=False)[1:-1])
    long = _span(arguments, json.dumps(long_value, ensure_ascii=False)[1:-1], short[1])
    return Workload(
        mixed,
        arguments,
        short,
        long,
        expect_mixed=Parts(reasoning, content, tuple(calls)),
        expect_arguments=Parts("", "Writing both files.", tuple(arg_calls)),
    )


def qwen3_coder_workload() -> Workload:
    rng = random.Random(7)
    reasoning = _prose(rng, 1000)
    content = _prose(rng, 250)
    rows = [{"id": i, "amount": i * 3.5} for i in range(60)]
    calls: list[Call] = [
        ("write_file", {"path": "src/report.py", "content": _code(rng, 4200)}),
        ("search", {"query": _prose(rng, 120), "limit": 20}),
        ("update_rows", {"rows": rows}),
    ]
    mixed = f"<think>\n{reasoning}\n</think>\n\n{content}\n\n" + "\n".join(
        xml_call(name, {k: raw_value(v) for k, v in args.items()}) for name, args in calls
    )
    short_value = _prose(rng, 40)[:100]
    long_value = _code(rng, 16_000)
    arg_calls: list[Call] = [
        ("note", {"text": short_value}),
        ("write_file", {"path": "big.py", "content": long_value}),
    ]
    arguments = (
        "Writing both files.\n\n"
        + xml_call("note", {"text": short_value})
        + "\n"
        + xml_call("write_file", {"path": "big.py", "content": long_value})
    )
    short = _span(arguments, short_value)
    long = _span(arguments, long_value, short[1])
    schema = {"type": "object", "properties": {"limit": {"type": "integer"}, "rows": {"type": "array"}}}
    tools = (Tool("write_file"), Tool("search", schema), Tool("update_rows", schema), Tool("note"))
    return Workload(
        mixed,
        arguments,
        short,
        long,
        tools,
        expect_mixed=Parts(reasoning, content, tuple(calls)),
        expect_arguments=Parts("", "Writing both files.", tuple(arg_calls)),
    )


# ---------------------------------------------------------------------------------------------- families
# Every other family renders the same ``Parts`` (the qwen3 workload's mix: prose reasoning, prose
# content, a 4K-char file, a prose query with typed extras, a 60-row array), scaled so the encoded
# output is ~4,200 tokens in that family's own vocabulary. The renderers follow the format files'
# header comments and the family tests (tests/test_family_*.py).

TOOLS: tuple[Tool, ...] = tuple(
    Tool(name, {"type": "object", "properties": props})
    for name, props in {
        "write_file": {"path": {"type": "string"}, "content": {"type": "string"}},
        "search": {"query": {"type": "string"}, "limit": {"type": "integer"}, "filters": {"type": "object"}},
        "update_rows": {"rows": {"type": "array"}},
        "note": {"text": {"type": "string"}},
    }.items()
)
"""The workloads' tools. XML-style families type raw values by these schemas (``limit`` → 20)."""

TARGET_TOKENS = 4_200
"""Mixed-output length: ~4,000 tokens, and at least 4,096 so every family has the replay @4,096."""


def _mixed_parts(scale: float, reasoning: bool) -> Parts:
    """The mixed output's parts at ``scale`` (1.0 ≈ the qwen3 workload's sizes). A family without
    reasoning writes the same prose as its answer, so the text/argument mix stays comparable."""
    rng = random.Random(7)
    think = _prose(rng, round(700 * scale)).strip()
    content = _prose(rng, round(250 * scale)).strip()
    calls: tuple[Call, ...] = (
        ("write_file", {"path": "src/report.py", "content": _code(rng, round(4200 * scale)).strip()}),
        (
            "search",
            {
                "query": _prose(rng, round(120 * scale)).strip(),
                "limit": 20,
                "filters": {"year": [2023, 2024], "exact": False},
            },
        ),
        (
            "update_rows",
            {
                "rows": [
                    {"id": i, "region": rng.choice(["EU", "US", "亚洲"]), "amount": i * 3.5}
                    for i in range(round(60 * scale))
                ]
            },
        ),
    )
    if not reasoning:
        return Parts("", f"{think}\n\n{content}", calls)
    return Parts(think, content, calls)


def _argument_parts(reasoning: bool) -> Parts:
    """One call with a ~100-char value, then one with a 16K-char value (the O(1)-per-delta check)."""
    rng = random.Random(11)
    short_value = _prose(rng, 40)[:100].strip()
    long_value = _code(rng, 16_000).strip()
    calls: tuple[Call, ...] = (
        ("note", {"text": short_value}),
        ("write_file", {"path": "big.py", "content": long_value}),
    )
    return Parts("Two files to write." if reasoning else "", "Writing both files.", calls)


@dataclass(frozen=True)
class Family:
    """How one family writes an output: a renderer, whether it reasons, the generation prompt's tail."""

    render: Callable[[Parts], str]
    reasoning: bool = True
    prompt: str = ""

    def workload(self, model: Model) -> Workload:
        """Render the parts, scaled until the output is ~``TARGET_TOKENS`` in the model's vocabulary."""
        scale = 1.0
        for _ in range(4):
            expect = _mixed_parts(scale, self.reasoning)
            mixed = self.render(expect)
            n = len(model.tokenizer.encode(mixed, add_special_tokens=False).ids)
            if 4_096 <= n <= 4_600:
                break
            scale *= TARGET_TOKENS / n
        expect_args = _argument_parts(self.reasoning)
        arguments = self.render(expect_args)
        short = _written_span(arguments, expect_args.calls[0][1]["text"])
        long = _written_span(arguments, expect_args.calls[1][1]["content"], short[1])
        return Workload(mixed, arguments, short, long, TOOLS, self.prompt, expect, expect_args)


def _fixed(build: Callable[[], Workload]) -> Callable[[Model], Workload]:
    """A hand-written workload that does not depend on the vocabulary (the Qwen3 originals)."""
    return lambda _model: build()


WORKLOADS: dict[str, Callable[[Model], Workload]] = {
    "qwen3": _fixed(qwen3_workload),
    "qwen3-coder": _fixed(qwen3_coder_workload),
    "qwen3.5": Family(render_qwen35, prompt="<|im_start|>assistant\n<think>\n").workload,
    "deepseek-r1": Family(render_deepseek_r1).workload,
    "deepseek-v3.1": Family(render_deepseek_v31, reasoning=False).workload,
    "deepseek-v3.2": Family(render_dsml("function_calls"), prompt="<｜Assistant｜><think>").workload,
    "deepseek-v4": Family(render_dsml("tool_calls"), prompt="<｜Assistant｜><think>").workload,
    "glm-4.7": Family(render_glm47, prompt="<|assistant|><think>").workload,
    "minimax-m2": Family(render_minimax, prompt="]~b]ai\n<think>\n").workload,
    "seed-oss": Family(render_seed_oss).workload,
    "kimi-k2.6": Family(render_kimi_k2, prompt="<|im_assistant|>assistant<|im_middle|><think>").workload,
    "kimi-k3": Family(
        render_kimi_k3, prompt='<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
    ).workload,
    "gemma-4": Family(render_gemma4, prompt="<|turn>model\n").workload,
    "gpt-oss": Family(render_harmony).workload,
    "llama3": Family(render_llama3, reasoning=False).workload,
    "llama4": Family(render_llama4, reasoning=False).workload,
    "magistral-small": Family(render_mistral_tekken).workload,
    "mistral-7b-v0.3": Family(render_mistral_v3, reasoning=False).workload,
}
"""Preset name → its workload. qwen3 first: it is the baseline of the per-family table."""


class WorkloadError(Exception):
    """A workload does not parse as rendered: timing it would measure a broken parse."""


def _differences(got: Message, want: Parts) -> list[str]:
    out = []
    if got.reasoning.strip() != want.reasoning.strip():
        out.append(f"reasoning {got.reasoning[:60]!r}… ≠ {want.reasoning[:60]!r}…")
    if got.content.strip() != want.content.strip():
        out.append(f"content {got.content[:60]!r}… ≠ {want.content[:60]!r}…")
    names = [c.name for c in got.tool_calls]
    if names != [n for n, _ in want.calls]:
        out.append(f"calls {names} ≠ {[n for n, _ in want.calls]}")
    else:
        for call, (name, args) in zip(got.tool_calls, want.calls, strict=True):
            try:
                value = json.loads(call.arguments)
            except ValueError:
                value = f"invalid JSON {call.arguments[:60]!r}…"
            if value != args:
                out.append(f"{name} arguments {str(value)[:80]}… ≠ {str(args)[:80]}…")
    return out


def verify(model: Model, workload: Workload) -> None:
    """Raise ``WorkloadError`` unless both texts round-trip through the tokenizer, carry marker ids,
    and parse back into what they were rendered from."""
    options = workload.options(model)
    tok = model.tokenizer
    for label, text, want in (
        ("mixed", workload.mixed, workload.expect_mixed),
        ("arguments", workload.arguments, workload.expect_arguments),
    ):
        ids = tok.encode(text, add_special_tokens=False).ids
        problems = []
        if tok.decode(ids, skip_special_tokens=False) != text:
            problems.append("ids do not decode back to the text")
        if not any(t in model.grammar.sentinel_of_id for t in ids):
            problems.append("no marker came out as its special id")
        if want is not None:
            message, _, _ = parse(model, options, ids)
            problems += _differences(message, want)
        if problems:
            raise WorkloadError(f"{model.name} {label}: " + "; ".join(problems))


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


def floor_cpu(model: Model, ids: Sequence[int]) -> float:
    """CPU seconds for ``DecodeStream`` alone, one id per step: the floor of per-token detokenizing."""
    stream = DecodeStream(skip_special_tokens=False)
    step, tok = stream.step, model.tokenizer
    t = time.process_time()
    for tid in ids:
        step(tok, tid)
    return time.process_time() - t


SIZES = (1, 2, 8, 16)
"""Tokens per delta the throughput figures are measured at."""


def session_cpu(model: Model, options: SessionOptions, deltas: Sequence[Sequence[int]]) -> float:
    """CPU seconds for a whole streamed session: open, feed every delta, finish."""
    t = time.process_time()
    session = open_session(model, options)
    for delta in deltas:
        session.feed(delta)
    session.finish()
    return time.process_time() - t


def per_delta_ns(model: Model, options: SessionOptions, deltas: Sequence[Sequence[int]]) -> list[int]:
    """CPU time of each ``feed`` call, in ns."""
    session = open_session(model, options)
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
        session = open_session(model, options)
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


@dataclass(frozen=True)
class Throughput:
    """µs per token: the floor (``DecodeStream`` alone), the detokenizer stage alone, and whole
    sessions at each delta size."""

    floor: float
    detok: float
    total: dict[int, float]

    def parse(self, size: int) -> float:
        return self.total[size] - self.detok


def throughput(model: Model, options: SessionOptions, ids: Sequence[int], reps: int) -> Throughput:
    n = len(ids)
    floor = _median(lambda: floor_cpu(model, ids), reps) / n * 1e6
    detok = _median(lambda: detok_cpu(model, ids), reps) / n * 1e6
    total = {}
    for size in SIZES:
        deltas = _groups(ids, size)
        total[size] = _median(lambda d=deltas: session_cpu(model, options, d), reps) / n * 1e6
    return Throughput(floor, detok, total)


def first_last(model: Model, options: SessionOptions, ids: Sequence[int], reps: int) -> tuple[float, float]:
    """µs/token over the first 500 and the last 500 tokens, 1 token per delta (medians)."""

    def once() -> tuple[float, float]:
        times = per_delta_ns(model, options, _groups(ids, 1))
        return sum(times[:500]) / 500 / 1e3, sum(times[-500:]) / 500 / 1e3

    samples = [once() for _ in range(reps)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


# ---------------------------------------------------------------------------------------------- report
@dataclass
class Row:
    label: str
    value: str
    note: str = ""


def load(name: str) -> tuple[Model, Workload]:
    """The preset's model and its verified workload."""
    model = _REGISTRY.get(name)
    workload = WORKLOADS[name](model)
    verify(model, workload)
    open_session(model, workload.options(model))  # the native tables, built once, outside any timing
    return model, workload


def bench_family(model_name: str, workload: Workload, reps: int, quick: bool = False) -> list[Row]:
    """Every measurement for one model and its output texts."""
    model = _REGISTRY.get(model_name)
    tok = model.tokenizer
    options = workload.options(model)
    ids = tok.encode(workload.mixed, add_special_tokens=False).ids
    n = len(ids)
    rows: list[Row] = [Row("mixed output", f"{n} tokens", f"{len(workload.mixed)} chars")]

    # Throughput, detok vs parse.
    speed = throughput(model, options, ids, reps)
    rows.append(Row("floor", f"DecodeStream alone {speed.floor:6.2f} µs/token", "one id per step"))
    for size in SIZES:
        rows.append(
            Row(
                f"{size} token{'s' if size > 1 else ''}/delta",
                f"detok {speed.detok:6.2f}  parse {speed.parse(size):6.2f}  "
                f"total {speed.total[size]:6.2f} µs/token",
                f"{speed.total[size] / speed.floor:4.2f}× floor",
            )
        )

    # First 500 vs last 500 tokens, 1 token per delta.
    first, last = first_last(model, options, ids, reps)
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


def print_report(name: str, workload: Workload, reps: int, quick: bool) -> None:
    started = time.perf_counter()
    rows = bench_family(name, workload, reps, quick)
    print(f"\n== {name}  (python {sys.version.split()[0]}, median of {reps})")
    width = max(len(r.label) for r in rows)
    for r in rows:
        print(f"  {r.label:<{width}}  {r.value}  {r.note}".rstrip())
    print(f"  ({time.perf_counter() - started:.1f} s)")


@dataclass(frozen=True)
class Summary:
    """One family's line in the per-family table."""

    name: str
    format: str
    tokens: int
    chars: int
    speed: Throughput
    first: float
    last: float

    @property
    def us_per_char(self) -> float:
        return self.speed.total[1] * self.tokens / self.chars


def summarize(names: Sequence[str], reps: int) -> list[Summary]:
    """One ``Summary`` per family, measured round-robin: each repetition times every family once,
    so a burst of load on the machine is spread over all rows instead of hitting a few neighbours,
    and the ratios to the baseline row stay meaningful. Same measurements as the detailed report's."""
    runs = []
    for name in names:
        model, workload = load(name)
        ids = model.tokenizer.encode(workload.mixed, add_special_tokens=False).ids
        runs.append((name, model, workload, workload.options(model), ids))
    samples: dict[str, list[tuple[float, ...]]] = {name: [] for name in names}
    for rep in range(reps):
        # Each round starts one family later, so no family always runs first (right after the
        # previous round's last) and a position effect lands on a different row every round.
        start = rep % len(runs)
        for name, model, _workload, options, ids in runs[start:] + runs[:start]:
            n = len(ids)
            floor = floor_cpu(model, ids) / n * 1e6
            detok = detok_cpu(model, ids) / n * 1e6
            totals = [session_cpu(model, options, _groups(ids, size)) / n * 1e6 for size in SIZES]
            times = per_delta_ns(model, options, _groups(ids, 1))
            first, last = sum(times[:500]) / 500 / 1e3, sum(times[-500:]) / 500 / 1e3
            samples[name].append((floor, detok, *totals, first, last))
    out = []
    for name, model, workload, _options, ids in runs:
        floor, detok, *totals, first, last = (
            statistics.median(col) for col in zip(*samples[name], strict=True)
        )
        speed = Throughput(floor, detok, dict(zip(SIZES, totals, strict=True)))
        out.append(Summary(name, model.spec.format, len(ids), len(workload.mixed), speed, first, last))
    return out


def table_lines(summaries: Sequence[Summary], markdown: bool = False) -> list[str]:
    """The per-family table (plain text, or a Markdown table); ratios are against the baseline
    family's row and the floor of the same run."""
    base = next((s for s in summaries if s.name == BASELINE), None)
    head = ["family", "format", "tokens", "ch/tok", "floor", *(f"@{k}" for k in SIZES)]
    head += ["@1/floor", "@8/floor", f"×{BASELINE}/tok", f"×{BASELINE}/ch", "last/first"]
    rows = []
    for s in summaries:
        sp = s.speed
        rows.append(
            [s.name, s.format, str(s.tokens), f"{s.chars / s.tokens:.2f}", f"{sp.floor:.2f}"]
            + [f"{sp.total[k]:.2f}" for k in SIZES]
            + [f"{sp.total[1] / sp.floor:.2f}", f"{sp.total[8] / sp.floor:.2f}"]
            + [
                f"{sp.total[1] / base.speed.total[1]:.2f}" if base else "—",
                f"{s.us_per_char / base.us_per_char:.2f}" if base else "—",
                f"{s.last / s.first:.2f}",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  " + "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    return [line(head), "  " + "-" * (len(line(head)) - 2), *(line(r) for r in rows)]


def print_table(summaries: Sequence[Summary], reps: int) -> None:
    print(
        f"\n== per family  (python {sys.version.split()[0]}, median of {reps}; µs/token, CPU; floor = "
        f"DecodeStream alone, one id per step;\n   @k = whole session at k tokens per delta; ×{BASELINE} = "
        f"@1 over {BASELINE}'s in this run, per token and per character; last/first = last 500 tokens "
        "over the first 500, @1)"
    )
    print("\n".join(table_lines(summaries)))


ENGINE_HEADING = "## Engine"
DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
PLOT = "performance/engine_families.png"
"""The plot's path relative to the Markdown file (as the Service section's plots are)."""
BLOCK = "engine-families"
"""This table's generated block of the page (``docblock``): text outside it is kept."""


PYTHON = sys.version.split()[0]


def write_markdown(path: Path, summaries: Sequence[Summary], reps: int) -> None:
    """Replace (or add) the generated table of the ``## Engine`` section of ``path`` (its
    ``engine-families`` block); hand-written text and other blocks stay as they are."""
    from benchkit.docblock import replace_block

    body = [
        "Generated by `bench/engine_bench.py` (`make bench`): CPU µs per token of a whole streamed",
        f"session on the {native.engine()} engine (median of {reps}, python {PYTHON}), on each",
        "family's ~4,200-token mixed output. floor = `DecodeStream` alone, one id per step; @k = k tokens",
        f"per delta; ×{BASELINE} = @1 over {BASELINE}'s, per token and per character; last/first = the",
        "last 500 tokens over the first 500 at @1. The machine is shared: compare ratios within the table.",
        "",
        *table_lines(summaries, markdown=True),
        "",
        f"![engine µs per token per family]({PLOT})",
    ]
    replace_block(BLOCK, "bench/engine_bench.py", "\n".join(body), ENGINE_HEADING, path)
    plot(path.parent / PLOT, summaries, reps)


def plot(path: Path, summaries: Sequence[Summary], reps: int) -> None:
    """Per family: the floor and the whole session at each delta size, µs per token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    series = [("floor (DecodeStream alone)", [s.speed.floor for s in summaries])]
    for k in SIZES:
        series.append((f"{k} token{'s' if k > 1 else ''}/delta", [s.speed.total[k] for s in summaries]))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, (label, values) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar([j + offset for j in range(len(summaries))], values, width, label=label)
    ax.set_xticks(range(len(summaries)), [s.name for s in summaries], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("CPU µs per token")
    ax.set_title(f"Whole streamed session per family, by tokens per delta (median of {reps})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _available(name: str) -> bool:
    spec = next(s for s in _REGISTRY.specs() if s.name == name)
    return tokenizer_available(spec.tokenizer)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--family",
        "--model",
        action="append",
        choices=list(WORKLOADS),
        metavar="NAME",
        help=f"detailed report for this family (repeatable); one of: {', '.join(WORKLOADS)}",
    )
    parser.add_argument("--full", action="store_true", help="detailed report for every family")
    parser.add_argument(
        "--reps",
        type=int,
        default=int(os.environ.get("BENCH_ENGINE_REPS") or 5),
        help="repetitions per figure (median; default $BENCH_ENGINE_REPS or 5)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer replay samples")
    parser.add_argument("--check", action="store_true", help="only build and verify the workloads")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="write the table as FILE's '## Engine' (default: docs/performance.md)",
    )
    parser.add_argument("--no-write", action="store_true", help="write no Markdown and no plot")
    parser.add_argument(
        "--sessions",
        metavar="N,M",
        help="only run every session at these tokens/delta and print µs/token as JSON (for engine_ab)",
    )
    parser.add_argument("--no-detail", action="store_true", help="the table only, no detailed report")
    parser.add_argument(
        "--engine",
        choices=native.ENGINES,
        default=os.environ.get("BENCH_ENGINE") or "native",
        help="the engine sessions run on (default $BENCH_ENGINE or native, the one the server serves)",
    )
    args = parser.parse_args(argv)
    native.set_engine(args.engine)

    started = time.perf_counter()
    names = [n for n in WORKLOADS if _available(n)]
    for missing in (n for n in WORKLOADS if n not in names):
        print(f"  (skipping {missing}: its tokenizer is not installed)")
    detailed = names if args.full else [n for n in args.family or [BASELINE] if n in names]
    table = names if args.full or not args.family else [n for n in names if n in {BASELINE, *args.family}]

    if args.sessions:
        sizes = [int(x) for x in args.sessions.split(",")]
        loaded = [(name, *load(name)) for name in table]
        timings: dict[str, dict[str, float]] = {str(size): {} for size in sizes}
        for size in sizes:
            for name, model, workload in loaded:
                ids = model.tokenizer.encode(workload.mixed, add_special_tokens=False).ids
                deltas = _groups(ids, size)
                runs = [session_cpu(model, workload.options(model), deltas) for _ in range(args.reps)]
                timings[str(size)][name] = statistics.median(runs) / len(ids) * 1e6 if runs else 0.0
        print(json.dumps(timings))
        return 0

    if args.check:
        for name in table:
            model, workload = load(name)
            ids = model.tokenizer.encode(workload.mixed, add_special_tokens=False).ids
            print(f"  {name:<16} ok: {len(ids)} tokens, {len(workload.mixed)} chars, 3 calls parse back")
        return 0

    for name in [] if args.no_detail else detailed:
        print_report(name, load(name)[1], args.reps, args.quick)
    summaries = summarize(table, args.reps)
    print_table(summaries, args.reps)
    target = args.markdown or (DOC if not args.family else None)
    if target is not None and not args.no_write:
        write_markdown(target, summaries, args.reps)
        print(f"  (wrote the '{ENGINE_HEADING}' section of {target} and its plot)")
    print(f"\n  (total {time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
