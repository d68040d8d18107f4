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
   session's own parsing (``Session.feed`` of the same tokens, timed in this process).
3. **Paced load**, one token per session per step, at a fixed rate, from the Go load program
   ``client/go/cmd/parsetier-paced`` (built with ``go build``): the server's own step-to-reply
   latency histogram (``--metrics-port``) at p50, p99 and p99.9, with the client's round trip.
4. **Memory** per open session, idle and mid-tool-call, for both RPCs (server RSS growth / sessions).
5. **Workers**: tokens per server-CPU-second with 1 and 2 workers; RSS per worker, and the
   proportional set size (PSS, shared pages split between the processes) in total, for 1 and 4
   workers, with the models loaded before the fork and lazily in each worker.

The machine is shared with other developers: absolute numbers move with their load; the ratios
move much less. ``--quick`` runs a smaller version of everything (for a smoke test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "client" / "python")]

import grpc  # noqa: E402

from parsetier_api.v1 import parsetier_pb2 as pb  # noqa: E402
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc  # noqa: E402

DOC = ROOT / "docs" / "performance.md"
PLOTS = ROOT / "docs" / "performance"
SECTION = "## Service"

OUTPUT = (
    "<think>\nThe user asks for the weather in Paris and the local time in Tokyo. Both are "
    "independent lookups, so I can call the two tools at once and then answer in one sentence. "
    "Paris wants celsius; Tokyo only needs a time zone.\n</think>\n\n"
    "Let me look both of those up for you."
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>'
)
TOOLS = json.dumps(
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    ]
)
SERVER_CPU = 0
CLIENT_CPU = 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# servers


