"""Multiplexed sessions: ``Client(target, multiplex=True)`` (and ``AsyncClient``) open sessions that
ride one shared ``ParseBatch`` stream instead of a ``Parse`` stream each.

The session object has the ``Parse`` session's API (``send``, ``finish``, ``cancel``, iteration
over ``ParseResponse`` replies, ``deltas()``, ``wire()``, ``final``, ``resumes``) and gets the same
replies; what changes is the price: the sends of every session go out coalesced, one message per
flush, which the server reads and answers as one (issue 40: a per-session stream costs the server
its RPC machinery per message, a packed batch item a microsecond or two).

A flush happens when ``max_batch`` entries are queued, or ``flush_interval`` seconds after the
first of them (0: as soon as the sending code yields: the asyncio loop's next turn, or the
blocking client's flushing thread getting the interpreter; but while a message is unanswered, at
its reply or ``HOLD`` after it went out, so an engine's step goes out as one message). The state
and decisions are ``mux_core.MuxCore``'s; this module moves messages (threads for the blocking
client, tasks for asyncio). Known differences from ``Parse``: a session's deadline is the
client's ``timeout`` counted by the client (the shared stream has none); a session's ``send``
waits while ``HIGH_WATER`` flushed messages are unwritten (back-pressure, both clients; the
blocking ``Parse`` stream's sends never wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.aio_status import server_error, watch, write_failed
from parsetier_client.mux_core import MAX_BATCH, MuxCore, Rider, as_reply, status_error, stream_error
from parsetier_client.parts import Joiner, joined
from parsetier_client.requests import StepLike
from parsetier_client.resume import ResumePolicy, retryable
from parsetier_client.session_api import AsyncSession, Sending, Session
from parsetier_client.typed import Final

Metadata = tuple[tuple[str, str], ...] | None

HIGH_WATER = 64
"""Messages flushed and not yet written past which a session's ``send`` waits (until half of them
are written)."""

HOLD = 0.0005
"""With the flush bound 0, while a message is unanswered what the sessions send waits for its reply,
at most this many seconds after it went out: the sends made while the server works go out
together (an engine's step in one message, not one message per wake-up), as in the Go and C++
clients. A stopped server still gets the messages after the bound."""

_CLOSE = object()


def _refused() -> grpc.aio.AioRpcError:
    return stream_error(
        grpc.StatusCode.UNAVAILABLE, "every server tried refused to open a session (draining or overloaded)"
    )


def _expired() -> grpc.aio.AioRpcError:
    return stream_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")


class _MuxSession(Rider, Sending):
    """What both multiplexed sessions share (the I/O side's queue and wake-up aside): a message
    goes to the multiplexer, an output becomes the items its iteration yields or raises."""

    def __init__(self, mux: Multiplexer | AsyncMultiplexer) -> None:
        super().__init__()
        self._mux = mux
        self.final: Final | None = None
        self._done = False

    def _push(self, item: Any) -> None:
        raise NotImplementedError

    def _deliver(self, output: pb.SessionOutput) -> None:
        """(The multiplexer calls it.) What a ``Parse`` stream delivers: the output without its
        status, then the status as the error that ends the session."""
        if not output.HasField("status"):
            self._push(output)
            return
        if output.deltas or output.events or output.wire:
            rest = pb.SessionOutput()
            rest.CopyFrom(output)
            rest.ClearField("status")
            self._push(rest)
        self._push(status_error(output.status))

    def _fail(self, error: BaseException) -> None:
        self._push(error)

    def _next(self, item: Any) -> pb.SessionOutput:
        """The output to yield for a queued item, or its error raised. The session is done, and
        ``final`` set, before its last output is yielded: a caller that stops at the final reply
        finds ``final`` there, as on a ``Parse`` stream."""
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if item.HasField("final"):
            self._done = True
            self.final = Final.of(item.final)
        return item

    def _step(self, steps: Iterable[StepLike], finish: pb.Finish | None) -> Any:
        return self._mux.send(self.key, steps, finish)

    def _send(self, request: pb.ParseRequest) -> Any:
        """A ready ``Parse`` client message (``parse_stream``'s) as the session's next one."""
        return self._step(request.steps, request.finish if request.HasField("finish") else None)

    def cancel(self) -> None:
        """Drop the session: the server frees it, the iteration raises CANCELLED (``CancelledError``
        for the asyncio session, as on ``Parse``)."""
        if self._mux.cancel(self.key):
            self._push(self._cancelled())

    @staticmethod
    def _cancelled() -> BaseException:
        return stream_error(grpc.StatusCode.CANCELLED, "Locally cancelled by application!")


# ------------------------------------------------------------------------------------- blocking


class MuxStream(_MuxSession, Session):
    """A session on the client's shared ``ParseBatch`` stream, with ``ParseStream``'s API: ``send``
    and ``finish`` from any thread, iterate the replies (``ParseResponse``s) or ``deltas()`` /
    ``wire()``; ``final`` once the iteration has ended."""

    def __init__(self, mux: Multiplexer, open_: pb.Open) -> None:
        super().__init__(mux)
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._push = self._items.put  # type: ignore[method-assign]
        self.key = mux.open(self, open_)

    def _replies(self) -> Iterator[pb.SessionOutput]:
        while not self._done:
            yield self._next(self._items.get())

    def __iter__(self) -> Iterator[pb.ParseResponse]:
        return map(as_reply, self._replies())


class _Multiplexing:
    """Both multiplexers' settings (the client's) and core; ``_prepare`` makes the I/O side's state."""

    def __init__(
        self,
        stub: pb_grpc.ParserServiceStub,
        metadata: Metadata,
        policy: ResumePolicy | None,
        flush_interval: float,
        max_batch: int = MAX_BATCH,
        timeout: float | None = None,
    ) -> None:
        self._stub, self._metadata, self._policy = stub, metadata, policy
        self._interval, self._timeout = flush_interval, timeout
        self.core = MuxCore(policy, max_batch)
        self._closed = False
        self._prepare()

    def _prepare(self) -> None:
        raise NotImplementedError


class Multiplexer(_Multiplexing):
    """The blocking client's shared stream: a flushing thread writes the coalesced messages, a
    reading thread per stream routes the replies; one lock guards the ``MuxCore``."""

    def _prepare(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: queue.SimpleQueue[Any] | None = None
        self._call: Any = None
        self._generation = 0
        self._deadlines: list[tuple[float, str]] = []
        self._flushes = 0
        self._flushed = threading.Condition(self._lock)
        """Notified at every flush: a session's next message waits for the one carrying its last."""
        self._unwritten = 0
        """Messages flushed onto the current stream that its request thread has not taken yet
        (grpc's blocking call takes the next one once the last is written)."""
        self._full = False
        """Set at ``HIGH_WATER`` unwritten, cleared below half of it: senders wait meanwhile."""
        self._room = threading.Condition(self._lock)
        self._taken_at = 0.0
        """``time.monotonic()`` of the last flush that sent a message."""
        self._flusher = threading.Thread(target=self._flush_loop, name="parsetier-mux-flush", daemon=True)
        self._flusher.start()

    def open(self, rider: MuxStream, open_: pb.Open) -> str:
        with self._lock:
            if self._closed:
                raise ValueError("the client is closed")
            if self._call is None:
                self._spawn_reader(*self._start([]))
            rider.key = self.core.new_key()
            self.core.open(rider, open_)
            if self._timeout is not None:
                heapq.heappush(self._deadlines, (time.monotonic() + self._timeout, rider.key))
            self._queued()
            return rider.key

    def _wait_turn(self, key: str) -> bool:
        """Wait (holding the lock) until ``key`` may queue a message: a session has one entry per
        message, so its next one waits for the flush of the last (the other sessions' messages
        coalesce meanwhile). False when the session has ended."""
        core = self.core
        while core.must_flush_before(key):
            flushes = self._flushes
            if self._interval:
                self._wake.notify()  # a session's next message cuts the bound short
            while self._flushes == flushes and not self._closed:
                self._flushed.wait()
            if self._closed:
                return False
        return key in core.riders

    def send(self, key: str, steps: Iterable[StepLike], finish: pb.Finish | None = None) -> None:
        """Queue session ``key``'s next message, then wait while ``HIGH_WATER`` messages are
        unwritten (back-pressure: the stream writes one message at a time, as flow control lets it)."""
        with self._lock:
            if key not in self.core.riders or not self._wait_turn(key):
                return  # the session has ended: its iteration says how
            self.core.step(key, steps, finish)
            self._queued()
            while self._full and not self._closed and key in self.core.riders:
                self._room.wait()

    def cancel(self, key: str) -> bool:
        with self._lock:
            if key not in self.core.riders:
                return False
            self.core.cancel(key)
            self._queued()
            self._room.notify_all()  # its sender, if waiting for room, goes on
            return True

    def _queued(self) -> None:
        """After queueing: flush at the size bound, else make sure the flusher is counting."""
        core = self.core
        if core.queued >= core.max_batch:
            self._flush()
        elif core.queued == 1:
            self._wake.notify()

    def _flush(self) -> None:
        message = self.core.take()
        if message is not None and self._queue is not None:
            self._taken_at = time.monotonic()
            self._queue.put(message)
            self._unwritten += 1
            self._full = self._full or self._unwritten >= HIGH_WATER
        self._flushes += 1
        self._flushed.notify_all()

    def _make_room(self, full: bool) -> None:
        """Senders waiting for room go on unless ``full`` (a new stream, a failed one, or the
        writer below half of ``HIGH_WATER``)."""
        self._full = full
        if not full:
            self._room.notify_all()

    def _requests(self, outgoing: queue.SimpleQueue[Any]) -> Iterator[pb.ParseBatchRequest]:
        """A call's request iterator: the flushed messages, each counted out as grpc takes it."""
        while (message := outgoing.get()) is not _CLOSE:
            with self._lock:
                if outgoing is self._queue:
                    self._unwritten -= 1
                    if self._full and self._unwritten < HIGH_WATER // 2:
                        self._make_room(False)
            yield message

    def _flush_loop(self) -> None:
        with self._lock:
            while not self._closed:
                timeout = self._deadlines[0][0] - time.monotonic() if self._deadlines else None
                if not self.core.queued:
                    self._wake.wait(timeout)
                    self._expire()
                    continue
                if self._interval:
                    self._wake.wait(self._interval)
                else:
                    self._hold()
                self._flush()
                self._expire()

    def _hold(self) -> None:
        """With the flush bound 0: wait (holding the lock) while a message is unanswered, at most
        ``HOLD`` after it went out, unless the next message is full (see ``HOLD``)."""
        core, until = self.core, self._taken_at + HOLD
        while core.in_flight and core.queued < core.max_batch and not self._closed:
            left = until - time.monotonic()
            if left <= 0:
                return
            self._wake.wait(left)

    def _expire(self) -> None:
        """Sessions past the client's ``timeout``: cancelled on the server, DEADLINE_EXCEEDED here."""
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, key = heapq.heappop(self._deadlines)
            rider = self.core.riders.get(key)
            if rider is not None:
                self.core.cancel(key)
                rider._fail(_expired())
                self._queued()
                self._room.notify_all()

    def _start(self, first: list[pb.ParseBatchRequest]) -> tuple[Any, int]:
        """A new stream fed from a fresh queue holding ``first``: the call and its generation."""
        outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for message in first:
            outgoing.put(message)
        self._queue = outgoing
        self._unwritten = len(first)
        self._make_room(len(first) >= HIGH_WATER)
        self._call = self._stub.ParseBatch(self._requests(outgoing), metadata=self._metadata)
        self._generation += 1
        return self._call, self._generation

    def _spawn_reader(self, call: Any, generation: int) -> None:
        threading.Thread(
            target=self._read, args=(call, generation), name="parsetier-mux-read", daemon=True
        ).start()

    def _read(self, call: Any, generation: int) -> None:
        attempt = 0
        while True:
            error: grpc.RpcError | None = None
            try:
                for reply in joined(call):
                    with self._lock:
                        if generation != self._generation:
                            return
                        self.core.received(reply)
                        if self.core.queued and not self.core.in_flight:
                            self._wake.notify()  # the flusher's hold is over
                        attempt = 0
                        if self.core.must_move:
                            error = _refused()
                            call.cancel()
                            break
            except grpc.RpcError as exc:
                error = exc
            with self._lock:
                if generation != self._generation or self._closed:
                    return
                if error is None:
                    error = stream_error(grpc.StatusCode.UNAVAILABLE, "the ParseBatch stream ended")
                policy = self._policy
                moves = (
                    policy is not None
                    and self.core.ledger is not None
                    and retryable(error)
                    and attempt < policy.attempts
                )
                if self._queue is not None:
                    self._queue.put(_CLOSE)  # end the broken call's request thread
                if not moves:
                    self.core.fail_all(error)
                    self._call = self._queue = None
                    self._make_room(False)
                    self._generation += 1
                    self._flush()  # releases senders waiting for their turn
                    return
            assert policy is not None
            time.sleep(policy.backoff(attempt) if attempt else 0)
            attempt += 1
            with self._lock:
                if self._closed:
                    return
                call, generation = self._start(self.core.replay())
                self._flush()  # what was queued for the next flush goes out after the replay

    def close(self) -> None:
        """Close the shared stream; sessions still open end with CANCELLED."""
        with self._lock:
            self._flush()
            self._closed = True
            self._wake.notify_all()
            self._flushed.notify_all()
            self._make_room(False)
            if self._queue is not None:
                self._queue.put(_CLOSE)
            call, self._call = self._call, None
            self._generation += 1
            self.core.fail_all(stream_error(grpc.StatusCode.CANCELLED, "the client was closed"))
        if call is not None:
            call.cancel()


# ------------------------------------------------------------------------------------- asyncio


class AsyncMuxStream(_MuxSession, AsyncSession):
    """A session on the asyncio client's shared ``ParseBatch`` stream, with
    ``AsyncParseStream``'s API (``await send``, ``await finish``, ``async for``, ``deltas()``,
    ``wire()``, ``final``, ``resumes``)."""

    def __init__(self, mux: AsyncMultiplexer) -> None:
        super().__init__(mux)
        self._items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._admitted: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _push(self, item: Any) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _deliver(self, output: pb.SessionOutput) -> None:
        if not self._admitted.done():
            if output.HasField("status"):
                self._refuse(status_error(output.status))
                return
            self._admitted.set_result(None)
        super()._deliver(output)

    def _admit(self) -> None:
        if not self._admitted.done():
            self._admitted.set_result(None)

    def _fail(self, error: BaseException) -> None:
        if not self._admitted.done():
            self._refuse(error)
        else:
            self._push(error)

    def _refuse(self, error: BaseException) -> None:
        """The open failed: ``open()`` raises it (retrieved here, so asyncio does not warn)."""
        self._admitted.set_exception(error)
        self._admitted.exception()

    @staticmethod
    def _cancelled() -> BaseException:
        return asyncio.CancelledError()

    async def _replies(self) -> AsyncIterator[pb.SessionOutput]:  # type: ignore[override]
        items = self._items
        while not self._done:
            while not items:
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
                self._waiter = None
            yield self._next(items.popleft())

    async def __aiter__(self) -> AsyncIterator[pb.ParseResponse]:
        async for output in self._replies():
            yield as_reply(output)


class AsyncMultiplexer(_Multiplexing):
    """The asyncio client's shared stream: flushes scheduled on the loop, a writer task and a
    reader task per stream."""

    def _prepare(self) -> None:
        self._call: grpc.aio.StreamStreamCall | None = None
        self._outgoing: asyncio.Queue[Any] | None = None
        self._tasks: list[asyncio.Task] = []
        self._scheduled: asyncio.Handle | asyncio.TimerHandle | None = None
        self._holding = False
        """The scheduled flush waits for the reply to the message in flight (``HOLD``)."""
        self._taken_at = 0.0
        """Loop time of the last flush that sent a message."""
        self._room = asyncio.Event()
        self._room.set()
        self._flushed: asyncio.Future[None] | None = None
        """Resolved at the next flush: a session's next message waits for the one carrying its last."""

    async def open(self, open_: pb.Open) -> AsyncMuxStream:
        if self._closed:
            raise ValueError("the client is closed")
        if self._call is None:
            self._start([])
        rider = AsyncMuxStream(self)
        rider.key = self.core.new_key()
        self.core.open(rider, open_)
        if self._timeout is not None:
            asyncio.get_running_loop().call_later(self._timeout, self._expire, rider)
        self._queued()
        await rider._admitted  # the server accepted the open (its reply came without a status)
        return rider

    async def _wait_turn(self, key: str) -> bool:
        """Wait until ``key`` may queue a message (see ``Multiplexer._wait_turn``); False when the
        session has ended."""
        core = self.core
        while core.must_flush_before(key):
            if self._flushed is None:
                self._flushed = asyncio.get_running_loop().create_future()
            await self._flushed
        return key in core.riders and not self._closed

    async def send(self, key: str, steps: Iterable[StepLike], finish: pb.Finish | None = None) -> None:
        """Queue session ``key``'s next message, then wait while ``HIGH_WATER`` messages are unwritten."""
        core = self.core
        if key not in core.riders or not await self._wait_turn(key):
            return
        core.step(key, steps, finish)
        self._queued()
        if not self._room.is_set():
            await self._room.wait()

    def cancel(self, key: str) -> bool:
        if key not in self.core.riders:
            return False
        self.core.cancel(key)
        self._queued()
        return True

    def _expire(self, rider: AsyncMuxStream) -> None:
        if rider.key in self.core.riders:
            self.core.cancel(rider.key)
            rider._fail(_expired())
            self._queued()

    def _queued(self) -> None:
        core = self.core
        if core.queued >= core.max_batch:
            self._flush()
        elif self._scheduled is None:
            loop = asyncio.get_running_loop()
            if self._interval:
                self._scheduled = loop.call_later(self._interval, self._flush)
            elif core.in_flight:
                self._scheduled = loop.call_at(self._taken_at + HOLD, self._flush)
                self._holding = True
            else:
                self._scheduled = loop.call_soon(self._flush)

    def _answered(self) -> None:
        """A reply came: with nothing unanswered any more, what is held goes out now."""
        if self._holding and not self.core.in_flight and self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = asyncio.get_running_loop().call_soon(self._flush)
            self._holding = False

    def _flush(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        self._holding = False
        flushed, self._flushed = self._flushed, None
        if flushed is not None and not flushed.done():
            flushed.set_result(None)
        message = self.core.take()
        if message is None or self._outgoing is None:
            return
        self._taken_at = asyncio.get_running_loop().time()
        self._outgoing.put_nowait(message)
        if self._outgoing.qsize() >= HIGH_WATER:
            self._room.clear()

    def _start(self, first: list[pb.ParseBatchRequest]) -> None:
        call = watch(self._stub.ParseBatch(metadata=self._metadata))
        outgoing: asyncio.Queue[Any] = asyncio.Queue()
        for message in first:
            outgoing.put_nowait(message)
        self._call, self._outgoing = call, outgoing
        self._tasks = [
            asyncio.ensure_future(self._write(call, outgoing)),
            asyncio.ensure_future(self._read(call)),
        ]

    async def _write(self, call: grpc.aio.StreamStreamCall, outgoing: asyncio.Queue[Any]) -> None:
        """Write what is flushed, in order; a write that finds the call broken stops quietly (the
        reader sees the break)."""
        try:
            while (message := await outgoing.get()) is not _CLOSE:
                await call.write(message)
                if outgoing.qsize() < HIGH_WATER // 2:
                    self._room.set()
            await call.done_writing()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            write_failed(call)

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        core, joiner, attempt = self.core, Joiner(), 0
        while True:
            error: grpc.RpcError | None = None
            try:
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        break
                    reply = joiner.push(message)
                    if reply is None:
                        continue
                    core.received(reply)
                    self._answered()
                    attempt = 0
                    if core.must_move:
                        error = _refused()
                        break
            except grpc.aio.AioRpcError as exc:
                error = await server_error(call, exc)
            if self._closed or call is not self._call:
                return
            if error is None:
                code = await call.code()
                error = stream_error(
                    code if code != grpc.StatusCode.OK else grpc.StatusCode.UNAVAILABLE,
                    await call.details() or "the ParseBatch stream ended",
                )
            policy = self._policy
            if policy is None or core.ledger is None or not retryable(error) or attempt >= policy.attempts:
                self._stop_stream()
                core.fail_all(error)
                self._flush()  # releases senders waiting for their turn
                return
            await asyncio.sleep(policy.backoff(attempt) if attempt else 0)
            attempt += 1
            if self._closed:
                return
            self._stop_writer()
            call.cancel()
            replay = core.replay()
            call = watch(self._stub.ParseBatch(metadata=self._metadata))
            outgoing: asyncio.Queue[Any] = asyncio.Queue()
            for message in replay:
                outgoing.put_nowait(message)
            self._call, self._outgoing, joiner = call, outgoing, Joiner()
            self._tasks = [asyncio.ensure_future(self._write(call, outgoing)), asyncio.current_task()]  # type: ignore[list-item]
            self._room.set()
            self._flush()  # what was queued for the next flush goes out after the replay

    def _stop_writer(self) -> None:
        if self._tasks:
            self._tasks[0].cancel()

    def _stop_stream(self) -> None:
        self._stop_writer()
        if self._call is not None:
            self._call.cancel()
        self._call = self._outgoing = None
        self._room.set()

    async def close(self) -> None:
        """Close the shared stream; sessions still open end with CANCELLED."""
        self._flush()
        self._closed = True
        self.core.fail_all(stream_error(grpc.StatusCode.CANCELLED, "the client was closed"))
        if self._outgoing is not None:
            self._outgoing.put_nowait(_CLOSE)
        call = self._call
        self._call = None
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if call is not None:
            call.cancel()
