"""Many sessions over one ``ParseBatch`` stream, one round trip per engine step.

A serving loop queues what each request did during a step — ``open``, ``feed``, ``finish``,
``cancel`` — and calls ``step()`` once: everything queued goes out as one ``ParseBatchRequest``
and the server's one reply comes back as ``{key: SessionOutput}``::

    with client.batch() as batch:                      # Client.batch / AsyncClient.batch
        batch.open("req-1", "qwen3", tools=tools)
        batch.feed("req-1", [151667, 198])
        for key, out in batch.step().items():          # one reply per step
            if out.HasField("status"):                 # that session ended with an error
                ...                                    # (session_error(out) gives the code)
            emit(key, out.deltas, out.final if out.HasField("final") else None)

``send()`` and ``receive()`` split ``step()`` for a loop that wants the round trip to overlap its
own work; replies come back in order, one per sent step. Session errors never raise: they are in
the outputs. Only the stream's own errors (malformed framing, its limits) raise ``grpc.RpcError``,
and they end every session on the stream.

With resume on (the client's default, ``resume=``), a broken stream — a dead or draining server,
a lost connection, a proxy's reset — does not end the sessions: the batch opens a new stream
through the same channel, with the Parse streams' backoff and retry budget (``ResumePolicy``),
resumes every live session there (``batch_resume``), and ``receive()`` goes on with the next
step's reply as if nothing had happened. With resume off, such a break raises as any stream error.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import time
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.aio_status import server_error, watch, write_failed
from parsetier_client.batch_resume import BatchLedger
from parsetier_client.packed import add_packed, outputs_of
from parsetier_client.parts import Joiner, joined
from parsetier_client.requests import StepLike, finish_message, open_message, step_message
from parsetier_client.resume import ResumePolicy, retryable

Metadata = tuple[tuple[str, str], ...] | None

_CLOSE = object()


def session_error(output: pb.SessionOutput) -> tuple[grpc.StatusCode, str] | None:
    """The status a session ended with in this output (CANCELLED after a cancel), or None."""
    if not output.HasField("status"):
        return None
    return _CODES.get(output.status.code, grpc.StatusCode.UNKNOWN), output.status.message


_CODES = {code.value[0]: code for code in grpc.StatusCode}


class StepBuilder:
    """The next engine step's entries, one per session key (merged when a key is used twice:
    an open, steps and a finish of one session in one step travel as one entry). A key whose only
    part is one step of token ids goes as a packed item (``packed``), after the entries."""

    def __init__(self, resumable: bool = False) -> None:
        self._entries: dict[str, pb.SessionInput] = {}
        self._plain: dict[str, list[int]] = {}
        """Keys whose only part so far is one step of ids."""
        self._resumable = resumable
        """Opens say ``resumable`` (the batch resumes them; a draining server hands them off)."""

    def _entry(self, key: str) -> pb.SessionInput:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = pb.SessionInput(key=key)
            ids = self._plain.pop(key, None)
            if ids is not None:
                entry.steps.add().token_ids.extend(ids)
        return entry

    def open(self, key: str, model: str | pb.Open, **options: Any) -> None:
        """Open session ``key``; ``options`` as for ``requests.open_message`` (or a whole
        ``pb.Open`` and no options)."""
        entry = self._entry(key)
        entry.open.CopyFrom(model if isinstance(model, pb.Open) else open_message(model, **options))
        if self._resumable:
            entry.open.resumable = True

    def feed(self, key: str, *steps: StepLike) -> None:
        """Decode steps of session ``key`` (token-id lists, text, or ``pb.Step``)."""
        if (
            len(steps) == 1
            and isinstance(steps[0], list | tuple)
            and key not in self._entries
            and key not in self._plain
        ):
            self._plain[key] = list(steps[0])
            return
        entry = self._entry(key)
        for step in steps:
            if isinstance(step, list | tuple):
                entry.steps.add().token_ids.extend(step)
            else:
                entry.steps.append(step_message(step))

    def finish(
        self,
        key: str,
        reason: str = "stop",
        matched_stop: int | str | None = None,
        other_choices_usage: pb.Usage | tuple[int, int] | None = None,
    ) -> None:
        """End session ``key``'s output; its output in the reply carries ``final``
        (``other_choices_usage``: see ``finish_message``)."""
        self.finish_with(key, finish_message(reason, matched_stop, other_choices_usage))

    def finish_with(self, key: str, finish: pb.Finish) -> None:
        """``finish`` with a ready ``Finish`` message."""
        self._entry(key).finish.CopyFrom(finish)

    def cancel(self, key: str) -> None:
        """Drop session ``key`` (its output in the reply carries the status CANCELLED)."""
        self._plain.pop(key, None)
        entry = self._entries[key] = pb.SessionInput(key=key)
        entry.cancel = True

    def take(self) -> pb.ParseBatchRequest:
        """The queued entries as one message; the builder starts empty again."""
        entries, self._entries = self._entries, {}
        message = pb.ParseBatchRequest(sessions=entries.values())
        if self._plain:
            add_packed(message, self._plain)
            self._plain = {}
        return message


def _ended_early() -> RuntimeError:
    return RuntimeError("the ParseBatch stream ended OK before the reply to a step")


def _refused() -> grpc.aio.AioRpcError:
    """What a batch raises when it could not find a server that opens its sessions."""
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        "every server tried refused to open a session (draining or overloaded)",
    )


class _BatchStream(StepBuilder):
    """What the blocking and the asyncio batch streams hold alike: the stub and call options, and
    with resume on, the policy and the ledger of every session's history; and the decisions of
    their reconnect loop, written once (as ``session_core.StreamCore`` for ``Parse``): what a
    reply delivers, whether a break moves the stream and after how long. Each subclass only moves
    the messages: ``_start`` opens its call, ``_move`` replaces a broken one."""

    def __init__(
        self,
        stub: pb_grpc.ParserServiceStub,
        timeout: float | None = None,
        metadata: Metadata = None,
        policy: ResumePolicy | None = None,
    ) -> None:
        super().__init__(resumable=policy is not None)
        self._stub, self._timeout, self._metadata = stub, timeout, metadata
        self._policy = policy
        self._ledger = BatchLedger() if policy is not None else None
        self._closing = False
        self._start(())
        self.in_flight = 0
        """Steps sent whose replies have not been received yet."""
        self._ended = False
        self._attempt = 0
        """Moves in a row without progress (the retry budget's count)."""

    def _start(self, messages: list[pb.ParseBatchRequest] | tuple[()]) -> None:
        raise NotImplementedError

    def _ready(self) -> dict[str, pb.SessionOutput] | None:
        """The oldest step's outputs once every reply they need is in (resume on), else None."""
        outputs = self._ledger.ready() if self._ledger is not None else None
        if outputs is not None:
            self.in_flight -= 1
        return outputs

    def _took(self, reply: pb.ParseBatchResponse) -> dict[str, pb.SessionOutput] | grpc.RpcError | None:
        """A whole reply was read: the outputs to return (resume off), the break that moves the
        stream (an open refused as draining or overloaded), or None: read on."""
        ledger = self._ledger
        if ledger is None:
            self.in_flight -= 1
            return outputs_of(reply)
        ledger.received(reply)
        if ledger.must_move:
            return _refused()
        self._attempt = 0  # progress renews the budget
        return None

    def _broke(self, error: BaseException) -> float:
        """The stream broke with ``error``: the seconds to wait before it moves, or ``error``
        raised when it does not (resume off, the request's own status, the budget spent)."""
        policy, attempt = self._policy, self._attempt
        if (
            self._ledger is None
            or policy is None
            or not isinstance(error, grpc.RpcError)
            or not retryable(error)
            or attempt >= policy.attempts
        ):
            self._ended = True
            raise error
        self._attempt += 1
        return policy.backoff(attempt) if attempt else 0

    def _closed_with(self, error: grpc.RpcError) -> None:
        """The stream ended with ``error`` once every reply was in: raised, unless resume is on
        and it is a break (then nothing is lost)."""
        if self._ledger is None or not retryable(error):
            raise error

    @property
    def resumes(self) -> int:
        """How many times the batch moved its sessions to a new stream."""
        return self._ledger.resumes if self._ledger is not None else 0


class Batch(_BatchStream):
    """A blocking ``ParseBatch`` stream (``Client.batch()``). Not thread-safe: one serving loop
    drives it."""

    def _start(self, messages: list[pb.ParseBatchRequest] | tuple[()]) -> None:
        """A new call fed from a fresh queue, which holds ``messages`` first."""
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for message in messages:
            self._queue.put(message)
        if self._closing:
            self._queue.put(_CLOSE)
        self._call = self._stub.ParseBatch(
            iter(self._queue.get, _CLOSE), timeout=self._timeout, metadata=self._metadata
        )
        self._replies = joined(self._call)

    def send(self) -> None:
        """Send the queued entries as one step (never blocks on the network)."""
        message = self.take()
        if self._ledger is not None:
            self._ledger.sent(message)
        self._queue.put(message)
        self.in_flight += 1

    def receive(self) -> dict[str, pb.SessionOutput]:
        """The reply to the oldest step sent: the output of each session that produced any.
        Raises ``grpc.RpcError`` when the stream has ended (its status) and does not resume."""
        self._attempt = 0
        while True:
            outputs = self._ready()
            if outputs is not None:
                return outputs
            try:
                got = self._took(next(self._replies))
            except StopIteration:
                got = _ended_early()
            except grpc.RpcError as exc:
                got = exc
            if isinstance(got, dict):
                return got
            if got is not None:
                time.sleep(self._broke(got))
                self._move()

    def _move(self) -> None:
        """A new call replaces the broken one, the ledger's replay first."""
        assert self._ledger is not None
        self._call.cancel()
        self._queue.put(_CLOSE)  # end the broken call's request thread
        self._start(self._ledger.replay())

    def step(self) -> dict[str, pb.SessionOutput]:
        """Send the queued entries and wait for their reply."""
        self.send()
        return self.receive()

    def close(self) -> None:
        """Close the stream; sessions still open on it are dropped by the server."""
        if self._ledger is not None and not self._ended:
            while self.in_flight:  # resumes if the stream breaks meanwhile
                self.receive()
        self._closing = True
        self._queue.put(_CLOSE)
        if self._ended:
            return  # its status was raised already
        try:
            for _ in self._replies:  # replies to steps still in flight, then the status
                pass
        except grpc.RpcError as exc:
            self._closed_with(exc)

    def cancel_stream(self) -> None:
        self._policy = None  # the caller's own cancel is never resumed
        self._call.cancel()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            self.close()
        else:
            self.cancel_stream()


class AsyncBatch(_BatchStream):
    """An asyncio ``ParseBatch`` stream (``AsyncClient.batch()``); one task drives it.

    With resume on, ``send()`` queues the step for a writer task of the batch's own (it never
    waits for the network), so that a resume can re-send the sessions' history ahead of later
    steps while ``receive()`` reads the replies."""

    _writer: asyncio.Task | None = None
    """The task writing queued steps (resume on), once ``_start`` made one."""

    def _start(self, messages: list[pb.ParseBatchRequest] | tuple[()]) -> None:
        self._call = watch(self._stub.ParseBatch(timeout=self._timeout, metadata=self._metadata))
        self._joiner = Joiner()
        if self._ledger is None:
            return
        self._outgoing: asyncio.Queue[Any] = asyncio.Queue()
        for message in messages:
            self._outgoing.put_nowait(message)
        if self._closing:
            self._outgoing.put_nowait(_CLOSE)
        self._writer = asyncio.ensure_future(_write_from(self._call, self._outgoing))

    async def send(self) -> None:
        message = self.take()
        if self._ledger is None:
            try:
                await self._call.write(message)
            except (asyncio.InvalidStateError, grpc.aio.AioRpcError):  # the stream is over: its status
                write_failed(self._call)
                self._ended = True
                raise await self._status() from None
        else:
            self._ledger.sent(message)
            self._outgoing.put_nowait(message)
        self.in_flight += 1

    async def receive(self) -> dict[str, pb.SessionOutput]:
        self._attempt = 0
        while True:
            outputs = self._ready()
            if outputs is not None:
                return outputs
            try:
                message = await self._call.read()
            except grpc.aio.AioRpcError as exc:
                got: Any = await server_error(self._call, exc)
            else:
                if message is grpc.aio.EOF:
                    got = await self._status()
                    if got.code() == grpc.StatusCode.OK:
                        got = _ended_early()
                else:
                    reply = self._joiner.push(message)
                    got = None if reply is None else self._took(reply)
            if isinstance(got, dict):
                return got
            if got is not None:
                await asyncio.sleep(self._broke(got))
                self._move()

    def _move(self) -> None:
        """A new call replaces the broken one, the ledger's replay first."""
        assert self._ledger is not None
        self._stop_writer()
        self._call.cancel()
        self._start(self._ledger.replay())

    async def step(self) -> dict[str, pb.SessionOutput]:
        await self.send()
        return await self.receive()

    async def close(self) -> None:
        """Close the stream (sessions still open on it are dropped by the server); raises the
        stream's status when it was not OK."""
        if self._ledger is not None:
            if not self._ended:
                while self.in_flight:  # resumes if the stream breaks meanwhile
                    await self.receive()
            self._closing = True
            self._outgoing.put_nowait(_CLOSE)
            if self._writer is not None:
                await self._writer
        else:
            with contextlib.suppress(asyncio.InvalidStateError):  # the call may already be over
                await self._call.done_writing()
        if self._ended:
            return  # its status was raised already
        while self.in_flight:
            await self.receive()
        if await self._call.code() != grpc.StatusCode.OK:
            self._closed_with(await self._status())

    async def _status(self) -> grpc.aio.AioRpcError:
        error = grpc.aio.AioRpcError(
            await self._call.code(),
            await self._call.initial_metadata(),
            await self._call.trailing_metadata(),
            await self._call.details(),
        )
        return await server_error(self._call, error)

    def _stop_writer(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            self._writer = None

    def cancel_stream(self) -> None:
        self._policy = None  # the caller's own cancel is never resumed
        self._stop_writer()
        self._call.cancel()

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            await self.close()
        else:
            self.cancel_stream()


async def _write_from(call: grpc.aio.StreamStreamCall, outgoing: asyncio.Queue[Any]) -> None:
    """Write what is queued to ``call``, half-closing at ``_CLOSE``. A write that finds the call
    broken stops quietly: the reading side sees the break and resumes on a new call."""
    try:
        while (message := await outgoing.get()) is not _CLOSE:
            await call.write(message)
        await call.done_writing()
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        write_failed(call)