class Server:
    """A server subprocess on 127.0.0.1 (parsetier, or this file's echo server)."""

    def __init__(self, argv: list[str], pin: int | None = SERVER_CPU) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path[:2]))
        self.proc = subprocess.Popen(
            argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
        )
        self.logs: list[dict] = []
        self.port = 0
        self._ready = threading.Event()
        many = "--workers" in argv and argv[argv.index("--workers") + 1] != "1"
        self._want = "workers listening" if many or "--lazy-workers" in argv else "listening"
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(300):
            self.stop()
            raise RuntimeError(f"server did not start: {self.logs[-5:]}")
        if pin is not None:
            for pid in self.pids():
                os.sched_setaffinity(pid, {pin})

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if '"session_end"' in line:  # thousands a second under load: not parsed, not kept
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.logs.append(record)
            if record.get("msg") == self._want:
                self.port = record["port"]
                self._ready.set()

    def pids(self) -> list[int]:
        for record in self.logs:
            if record.get("msg") == "workers listening":
                return [self.proc.pid, *record["pids"]]
        return [self.proc.pid]

    def wait_for_logs(self, msg: str, count: int, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while sum(r.get("msg") == msg for r in self.logs) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {count} {msg!r} lines")
            time.sleep(0.1)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu(self) -> float:
        """CPU seconds used so far by the server's processes."""
        total = 0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue
            total += int(fields[11]) + int(fields[12])
        return total / CLK_TCK

    def memory(self) -> list[tuple[int, int]]:
        """(RSS, PSS) in bytes of each of the server's processes."""
        out = []
        for pid in self.pids():
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
            rss = int(re.search(r"^Rss:\s+(\d+)", text, re.M).group(1)) * 1024
            pss = int(re.search(r"^Pss:\s+(\d+)", text, re.M).group(1)) * 1024
            out.append((rss, pss))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parsetier_server(workers: int = 1, pin: int | None = SERVER_CPU, extra: tuple[str, ...] = ()) -> Server:
    argv = [sys.executable, "-m", "parsetier.cli", "serve", "--port", "0", "--preload", "qwen3", *extra]
    argv += [
        "--max-sessions",
        "20000",
        "--max-sessions-per-stream",
        "4096",
        "--max-items-per-message",
        "4096",
        "--max-loop-lag-ms",  # measure the load, do not shed it
        "0",
    ]
    server = Server([*argv, "--workers", str(workers)], pin)
    server.wait_for_logs("models loaded", 1)
    return server


def echo_server() -> Server:
    return Server([sys.executable, str(Path(__file__).resolve()), "--echo-server"])


class EchoServicer(pb_grpc.ParserServiceServicer):
    """Same proto, no parsing: one reply of the usual shape per message (4 characters of content
    per token), one output per session entry for ParseBatch and one packed output per packed item."""

    async def Parse(self, request_iterator, context):
        await context.send_initial_metadata(())  # as parsetier does once the Open is accepted
        sequence = 0
        messages = 0
        async for message in request_iterator:
            messages += 1
            tokens = sum(len(s.token_ids) for s in message.steps)
            if tokens or message.HasField("finish"):
                sequence += 1
                reply = pb.ParseResponse(sequence=sequence, client_messages=messages)
                reply.deltas.add(content="abcd" * tokens)
                if message.HasField("finish"):
                    reply.final.finish_reason = pb.FINISH_REASON_STOP
                yield reply

    async def ParseBatch(self, request_iterator, context):
        messages = 0
        async for message in request_iterator:
            messages += 1
            reply = pb.ParseBatchResponse(client_messages=messages)
            for entry in message.sessions:
                tokens = sum(len(s.token_ids) for s in entry.steps)
                if tokens or entry.HasField("finish"):
                    out = reply.sessions.add(key=entry.key, sequence=messages, client_messages=messages)
                    out.deltas.add(content="abcd" * tokens)
            n = len(message.packed.keys)
            if n:  # packed items (one token each here): packed text outputs
                packed = reply.packed
                packed.keys.extend(message.packed.keys)
                packed.sequences.extend([messages] * n)
                packed.client_messages.extend([messages] * n)
                packed.texts.extend(["abcd"] * n)
                packed.reasoning.extend([False] * n)
            yield reply


async def run_echo_server() -> None:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
    pb_grpc.add_ParserServiceServicer_to_server(EchoServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(json.dumps({"msg": "listening", "port": port}), file=sys.stderr, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


# ---------------------------------------------------------------------------------------------
# load


def workload() -> list[int]:
    import tokenizers

    from parsetier.models import ModelRegistry

    model = ModelRegistry().get("qwen3")
    assert isinstance(model.tokenizer, tokenizers.Tokenizer)
    return model.tokenizer.encode(OUTPUT, add_special_tokens=False).ids


def _channel(target: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ],
    )


async def parse_load(target: str, ids: list[int], per_message: int, streams: int, rounds: int) -> int:
    """``streams`` concurrent Parse sessions, each fed the workload ``rounds`` times in turn;
    returns the tokens sent."""
    channel = _channel(target)
    stub = pb_grpc.ParserServiceStub(channel)
    open_ = pb.Open(model="qwen3", tools_json=TOOLS)
    chunks = [ids[i : i + per_message] for i in range(0, len(ids), per_message)]

    async def one() -> None:
        for _ in range(rounds):
            call = stub.Parse()
            await call.write(pb.ParseRequest(open=open_))
            await call.initial_metadata()

            async def reader(call=call) -> None:
                async for _ in call:
                    pass

            task = asyncio.create_task(reader())
            for chunk in chunks:
                await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=chunk)]))
            await call.write(pb.ParseRequest(finish=pb.Finish()))
            await call.done_writing()
            await task

    await asyncio.gather(*(one() for _ in range(streams)))
    await channel.close()
    return streams * rounds * len(ids)


def _opens(keys: list[str]) -> pb.ParseBatchRequest:
    return pb.ParseBatchRequest(
        sessions=[pb.SessionInput(key=k, open=pb.Open(model="qwen3", tools_json=TOOLS)) for k in keys]
    )


