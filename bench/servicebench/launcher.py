"""The servers the service benchmark measures, started with the test kit's one launcher
(``testkit.servers.ProcessServer``): parsetier, pinned to one core, and an echo server speaking
the same proto that parses nothing (the ceiling every figure is compared with)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from tests.testkit.servers import ProcessServer

SERVER_CPU = 0
CLIENT_CPU = 1
ENTRY = Path(__file__).resolve().parent.parent / "service_bench.py"
"""The benchmark's script, which also runs the echo server and the lazily loading workers."""


def started(server: ProcessServer, pin: int | None, timeout: float = 300) -> ProcessServer:
    """``server`` started on ``pin`` (anywhere when None): the process starts under that affinity,
    so every thread and worker it makes inherits it, and every thread is checked in /proc."""
    if pin is not None:
        server.cpus = {pin}
    server.start(timeout)
    if pin is not None:
        stray = {task: cpus for task, cpus in server.thread_cpus().items() if cpus != {pin}}
        if stray:
            server.kill()
            raise RuntimeError(f"server threads not on CPU {pin}: {stray}")
    return server


BENCH_LIMITS = (
    "--max-sessions",
    "20000",
    "--max-sessions-per-stream",
    "4096",
    "--max-items-per-message",
    "4096",
    "--max-loop-lag-ms",  # measure the load, do not shed it
    "0",
)
"""``serve`` limits that measure a load rather than shed it, shared by every bench server."""


def parsetier_server(
    workers: int = 1, pin: int | None = SERVER_CPU, extra: tuple[str, ...] = (), timeout: float = 600
) -> ProcessServer:
    """``parsetier serve`` with qwen3 loaded and limits that measure the load rather than shed it;
    ``timeout`` bounds its start and its models' load, each."""
    server = ProcessServer(
        "--preload",
        "qwen3",
        *extra,
        *BENCH_LIMITS,
        "--workers",
        str(workers),
        ready="workers listening" if workers > 1 else "listening",
        keep_session_ends=False,
    )
    started(server, pin, timeout).wait_for_log("models loaded", timeout=timeout)
    return server


def echo_server() -> ProcessServer:
    return started(ProcessServer(command=[sys.executable, str(ENTRY), "--echo-server"]), SERVER_CPU)


def lazy_workers_server(workers: int, preload: str) -> ProcessServer:
    """Workers that each load ``preload`` after the fork (``run_lazy_workers``), unpinned."""
    command = [sys.executable, str(ENTRY), "--lazy-workers", str(workers), preload]
    return started(ProcessServer(command=command, ready="workers listening", keep_session_ends=False), None)


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


def run_lazy_workers(workers: int, preload: str) -> int:
    from parsetier.models import ModelRegistry
    from parsetier.protocol.rules import Limits
    from parsetier.service.workers import serve_workers

    return serve_workers(
        workers, ModelRegistry(), Limits(), "127.0.0.1", 0, 10.0, [preload], load_before_fork=False
    )
