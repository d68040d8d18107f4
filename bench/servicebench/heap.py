"""The heap a ``ParseBatch`` session holds, counted in bytes in use rather than read off the
resident set: the server's path for the messages of ``memory.batch_sessions`` (bytes in, read as
the servicer reads them, ``BatchProtocol`` with the servicer's hooks, a message as large as these
applied in a worker thread as the servicer does, replies serialized), run in this process with
every allocation in glibc's malloc (``PYTHONMALLOC=malloc``: Python's objects, the core's Rust
buffers and protobuf's arenas alike), counted by ``mallinfo2`` (bytes in use, every arena).

Why not only the resident set (``memory.py``): its growth counts the memory the allocator had to
ask the kernel for, and what it had free already depends on the engine, not on the session — the
native engine's table building frees megabytes of malloc chunks in the main arena, the reference
engine's loading leaves free pymalloc pools, and a message this large is applied in a worker
thread whose own malloc arena starts empty. Measured (qwen3, 1,000 sessions): a native server
with ``MALLOC_ARENA_MAX=1`` (the worker thread's allocations in the main arena, with its free
chunks) grew 0.1 KiB per mid-tool-call session against 4.2-4.4 with the default arenas; with every
preset loaded the reference grew 0.26 / 0.45 KiB per session in one run and 3.9 / 5.3 to 5.3 /
6.7 in others. Bytes in use do not move with that: the same figure every run.

Run by ``bench/engine_memory.py`` (one subprocess per engine, ``PYTHONMALLOC=malloc`` set), or:
``PYTHONMALLOC=malloc python -m servicebench.heap native|reference [count]`` from ``bench/``.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import gc
import json
import os
import sys
from collections.abc import Callable

from parsetier import native
from parsetier.models import ModelRegistry
from parsetier.protocol.batch import BatchProtocol, NeedModels, to_the_end
from parsetier.protocol.framing import in_parts
from parsetier.protocol.rules import Limits
from parsetier.service.admission import Admission
from parsetier.service.decoding import passing_serializer, read_batch_request
from parsetier.service.limits import SessionGate
from parsetier.service.servicer import _decoded, _GatedSessions
from parsetier_api.v1 import parsetier_pb2 as pb

from .loads import opens, workload
from .memory import TOOL_CALL

_MALLINFO2_FIELDS = (
    *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
    *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
)
"""``struct mallinfo2``'s fields (malloc.h), every one a ``size_t``."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def heap_in_use() -> Callable[[], int]:
    """glibc's bytes in use (chunks handed out, in every arena, and mmapped blocks)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2

    def in_use() -> int:
        gc.collect()
        info = libc.mallinfo2()
        return info.uordblks + info.hblkhd

    return in_use


def per_session(engine: str, count: int) -> tuple[float, float]:
    """Bytes in use per ``ParseBatch`` session, (idle, mid-tool-call), of the second ``count``
    sessions opened on one stream (as ``memory.batch_sessions``: the first ``count`` opened and
    fed before, unmeasured)."""
    if os.environ.get("PYTHONMALLOC") != "malloc":
        raise SystemExit("run with PYTHONMALLOC=malloc: mallinfo2 sees no pymalloc object")
    native.set_engine(engine)
    registry = ModelRegistry()
    registry.get("qwen3")
    ids = workload()
    mid = ids[: ids.index(TOOL_CALL) + 8]
    many = 4 * count
    limits = Limits(
        max_sessions=many, max_sessions_per_stream=many, max_items_per_message=many, max_loop_lag=0
    )
    hooks = _GatedSessions(SessionGate(many), Admission(0), frozenset(registry.names()))
    batch = BatchProtocol(limits, hooks)
    serialize = passing_serializer(pb.ParseBatchResponse)
    worker = concurrent.futures.ThreadPoolExecutor(1)  # the servicer's thread for a large message
    keys: list[str] = []
    fed = 0

    def send(message: pb.ParseBatchRequest) -> None:
        data = message.SerializeToString()

        def apply() -> None:
            request = _decoded(read_batch_request(data))
            reply = to_the_end(batch.receiving(request))
            if isinstance(reply, NeedModels):
                reply = to_the_end(batch.supplying_models({n: registry.get(n) for n in reply.names}))
            for part in in_parts(reply, limits.max_reply_bytes, pb.ParseBatchResponse):
                serialize(part)

        worker.submit(apply).result()

    def open_some(n: int) -> None:
        new = [f"m{len(keys) + i}" for i in range(n)]
        send(opens(new))
        keys.extend(new)

    def feed_all() -> None:
        nonlocal fed
        step = [pb.Step(token_ids=mid)]
        send(pb.ParseBatchRequest(sessions=[pb.SessionInput(key=k, steps=step) for k in keys[fed:]]))
        fed = len(keys)

    in_use = heap_in_use()
    open_some(count)
    feed_all()
    before = in_use()
    open_some(count)
    idle = in_use()
    feed_all()
    busy = in_use()
    worker.shutdown()
    return (idle - before) / count, (busy - before) / count


if __name__ == "__main__":
    idle, busy = per_session(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
    print(json.dumps({"idle": idle, "mid-call": busy}))