def _step(
    keys: list[str], position: list[int], ids: list[int], packed: bool = True
) -> tuple[pb.ParseBatchRequest, int]:
    """One engine step: one token for every session; a session past the end of the output
    finishes, and opens again (with its first token) in the next step. The usual steps go as
    packed items (``PackedSteps``), as the batch clients send them, or as entries. Returns the
    message and the tokens in it."""
    message = pb.ParseBatchRequest()
    entries = message.sessions
    stepped: list[str] = []
    stepped_ids: list[int] = []
    tokens = 0
    for i, key in enumerate(keys):
        p = position[i]
        if p == len(ids):
            entries.add(key=key).finish.SetInParent()
            position[i] = -1
            continue
        if p == -1:
            entry = entries.add(key=key)
            entry.open.model, entry.open.tools_json = "qwen3", TOOLS
            entry.steps.add().token_ids.append(ids[0])
            p = 0
        elif packed:
            stepped.append(key)
            stepped_ids.append(ids[p])
        else:
            entries.add(key=key).steps.add().token_ids.append(ids[p])
        position[i] = p + 1
        tokens += 1
    if stepped:
        message.packed.keys.extend(stepped)
        message.packed.token_ids.extend(stepped_ids)
    return message, tokens


async def batch_load(
    target: str, ids: list[int], sessions: int, steps: int, streams: int = 1, packed: bool = True
) -> int:
    """ParseBatch streams of ``sessions`` sessions each, one token per session per step, two steps
    in flight; sessions start at different points of the output and start over when done.
    ``packed``: the usual steps as packed items (else as entries). Returns the tokens sent."""

    async def one(index: int) -> int:
        channel = _channel(target)
        call = pb_grpc.ParserServiceStub(channel).ParseBatch()
        keys = [f"s{index}-{i}" for i in range(sessions)]
        position = [i % len(ids) for i in range(sessions)]
        await call.write(_opens(keys))
        await call.read()
        sent = in_flight = 0
        for _ in range(steps):
            message, tokens = _step(keys, position, ids, packed)
            sent += tokens
            await call.write(message)
            in_flight += 1
            if in_flight == 2:
                await call.read()
                in_flight -= 1
        while in_flight:
            await call.read()
            in_flight -= 1
        await call.done_writing()
        await call.code()
        await channel.close()
        return sent

    return sum(await asyncio.gather(*(one(i) for i in range(streams))))


def measured(server: Server, coroutine) -> tuple[int, float, float]:
    """Run a load; (tokens, server CPU seconds, wall seconds)."""
    cpu, wall = server.cpu(), time.monotonic()
    tokens = asyncio.run(coroutine)
    return tokens, server.cpu() - cpu, time.monotonic() - wall


# ---------------------------------------------------------------------------------------------
# measurements


@dataclass
class Results:
    quick: bool
    ceiling: list[dict] = field(default_factory=list)
    cpu: dict = field(default_factory=dict)
    paced: list[dict] = field(default_factory=list)
    memory: list[dict] = field(default_factory=list)
    scaling: list[dict] = field(default_factory=list)
    workers_memory: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


BATCH_STEPS = {False: 130, True: 30}
"""Steps of the ``ParseBatch`` 256 × 1 run (by ``--quick``); other session counts scale it."""


ENTRIES_256 = "256 sessions x 1 token/step, as entries"
"""The 256 × 1 load with every step a ``SessionInput`` entry instead of a packed item."""


CEILING_ROUNDS = {False: 3, True: 1}
"""Alternated parsetier/echo runs of each case (by ``--quick``): the figures are their medians."""


