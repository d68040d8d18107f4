"""Multiplexed sessions, free of I/O: many ``open``-ed sessions of one client riding one shared
``ParseBatch`` stream, shared by the blocking and the asyncio multiplexers (``mux``).

Each session gets a key of the stream. What the sessions send is queued on a ``StepBuilder`` (one
entry per session per message; a lone step of ids goes packed) and goes out as one
``ParseBatchRequest`` per flush. A session's second message before a flush starts a new one: so
every message a session sends is one entry, and its outputs are exactly the replies a ``Parse``
stream fed the same messages gives (docs/service.md: an output of ``ParseBatch`` is what ``Parse``
answers). Replies are sorted back to their sessions by key, in order; a session's error stays in
its output. With resume on, the ``BatchLedger`` keeps every session's history, and a broken
stream moves all of them to a new one (``replay``), as the batch API does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.batch import StepBuilder
from parsetier_client.batch_resume import BatchLedger
from parsetier_client.packed import outputs_of
from parsetier_client.requests import StepLike
from parsetier_client.resume import ResumePolicy
from parsetier_client.wire import WIRE_TRAILER

MAX_BATCH = 1024
"""Entries that make a flush at once, whatever the time bound (the server's default limit of
items per message is 2,048)."""


class Rider:
    """A session as the core sees it: its key, its moves, the count of messages it has sent and,
    per entry not answered yet, (the message of the stream that carries it, that count). The I/O
    side's session classes derive from it and say where outputs go."""

    def __init__(self) -> None:
        self.key = ""
        self.resumes = 0
        """How many times the session moved to a new stream (with the shared stream)."""
        self._messages = 0
        self._counts: deque[tuple[int, int]] = deque()

    def _deliver(self, output: pb.SessionOutput) -> None:
        raise NotImplementedError

    def _admit(self) -> None:
        """The message that carried its open was answered without an error."""

    def _fail(self, error: grpc.RpcError) -> None:
        raise NotImplementedError


def status_error(status: pb.SessionStatus) -> grpc.aio.AioRpcError:
    """A session's status as the error its ``Parse`` stream would have raised: the code, the
    message, and its wire bytes as the ``parsetier-wire-bin`` trailer (``wire_error`` reads it)."""
    code = _CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    trailer = grpc.aio.Metadata((WIRE_TRAILER, status.wire)) if status.wire else grpc.aio.Metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailer, status.message)


def stream_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def as_reply(output: pb.SessionOutput) -> pb.ParseResponse:
    """A session's output as the ``ParseResponse`` its ``Parse`` stream would have sent."""
    reply = pb.ParseResponse(
        sequence=output.sequence,
        client_messages=output.client_messages,
        deltas=output.deltas,
        events=output.events,
        output_digest=output.output_digest,
        wire=output.wire,
    )
    if output.HasField("final"):
        reply.final.CopyFrom(output.final)
    return reply


