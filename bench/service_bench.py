"""Service benchmark: what a token, a message and a session cost the server, against the ceiling of
a same-proto echo server measured in the same run, and what it costs in memory.

Run:  python bench/service_bench.py [--quick] [--no-write]

Writes the "## Service" section of docs/performance.md (tables, PNG plots under
docs/performance/) unless ``--no-write``; other sections of that file are left as they are.

Every figure is a ratio against a baseline of the same run, or a plain cost:

1. **Echo ceiling.** ``Parse`` at 1, 4 and 16 tokens per message and ``ParseBatch`` at 64, 256 and
   1,024 sessions × 1 token per step, parsetier vs an echo server speaking the same proto (it
   answers every message with a reply of the same shape and parses nothing). Throughput is tokens
   per second of *server CPU* (``/proc``), so a shared, noisy machine changes it little; the server
   is pinned to one core and the load generator to the other.
2. **Server CPU** per token, per message and per session item, and the per-item cost beyond the
   session's own parsing (the engine's sessions, ``native.open_session``, fed the same tokens in this
   process).
3. **Paced load**, one token per session per step, at a fixed rate, from the Go load program
   ``client/go/cmd/parsetier-paced`` (built with ``go build``): the server's own step-to-reply
   latency histogram (``--metrics-port``) at p50, p99 and p99.9, with the client's round trip.
4. **Memory** per open session, idle and mid-tool-call, for both RPCs (server RSS growth / sessions).
5. **Workers**: tokens per server-CPU-second with 1 and 2 workers; RSS per worker, and the
   proportional set size (PSS, shared pages split between the processes) in total, for 1 and 4
   workers, with the models loaded before the fork and lazily in each worker.

The machine is shared with other developers: absolute numbers move with their load; the ratios
move much less. ``--quick`` runs a smaller version of everything (for a smoke test).

Sizes (environment, for a busy machine): ``BENCH_CEILING_ROUNDS`` rounds of the echo ceiling
(default 3), ``BENCH_BATCH_STEPS`` steps of its ``ParseBatch`` 256 × 1 run (default 2,000; other
session counts scale it), ``BENCH_SERVICE_STEPS`` a comma-separated list of the steps to run
(``echo ceiling``, ``server CPU``, ``paced load``, ``memory per session``, ``worker scaling``,
``worker memory``; default all; ``server CPU`` needs ``echo ceiling``). Each step writes its own
block of the page; a step not run leaves its block as it was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchkit.paths import use_repository

ROOT = use_repository()

from benchkit.docblock import env_int  # noqa: E402
from servicebench.launcher import (  # noqa: E402
    CLIENT_CPU,
    SERVER_CPU,
    echo_server,
    lazy_workers_server,
    parsetier_server,
    run_echo_server,
    run_lazy_workers,
)
from servicebench.loads import (  # noqa: E402
    TOOLS,
    batch_load,
    batch_step,
    measured,
    opens,
    parse_load,
    workload,
)
from servicebench.memory import SESSIONS, per_session  # noqa: E402
from servicebench.report import Results, plots, report, write_section  # noqa: E402

from parsetier.native import open_session  # noqa: E402
from parsetier_api.v1 import parsetier_pb2 as pb  # noqa: E402
from tests.testkit.servers import ProcessServer  # noqa: E402

BATCH_STEPS = {False: env_int("BENCH_BATCH_STEPS", 2000), True: 30}
"""Steps of the ``ParseBatch`` 256 × 1 run (by ``--quick``); other session counts scale it. Sized
so that the echo server's run at 1,024 sessions takes a few tenths of a CPU second: the servers'
CPU is read from ``/proc`` in clock ticks (10 ms), and with the native core 130 steps took
0.03-0.1 s, too few ticks to tell the servers apart."""


ENTRIES_256 = "256 sessions x 1 token/step, as entries"
"""The 256 × 1 load with every step a ``SessionInput`` entry instead of a packed item."""


CEILING_ROUNDS = {False: env_int("BENCH_CEILING_ROUNDS", 3), True: 1}
"""Alternated native/reference/echo runs of each case (by ``--quick``): the figures are their
medians."""

SERVERS = ("parsetier", "reference", "echo")
"""The echo ceiling's servers: ``parsetier`` on its default (native) engine, ``parsetier serve
--engine reference``, and the echo server."""


def echo_ceiling(results: Results, ids: list[int]) -> None:
    """Each case on parsetier (native engine), on parsetier's reference engine and on the echo
    server in turn, all up on the same core (only one loaded at a time), ``CEILING_ROUNDS`` times:
    each ratio is the median of the rounds' ratios, so the machine's load, which drifts over a
    run, moves every part of a round alike."""
    q = results.quick
    cases = [("Parse", f"{k} tokens/message", k) for k in (1, 4, 16)]
    cases += [("ParseBatch", f"{n} sessions x 1 token/step", n) for n in (64, 256, 1024)]
    cases += [("ParseBatch", ENTRIES_256, 256)]
    with (
        parsetier_server() as parsetier,
        parsetier_server(extra=("--engine", "reference")) as reference,
        echo_server() as echo,
    ):
        servers = {"parsetier": parsetier, "reference": reference, "echo": echo}
        for rpc, label, n in cases:
            runs: dict[str, list[tuple[int, float, float]]] = {kind: [] for kind in SERVERS}
            for _ in range(CEILING_ROUNDS[q]):
                for kind, server in servers.items():
                    if rpc == "Parse":
                        rounds = 1 if q else 9  # ~32k tokens at any size: enough clock ticks
                        load = parse_load(server.target, ids, n, streams=32, rounds=rounds)
                    else:
                        steps = (BATCH_STEPS[q] - 10) * 256 // n + 10
                        load = batch_load(server.target, ids, n, steps=steps, packed=label != ENTRIES_256)
                    tokens, cpu, wall = measured(server, load)
                    print(f"  {kind} {rpc} {label}: {tokens} tokens, {cpu:.2f} s CPU", file=sys.stderr)
                    runs[kind].append((tokens, cpu, wall))
            row: dict[str, float] = {}
            for kind, got in runs.items():
                row[kind] = statistics.median(t / c for t, c, _ in got)
                row[kind + "_cpu_us"] = statistics.median(c / t * 1e6 for t, c, _ in got)
                row[kind + "_wall"] = statistics.median(t / w for t, _, w in got)
            for name, kind, base in (
                ("ratio", "parsetier", "echo"),
                ("reference_ratio", "reference", "echo"),
                ("native_reference", "parsetier", "reference"),
            ):
                pairs = zip(runs[kind], runs[base], strict=True)
                row[name] = statistics.median((t / c) / (bt / bc) for (t, c, _), (bt, bc, _) in pairs)
            results.ceiling.append({"rpc": rpc, "load": label, **row})


def in_process_costs(ids: list[int], reps: int, steps: int, sessions: int = 256) -> tuple[float, float]:
    """µs of CPU per item, in this process, of the ``ParseBatch`` 256 × 1 workload (the messages
    ``batch_load`` sends, its opening message included): (the sessions' own parsing: each
    session made (``native.open_session``: the default engine's), fed one token per step and
    finished, called directly;
    ``BatchProtocol.receive`` of the messages with the server's session hooks, its reply
    serialized, minus the parsing). Alternated; the medians of the parsing and of the per-pair
    differences (the machine's load moves both halves of a pair alike)."""
    from parsetier.messages import SessionOptions, Tool
    from parsetier.models import ModelRegistry
    from parsetier.protocol.batch import BatchProtocol
    from parsetier.protocol.rules import Limits
    from parsetier.service import logs
    from parsetier.service.admission import Admission
    from parsetier.service.limits import SessionGate
    from parsetier.service.servicer import _GatedSessions

    model = ModelRegistry().get("qwen3")
    tools = tuple(Tool(name=n, parameters={"type": "object"}) for n in ("get_weather", "get_time"))
    sink = Path(os.devnull).open("w")  # noqa: SIM115 -- the server logs each session's end; so does this
    logs.configure("INFO", sink)
    limits = Limits(max_sessions=20000, max_sessions_per_stream=4096, max_items_per_message=4096)

    def direct() -> float:
        started = time.process_time()
        live = [open_session(model, SessionOptions(tools=tools)) for _ in range(sessions)]
        position = [i % len(ids) for i in range(sessions)]
        tokens = 0
        for _ in range(steps):
            for i in range(sessions):
                p = position[i]
                if p == len(ids):
                    live[i].finish("stop")
                    position[i] = -1
                    continue
                if p == -1:
                    live[i], p = open_session(model, SessionOptions(tools=tools)), 0
                live[i].feed([ids[p]])
                position[i] = p + 1
                tokens += 1
        return (time.process_time() - started) / tokens * 1e6

    def protocol() -> float:
        hooks = _GatedSessions(SessionGate(limits.max_sessions), Admission(0), frozenset(["qwen3"]))
        batch = BatchProtocol(limits, hooks)
        batch.models["qwen3"] = model
        keys = [f"s{i}" for i in range(sessions)]
        position = [i % len(ids) for i in range(sessions)]
        messages, tokens = [opens(keys)], 0
        for _ in range(steps):
            message, n = batch_step(keys, position, ids)
            messages.append(message)
            tokens += n
        messages = [pb.ParseBatchRequest.FromString(m.SerializeToString()) for m in messages]
        started = time.process_time()
        for message in messages:
            batch.receive(message).SerializeToString()
        return (time.process_time() - started) / tokens * 1e6

    pairs = [(direct(), protocol()) for _ in range(reps)]
    logging.getLogger("parsetier").handlers.clear()
    sink.close()
    return statistics.median(d for d, _ in pairs), statistics.median(r - d for d, r in pairs)


def steady_costs(ids: list[int], reps: int, steps: int = 50, sessions: int = 256) -> dict[str, float]:
    """µs of CPU per item of engine steps alone (no session opens or ends), in this process:
    ``sessions`` sessions already open, each stepped one token per message ``steps`` times, fed
    directly (the default engine's sessions), and as ``BatchProtocol.receive`` of the same steps,
    packed and as entries (messages decoded from bytes, replies serialized). Alternated; the median of the
    direct feeds and of each form's per-round difference from them."""
    from parsetier.messages import SessionOptions, Tool
    from parsetier.models import ModelRegistry
    from parsetier.protocol.batch import BatchProtocol
    from parsetier.protocol.rules import Limits

    model = ModelRegistry().get("qwen3")
    tools = tuple(Tool(name=n, parameters={"type": "object"}) for n in ("get_weather", "get_time"))
    start = [i % (len(ids) - steps) for i in range(sessions)]
    keys = [f"s{i}" for i in range(sessions)]
    limits = Limits(max_sessions_per_stream=4096, max_items_per_message=4096)

    def direct() -> float:
        live = [open_session(model, SessionOptions(tools=tools)) for _ in range(sessions)]
        for i in range(sessions):
            live[i].feed(ids[: start[i]])
        started = time.process_time()
        for step in range(steps):
            for i in range(sessions):
                live[i].feed([ids[start[i] + step]])
        return (time.process_time() - started) / (sessions * steps) * 1e6

    def protocol(packed: bool) -> float:
        batch = BatchProtocol(limits)
        batch.models["qwen3"] = model
        opening = opens(keys)
        for i, entry in enumerate(opening.sessions):
            entry.steps.add().token_ids.extend(ids[: start[i]])
        batch.receive(opening)
        messages = []
        for step in range(steps):
            message = pb.ParseBatchRequest()
            stepped = [ids[start[i] + step] for i in range(sessions)]
            if packed:
                message.packed.keys.extend(keys)
                message.packed.token_ids.extend(stepped)
            else:
                for key, token in zip(keys, stepped, strict=True):
                    message.sessions.add(key=key).steps.add().token_ids.append(token)
            messages.append(message.SerializeToString())
        started = time.process_time()
        for data in messages:
            batch.receive(pb.ParseBatchRequest.FromString(data)).SerializeToString()
        return (time.process_time() - started) / (sessions * steps) * 1e6

    rounds = [(direct(), protocol(True), protocol(False)) for _ in range(reps)]
    return {
        "feed": statistics.median(d for d, _, _ in rounds),
        "packed": statistics.median(p - d for d, p, _ in rounds),
        "entries": statistics.median(e - d for d, _, e in rounds),
    }


def cpu_costs(results: Results, ids: list[int]) -> None:
    by = {(r["rpc"], r["load"]): r for r in results.ceiling}
    per_message = by[("Parse", "1 tokens/message")]["parsetier_cpu_us"]
    per_token_16 = by[("Parse", "16 tokens/message")]["parsetier_cpu_us"]
    per_item = by[("ParseBatch", "256 sessions x 1 token/step")]["parsetier_cpu_us"]
    echo_item = by[("ParseBatch", "256 sessions x 1 token/step")]["echo_cpu_us"]
    feed, protocol = in_process_costs(ids, 3 if results.quick else 7, BATCH_STEPS[results.quick])
    receive = feed + protocol
    steady = steady_costs(ids, 3 if results.quick else 9)
    results.cpu = {
        "steady_feed": steady["feed"],
        "steady_packed": steady["packed"],
        "steady_entries": steady["entries"],
        "entries_item": by[("ParseBatch", ENTRIES_256)]["parsetier_cpu_us"],
        "per_message": per_message,
        "per_token_16": per_token_16,
        "per_item": per_item,
        "echo_item": echo_item,
        "feed": feed,
        "receive": receive,
        "protocol": protocol,
        "transport": per_item - receive,
        "beyond_parsing": per_item - feed,
    }


PACED_BINARY = ROOT / "build" / "bench" / "parsetier-paced"
PACED_CASES = [
    # rpc, sessions, steps/s, workers, channels (the kernel hashes each connection to a worker:
    # 4 reach both of 2 with probability 7/8; the table shows the replies by worker)
    ("Parse", 250, 20.0, 1, 1),
    ("Parse", 250, 20.0, 2, 4),
    ("ParseBatch", 1000, 20.0, 1, 1),
    ("ParseBatch", 1000, 20.0, 2, 4),
    # the same 1,000 sessions as 16 and 32 streams (an engine per stream, their steps spread
    # over the period): a message's latency is its sessions times their cost
    ("ParseBatch", 1000, 20.0, 1, 16),
    ("ParseBatch", 1000, 20.0, 1, 32),
]
PROBE = Path(__file__).resolve().parent / "machine_probe.py"


def _scrape(port: int, rpc: str) -> dict[float | str, float]:
    """The server's ``parsetier_reply_latency_seconds`` histogram for ``rpc``, summed over models
    and workers: cumulative count by upper bound (``le``); and each worker's count, by
    ``"worker N"``."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    buckets: dict[float, float] = {}
    pattern = re.compile(r"^parsetier_reply_latency_seconds_bucket\{(.*)\} (\S+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if labels.get("rpc") == rpc:
            le = float(labels["le"])
            buckets[le] = buckets.get(le, 0.0) + float(match.group(2))
            if le == float("inf"):
                worker = f"worker {labels.get('worker')}"
                buckets[worker] = buckets.get(worker, 0.0) + float(match.group(2))
    return buckets


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' ``histogram_quantile``: the bucket the q-th observation falls in, linearly
    interpolated between its bounds (the highest finite bound when it is in the +Inf bucket)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = bound, count
    return lower


def paced(results: Results, ids: list[int]) -> None:
    """Paced load from the Go load program (``client/go/cmd/parsetier-paced``): one token per
    session per step at a fixed rate. The figure the targets name is server-side: the server's own
    ``reply_latency_seconds`` histogram (``--metrics-port``; from reading a client message to
    writing its reply), scraped after the warm-up and at the end. The Go program's round trip
    (write to reply, on loopback) and how late its pacer wrote come with it."""
    if shutil.which("go") is None:
        results.notes.append("Paced load not measured: no Go toolchain to build its load program.")
        return
    PACED_BINARY.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["go", "build", "-o", str(PACED_BINARY), "./cmd/parsetier-paced"],
        cwd=ROOT / "client" / "go",
        check=True,
    )
    seconds, warmup = (8.0, 2.0) if results.quick else (20.0, 4.0)
    ids_file = PACED_BINARY.parent / "paced-ids.txt"
    ids_file.write_text(" ".join(map(str, ids)))
    for rpc, sessions, rate, workers, channels in PACED_CASES:
        pin = SERVER_CPU if workers == 1 else None
        with parsetier_server(workers, pin, extra=("--metrics-port", "0")) as server:
            server.wait_for_log("metrics listening", timeout=60)
            port = next(r["port"] for r in server.logs if r.get("msg") == "metrics listening")
            argv = [str(PACED_BINARY), "-server", server.target, "-ids", str(ids_file), "-tools-json", TOOLS]
            argv += ["-rpc", "parse" if rpc == "Parse" else "batch", "-sessions", str(sessions)]
            argv += ["-rate", str(rate), "-seconds", str(seconds), "-warmup", str(warmup)]
            argv += ["-channels", str(channels)]
            load = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, preexec_fn=_pin_client(pin))
            time.sleep(warmup)
            before, cpu, wall = _scrape(port, rpc), server.cpu(), time.monotonic()
            out, _ = load.communicate()
            after, cpu, wall = _scrape(port, rpc), server.cpu() - cpu, time.monotonic() - wall
            if load.returncode != 0:
                raise RuntimeError(f"parsetier-paced failed: {argv}")
            client = json.loads(out)
            window = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in after}
            split = "+".join(f"{n:.0f}" for key, n in sorted(window.items(), key=str) if isinstance(key, str))
            window = {le: n for le, n in window.items() if isinstance(le, float)}
            server_ms = tuple(histogram_quantile(q, window) * 1000 for q in (0.5, 0.99, 0.999))
            print(
                f"  paced {rpc} {sessions} x {rate:g}/s, {workers} workers: {server_ms}, {client}",
                file=sys.stderr,
            )
            probe = machine_probe(server_ms[0], rate, seconds, pin)
            results.paced.append(
                {
                    "rpc": rpc,
                    "load": f"{sessions} sessions x {rate:g} steps/s",
                    "workers": workers,
                    "channels": channels,
                    "split": split,
                    "server": server_ms,
                    "replies": window.get(float("inf"), 0.0),
                    "client": (client["p50"], client["p99"], client["p999"]),
                    "late": client["late_p99"],
                    "cpu": cpu / wall,
                    "machine": (probe["p50"], probe["p99"], probe["p999"]),
                }
            )


def machine_probe(job_ms: float, rate: float, seconds: float, pin: int | None) -> dict:
    """The machine's own tail for work of ``job_ms`` (``machine_probe.py``): a fixed job of that
    size, at the paced rate, on the core the server had (anywhere when it was not pinned)."""
    argv = [sys.executable, str(PROBE), "--job-ms", f"{job_ms:.3f}", "--rate", str(rate)]
    out = subprocess.run(
        [*argv, "--seconds", str(seconds)],
        check=True,
        capture_output=True,
        text=True,
        preexec_fn=None if pin is None else (lambda: os.sched_setaffinity(0, {pin})),
    ).stdout
    return json.loads(out)


def _pin_client(server_pin: int | None):
    """The load program on the core the server is not pinned to (anywhere when it is not)."""
    if server_pin is None:
        return None
    return lambda: os.sched_setaffinity(0, {CLIENT_CPU})


def memory_per_session(results: Results, ids: list[int]) -> None:
    """Server RSS growth per open session: idle (opened), then mid-tool-call; a server per RPC."""
    count = 200 if results.quick else 1000
    for rpc in SESSIONS:
        with parsetier_server() as server:
            asyncio.run(batch_load(server.target, ids, 16, 40))  # warm the allocator and the loop
            idle, busy = asyncio.run(per_session(rpc, server, ids, count))
            results.memory.append({"rpc": rpc, "sessions": count, "idle": idle, "mid_tool_call": busy})


def worker_scaling(results: Results, ids: list[int]) -> None:
    steps = 30 if results.quick else 150
    for workers in (1, 2):
        with parsetier_server(workers, pin=None) as server:
            tokens, cpu, wall = measured(server, batch_load(server.target, ids, 128, steps, streams=8))
            results.scaling.append(
                {"workers": workers, "tokens_per_cpu_s": tokens / cpu, "tokens_per_s": tokens / wall}
            )


def workers_memory(results: Results) -> None:
    """RSS per worker and PSS in total, models loaded before the fork or lazily per worker."""
    preload = "qwen3"
    for workers in (1, 4):
        for mode in ("before fork", "lazily") if workers > 1 else ("one process",):
            if mode == "lazily":
                server = lazy_workers_server(workers, preload)
            else:
                ready = "workers listening" if workers > 1 else "listening"
                server = ProcessServer("--workers", str(workers), "--preload", preload, ready=ready)
                server.start(300)
            try:
                server.wait_for_log("models loaded", 600, count=workers if mode == "lazily" else 1)
                time.sleep(2)
                memory = server.memory()
            finally:
                server.stop()
            worker_rss = [rss for rss, _ in (memory[1:] if workers > 1 else memory)]
            results.workers_memory.append(
                {
                    "workers": workers,
                    "mode": mode,
                    "worker_rss": statistics.mean(worker_rss),
                    "supervisor_rss": memory[0][0] if workers > 1 else 0,
                    "total_rss": sum(rss for rss, _ in memory),
                    "total_pss": sum(pss for _, pss in memory),
                }
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lazy-workers", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        asyncio.run(run_echo_server())
        return 0
    if args.lazy_workers:
        return run_lazy_workers(int(args.lazy_workers[0]), args.lazy_workers[1])
    os.sched_setaffinity(0, {CLIENT_CPU})
    results = Results(quick=args.quick)
    ids = workload()
    steps = [
        ("echo ceiling", lambda: echo_ceiling(results, ids)),
        ("server CPU", lambda: cpu_costs(results, ids)),
        ("paced load", lambda: paced(results, ids)),
        ("memory per session", lambda: memory_per_session(results, ids)),
        ("worker scaling", lambda: worker_scaling(results, ids)),
        ("worker memory", lambda: workers_memory(results)),
    ]
    only = {s.strip() for s in os.environ.get("BENCH_SERVICE_STEPS", "").split(",") if s.strip()}
    for name, step in steps:
        if only and name not in only:
            print(f"{name}: skipped (BENCH_SERVICE_STEPS)", file=sys.stderr)
            continue
        started = time.monotonic()
        step()
        print(f"{name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    blocks = report(results)
    print("\n".join(blocks.values()))
    if not args.no_write:
        write_section(blocks)
        plots(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