def echo_ceiling(results: Results, ids: list[int]) -> None:
    """Each case on parsetier and on the echo server in turn, both servers up on the same core
    (only one loaded at a time), ``CEILING_ROUNDS`` times: the ratio is the median of the rounds'
    ratios, so the machine's load, which drifts over a run, moves both halves of a round alike."""
    q = results.quick
    cases = [("Parse", f"{k} tokens/message", k) for k in (1, 4, 16)]
    cases += [("ParseBatch", f"{n} sessions x 1 token/step", n) for n in (64, 256, 1024)]
    cases += [("ParseBatch", ENTRIES_256, 256)]
    with parsetier_server() as parsetier, echo_server() as echo:
        for rpc, label, n in cases:
            runs: dict[str, list[tuple[int, float, float]]] = {"parsetier": [], "echo": []}
            for _ in range(CEILING_ROUNDS[q]):
                for kind, server in (("parsetier", parsetier), ("echo", echo)):
                    if rpc == "Parse":
                        rounds = 1 if q else max(1, 8 // n) + 1
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
            pairs = zip(runs["parsetier"], runs["echo"], strict=True)
            ratio = statistics.median((t / c) / (et / ec) for (t, c, _), (et, ec, _) in pairs)
            results.ceiling.append({"rpc": rpc, "load": label, **row, "ratio": ratio})


def in_process_costs(ids: list[int], reps: int, steps: int, sessions: int = 256) -> tuple[float, float]:
    """µs of CPU per item, in this process, of the ``ParseBatch`` 256 × 1 workload (the messages
    ``batch_load`` sends, its opening message included): (the sessions' own parsing: each
    session's ``Session`` made, fed one token per step and finished, called directly;
    ``BatchProtocol.receive`` of the messages with the server's session hooks, its reply
    serialized, minus the parsing). Alternated; the medians of the parsing and of the per-pair
    differences (the machine's load moves both halves of a pair alike)."""
    from parsetier.batch_protocol import BatchProtocol
    from parsetier.messages import SessionOptions, Tool
    from parsetier.models import ModelRegistry
    from parsetier.protocol import Limits
    from parsetier.service import logs
    from parsetier.service.admission import Admission
    from parsetier.service.limits import SessionGate
    from parsetier.service.servicer import _GatedSessions
    from parsetier.session import Session

    model = ModelRegistry().get("qwen3")
    tools = tuple(Tool(name=n, parameters={"type": "object"}) for n in ("get_weather", "get_time"))
    sink = Path(os.devnull).open("w")  # noqa: SIM115 -- the server logs each session's end; so does this
    logs.configure("INFO", sink)
    limits = Limits(max_sessions=20000, max_sessions_per_stream=4096, max_items_per_message=4096)

    def direct() -> float:
        started = time.process_time()
        live = [Session(model, SessionOptions(tools=tools)) for _ in range(sessions)]
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
                    live[i], p = Session(model, SessionOptions(tools=tools)), 0
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
        messages, tokens = [_opens(keys)], 0
        for _ in range(steps):
            message, n = _step(keys, position, ids)
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
    directly (``Session.feed``), and as ``BatchProtocol.receive`` of the same steps, packed and as
    entries (messages decoded from bytes, replies serialized). Alternated; the median of the
    direct feeds and of each form's per-round difference from them."""
    from parsetier.batch_protocol import BatchProtocol
    from parsetier.messages import SessionOptions, Tool
    from parsetier.models import ModelRegistry
    from parsetier.protocol import Limits
    from parsetier.session import Session

    model = ModelRegistry().get("qwen3")
    tools = tuple(Tool(name=n, parameters={"type": "object"}) for n in ("get_weather", "get_time"))
    start = [i % (len(ids) - steps) for i in range(sessions)]
    keys = [f"s{i}" for i in range(sessions)]
    limits = Limits(max_sessions_per_stream=4096, max_items_per_message=4096)

    def direct() -> float:
        live = [Session(model, SessionOptions(tools=tools)) for _ in range(sessions)]
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
        opening = _opens(keys)
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
            server.wait_for_logs("metrics listening", 1, timeout=60)
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
    """Server RSS growth per open session: idle (opened), then mid-tool-call."""
    mid = ids.index(151657) + 8  # inside the first tool call's arguments
    count = 200 if results.quick else 1000

    async def parse_sessions(server: Server) -> tuple[float, float]:
        channels = [_channel(server.target) for _ in range(4)]
        calls = []
        before = server.memory()[0][0]
        for i in range(count):
            call = pb_grpc.ParserServiceStub(channels[i % 4]).Parse()
            await call.write(pb.ParseRequest(open=pb.Open(model="qwen3", tools_json=TOOLS)))
            calls.append(call)
        for call in calls:
            await call.initial_metadata()
        await asyncio.sleep(1)
        idle = server.memory()[0][0]
        for call in calls:
            await call.write(pb.ParseRequest(steps=[pb.Step(token_ids=ids[:mid])]))
            await call.read()
        await asyncio.sleep(1)
        busy = server.memory()[0][0]
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()
        return (idle - before) / count, (busy - before) / count

    async def batch_sessions(server: Server) -> tuple[float, float]:
        channel = _channel(server.target)
        call = pb_grpc.ParserServiceStub(channel).ParseBatch()
        before = server.memory()[0][0]
        keys = [f"m{i}" for i in range(count)]
        await call.write(_opens(keys))
        await call.read()
        await asyncio.sleep(1)
        idle = server.memory()[0][0]
        await call.write(
            pb.ParseBatchRequest(
                sessions=[pb.SessionInput(key=k, steps=[pb.Step(token_ids=ids[:mid])]) for k in keys]
            )
        )
        await call.read()
        await asyncio.sleep(1)
        busy = server.memory()[0][0]
        call.cancel()
        await channel.close()
        return (idle - before) / count, (busy - before) / count

    for rpc, fn in (("Parse", parse_sessions), ("ParseBatch", batch_sessions)):
        with parsetier_server() as server:
            asyncio.run(batch_load(server.target, ids, 16, 40))  # warm the allocator and the loop
            idle, busy = asyncio.run(fn(server))
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
                argv = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--lazy-workers",
                    str(workers),
                    preload,
                ]
            else:
                argv = [
                    sys.executable,
                    "-m",
                    "parsetier.cli",
                    "serve",
                    "--port",
                    "0",
                    "--workers",
                    str(workers),
                ]
                argv += ["--preload", preload]
            server = Server(argv, pin=None)
            try:
                server.wait_for_logs("models loaded", workers if mode == "lazily" else 1)
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