class MuxCore:
    """The shared stream's state and decisions (see the module docstring). The I/O side calls
    ``open`` / ``step`` / ``cancel`` for its sessions, ``take`` at each flush and
    writes the message, ``received`` with each reply, and ``broke`` / ``replay`` around a move."""

    def __init__(self, policy: ResumePolicy | None, max_batch: int = MAX_BATCH) -> None:
        self.policy = policy
        self.max_batch = max_batch
        self.builder = StepBuilder(resumable=policy is not None)
        self.ledger = BatchLedger() if policy is not None else None
        self.riders: dict[str, Rider] = {}
        """Sessions open on the stream (or being opened), by key."""
        self.queued = 0
        """Entries in the next message."""
        self._sending: set[str] = set()
        """Keys whose next message already has steps or a finish: one more starts a new message."""
        self._opening: list[Rider] = []
        self._opens: deque[list[Rider]] = deque()
        """Per message sent and not answered: the sessions whose open it carries."""
        self._count = 0
        self._entries = 0
        self._taken = self._routed = 0
        """Messages sent, and replies routed (in the order sent, across moves)."""

    @property
    def messages_sent(self) -> int:
        """``ParseBatch`` messages this stream has carried (since its sessions last all failed):
        the sessions' messages divided by this is the coalescing the flushes achieved."""
        return self._taken

    @property
    def entries_sent(self) -> int:
        """Entries (a session's message, open or cancel) those messages carried."""
        return self._entries

    @property
    def in_flight(self) -> int:
        """Messages sent whose replies have not come."""
        return len(self._opens)

    def new_key(self) -> str:
        self._count += 1
        return format(self._count, "x")

    def must_flush_before(self, key: str) -> bool:
        """Whether ``key``'s next message must go in a message of its own (it has one queued)."""
        return key in self._sending

    def _count_message(self, rider: Rider) -> None:
        """The session's next message goes in the next message of the stream: its replies say
        how many messages the session had sent (``client_messages``, as on its own stream)."""
        rider._messages += 1
        rider._counts.append((self._taken + 1, rider._messages))

    def open(self, rider: Rider, open_: pb.Open) -> None:
        self.builder.open(rider.key, open_)
        self.riders[rider.key] = rider
        self._opening.append(rider)
        self._count_message(rider)
        self.queued += 1

    def step(self, key: str, steps: Iterable[StepLike], finish: pb.Finish | None = None) -> None:
        """Session ``key``'s next message: ``steps``, and its ``finish`` when it is the last."""
        builder = self.builder
        if finish is None:
            builder.feed(key, *steps)
        else:
            steps = tuple(steps)
            if steps:
                builder.feed(key, *steps)
            builder.finish_with(key, finish)
        self._sending.add(key)
        self._count_message(self.riders[key])
        self.queued += 1

    def cancel(self, key: str) -> None:
        """Drop session ``key`` on the server; nothing more is delivered to it."""
        if self.riders.pop(key, None) is not None:
            self.builder.cancel(key)
            self.queued += 1

    def take(self) -> pb.ParseBatchRequest | None:
        """The next message (None when nothing is queued); it is in flight from now on."""
        if not self.queued:
            return None
        message = self.builder.take()
        self._taken += 1
        self._entries += self.queued
        self.queued = 0
        self._sending.clear()
        self._opens.append(self._opening)
        self._opening = []
        if self.ledger is not None:
            self.ledger.sent(message)
        return message

    def received(self, reply: pb.ParseBatchResponse) -> None:
        """A reply of the stream: its outputs go to their sessions, in the order sent."""
        ledger = self.ledger
        if ledger is None:
            self._route(outputs_of(reply))
            return
        ledger.received(reply)
        while (outputs := ledger.ready()) is not None:
            self._route(outputs)

    @property
    def must_move(self) -> bool:
        """A server refused an open as draining or overloaded: the stream should move now."""
        return self.ledger is not None and self.ledger.must_move

    def _route(self, outputs: dict[str, pb.SessionOutput]) -> None:
        riders = self.riders
        self._routed += 1
        step = self._routed
        for key, output in outputs.items():
            rider = riders.get(key)
            if rider is None:
                continue  # cancelled, or its open failed
            counts, count = rider._counts, 0
            while counts and counts[0][0] <= step:
                count = counts.popleft()[1]
            output.client_messages = count
            if output.HasField("final") or output.HasField("status"):
                del riders[key]
            rider._deliver(output)
        for rider in self._opens.popleft() if self._opens else ():
            rider._admit()

    def replay(self) -> list[pb.ParseBatchRequest]:
        """The messages that start a new stream after a break (``BatchLedger.replay``): every
        live session moves, once."""
        assert self.ledger is not None
        for rider in self.riders.values():
            rider.resumes += 1
        return self.ledger.replay()

    def fail_all(self, error: grpc.RpcError) -> None:
        """The stream ended and does not move: every session on it ends with its status; the
        next session starts a new stream."""
        riders, self.riders = self.riders, {}
        self._opens.clear()
        self._opening = []
        self._sending.clear()
        self.queued = 0
        self._taken = self._routed = self._entries = 0
        self.builder = StepBuilder(resumable=self.policy is not None)
        self.ledger = BatchLedger() if self.policy is not None else None
        for rider in riders.values():
            rider._fail(error)