def run_lazy_workers(workers: int, preload: str) -> int:
    from parsetier.models import ModelRegistry
    from parsetier.protocol import Limits
    from parsetier.service.workers import serve_workers

    return serve_workers(
        workers, ModelRegistry(), Limits(), "127.0.0.1", 0, 10.0, [preload], load_before_fork=False
    )


# ---------------------------------------------------------------------------------------------
# report


def report(results: Results) -> str:
    mib = 1024 * 1024
    lines = [
        SECTION,
        "",
        "Generated by `bench/service_bench.py` (`make bench`)"
        + (" in `--quick` mode (small runs: indicative only)" if results.quick else "")
        + ". Server pinned to one core, load generator on the other, on a 2-core machine shared with"
        " other developers: absolute figures move with their load, ratios against the echo server of"
        " the same run much less. Tokens per second are per second of server CPU.",
        "",
        "### Echo ceiling",
        "",
        "| RPC | load | parsetier tokens/s per core | echo tokens/s per core | parsetier / echo |",
        "|---|---|---|---|---|",
    ]
    for r in results.ceiling:
        lines.append(
            f"| {r['rpc']} | {r['load']} | {r['parsetier']:,.0f} | {r['echo']:,.0f} | {r['ratio']:.2f} |"
        )
    by = {(r["rpc"], r["load"]): r for r in results.ceiling}
    parse1 = by[("Parse", "1 tokens/message")]["parsetier"]
    batch256 = by[("ParseBatch", "256 sessions x 1 token/step")]["parsetier"]
    c = results.cpu
    lines += [
        "",
        f"ParseBatch at 256 sessions × 1 token per step: {batch256:,.0f} tokens/s per server core, "
        f"{batch256 / parse1:.1f}× `Parse` at one token per message in the same run. In process,"
        " with no gRPC at all (the sessions' parsing plus `BatchProtocol.receive` of the same"
        f" messages: the first two parts of *Server CPU*), the same items cost {c['receive']:.1f} µs"
        f" each: {1e6 / c['receive']:,.0f} tokens/s per core, what this engine and framing reach on"
        " this workload with no transport at all.",
        "",
        "![echo ceiling](performance/service_ceiling.png)",
        "",
        "### Server CPU",
        "",
        "| what | µs of server CPU |",
        "|---|---|",
        "| per `Parse` message of 1 token (everything: gRPC, protobuf, protocol, parsing) | "
        f"{c['per_message']:.1f} |",
        f"| per token, `Parse` at 16 tokens per message | {c['per_token_16']:.1f} |",
        f"| per session item, `ParseBatch` 256 × 1 token | {c['per_item']:.1f} |",
        "| of which the sessions' own parsing (the same sessions' `Session` made, fed one token per"
        f" step and finished, called directly in process) | {c['feed']:.1f} |",
        "| of which the protocol and the items' protobuf (`BatchProtocol.receive` of the same messages"
        f" in process, reply serialized, minus the parsing) | {c['protocol']:.1f} |",
        "| of which the rest: server CPU minus that `receive` (gRPC, decoding, the event loop, and"
        f" `receive` running slower among them than alone) | {c['transport']:.1f} |",
        f"| per item beyond the session's parsing (the target's figure) | {c['beyond_parsing']:.1f} |",
        f"| per item, the echo server (gRPC + protobuf of the same messages) | {c['echo_item']:.1f} |",
        "| per session item, `ParseBatch` 256 × 1 token with every step an entry |"
        f" {c['entries_item']:.1f} |",
        "| engine steps alone (256 sessions open, none opening or ending; in process): the sessions'"
        f" own parsing per token | {c['steady_feed']:.1f} |",
        f"| of which beyond the parsing, per packed item | {c['steady_packed']:.1f} |",
        f"| of which beyond the parsing, per item sent as an entry | {c['steady_entries']:.1f} |",
        "",
        "### Paced load",
        "",
        "One token per session per step at a fixed rate, driven by the Go load program"
        " (`client/go/cmd/parsetier-paced`, on the other core; with 2 workers nothing is pinned), so the"
        " load generator keeps the pace."
        " *Server* is the latency the targets name, from the server reading a step to writing its"
        " reply: the server's own `parsetier_reply_latency_seconds` histogram (`--metrics-port`),"
        " scraped after the warm-up and at the end, its percentiles interpolated within the"
        " histogram's buckets (bounds 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100 ms) as Prometheus'"
        " `histogram_quantile` does. *Round trip* is the Go client's, from writing a step to reading"
        " its reply (loopback, client included); *pacer late* is how late the load program wrote its"
        " steps (p99): when the server falls behind, gRPC flow control holds the writes back. Server"
        " CPU is CPU-seconds per second of the run (1.0 = one core busy). *Machine* is the"
        " machine's own tail (`bench/machine_probe.py`, run after each row on the server's core): a"
        " fixed pure-Python job sized to the row's server p50, run at the row's rate for as long; its"
        " tail is what the VM adds to any work of that size.",
        "",
        "| RPC | load | workers (channels; replies by worker) | server p50 / p99 / p99.9 ms "
        "| machine p50 / p99 / p99.9 ms | round trip p50 / p99 / p99.9 ms | pacer late p99 ms "
        "| server CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results.paced:
        fmt = " / ".join
        lines.append(
            f"| {r['rpc']} | {r['load']} | {r['workers']} ({r['channels']}; {r['split']}) | "
            f"{fmt(f'{v:.2f}' for v in r['server'])} | {fmt(f'{v:.2f}' for v in r['machine'])} | "
            f"{fmt(f'{v:.1f}' for v in r['client'])} | "
            f"{r['late']:.1f} | {r['cpu']:.2f} |"
        )
    lines += [
        "",
        "![paced latency](performance/service_paced.png)",
        "",
        "### Memory per open session",
        "",
        "| RPC | sessions | KiB per idle session | KiB per session mid-tool-call |",
        "|---|---|---|---|",
    ]
    for r in results.memory:
        lines.append(
            f"| {r['rpc']} | {r['sessions']} | {r['idle'] / 1024:.1f} | {r['mid_tool_call'] / 1024:.1f} |"
        )
    lines += [
        "",
        "### Workers",
        "",
        "| workers | tokens per server-CPU-second | tokens per second (wall) |",
        "|---|---|---|",
    ]
    for r in results.scaling:
        lines.append(f"| {r['workers']} | {r['tokens_per_cpu_s']:,.0f} | {r['tokens_per_s']:,.0f} |")
    lines += [
        "",
        "Memory with the Qwen3 tokenizer loaded (RSS counts shared pages in every process; PSS splits"
        " them, so the PSS total is what the machine really spends):",
        "",
        "| workers | models loaded | RSS per worker (MiB) | supervisor RSS (MiB) | total RSS (MiB) "
        "| total PSS (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results.workers_memory:
        lines.append(
            f"| {r['workers']} | {r['mode']} | {r['worker_rss'] / mib:.0f} | "
            f"{r['supervisor_rss'] / mib:.0f} | {r['total_rss'] / mib:.0f} | {r['total_pss'] / mib:.0f} |"
        )
    lines += [""] + [f"- {note}" for note in results.notes]
    return "\n".join(lines).rstrip() + "\n"


def plots(results: Results) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    PLOTS.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{r['rpc']}\n{r['load']}" for r in results.ceiling]
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], [r["parsetier"] for r in results.ceiling], 0.4, label="parsetier")
    ax.bar([i + 0.2 for i in x], [r["echo"] for r in results.ceiling], 0.4, label="echo (no parsing)")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("tokens per second of server CPU")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Throughput per server core vs the same-proto echo ceiling")
    fig.tight_layout()
    fig.savefig(PLOTS / "service_ceiling.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(11, 4))
    names = ["p50", "p99", "p99.9"]
    width = 0.8 / max(1, len(results.paced))
    for i, r in enumerate(results.paced):
        at = [j + (i - len(results.paced) / 2 + 0.5) * width for j in range(3)]
        label = f"{r['rpc']} ({r['load']}, {r['workers']} w, {r['channels']} ch)"
        ax.bar(at, r["server"], width, label=label)
        ax.scatter(at, r["machine"], marker="_", color="black", s=60, zorder=3)
    ax.scatter([], [], marker="_", color="black", label="machine: a fixed job of the p50's size")
    ax.set_xticks(range(3), names)
    ax.set_ylabel("server latency, ms (step read to reply written)")
    ax.set_yscale("log")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title("Paced load: the server's step-to-reply latency")
    fig.tight_layout()
    fig.savefig(PLOTS / "service_paced.png", dpi=110)
    plt.close(fig)


def write_section(text: str) -> None:
    """Replace the "## Service" section of docs/performance.md (or add it), keeping the rest."""
    old = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Performance\n"
    start = old.find(f"\n{SECTION}\n")
    if start < 0:
        new = old.rstrip() + "\n\n" + text
    else:
        end = old.find("\n## ", start + len(SECTION) + 2)
        profile = old.find("\n### Profile", start)  # hand-written profile notes inside the section
        keep = old[profile:end] if 0 <= profile < (end if end >= 0 else len(old)) else ""
        tail = old[end:] if end >= 0 else ""
        new = old[: start + 1] + text + keep.rstrip("\n") + ("\n" if keep else "") + tail
    DOC.write_text(new, encoding="utf-8")


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
    for name, step in steps:
        started = time.monotonic()
        step()
        print(f"{name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    text = report(results)
    print(text)
    if not args.no_write:
        plots(results)
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
