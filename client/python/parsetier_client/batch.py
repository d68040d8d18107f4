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
the outputs. Only the stream's own errors (malformed framing, its limits, the server going away)
raise ``grpc.RpcError``, and they end every session on the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.parts import Joiner, joined
from parsetier_client.requests import StepLike, finish_message, open_message, step_message

_CLOSE = object()


def session_error(output: pb.SessionOutput) -> tuple[grpc.StatusCode, str] | None:
    """The status a session ended with in this output (CANCELLED after a cancel), or None."""
    if not output.HasField("status"):
        return None
    return _CODES.get(output.status.code, grpc.StatusCode.UNKNOWN), output.status.message


_CODES = {code.value[0]: code for code in grpc.StatusCode}


class StepBuilder:
    """The next engine step's entries, one per session key (merged when a key is used twice:
    an open, steps and a finish of one session in one step travel as one entry)."""

    def __init__(self) -> None:
        self._entries: dict[str, pb.SessionInput] = {}

    def _entry(self, key: str) -> pb.SessionInput:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = pb.SessionInput(key=key)
        return entry

    def open(self, key: str, model: str, **options: Any) -> None:
        """Open session ``key``; ``options`` as for ``requests.open_message``."""
        self._entry(key).open.CopyFrom(open_message(model, **options))

    def feed(self, key: str, *steps: StepLike) -> None:
        """Decode steps of session ``key`` (token-id lists, text, or ``pb.Step``)."""
        entry = self._entry(key)
        for step in steps:
            if isinstance(step, list | tuple):
                entry.steps.add().token_ids.extend(step)
            else:
                entry.steps.append(step_message(step))

    def finish(self, key: str, reason: str = "stop", matched_stop: int | str | None = None) -> None:
        """End session ``key``'s output; its output in the reply carries ``final``."""
        self._entry(key).finish.CopyFrom(finish_message(reason, matched_stop))

    def cancel(self, key: str) -> None:
        """Drop session ``key`` (its output in the reply carries the status CANCELLED)."""
        entry = self._entries[key] = pb.SessionInput(key=key)
        entry.cancel = True

    def take(self) -> pb.ParseBatchRequest:
        """The queued entries as one message; the builder starts empty again."""
        entries, self._entries = self._entries, {}
        return pb.ParseBatchRequest(sessions=entries.values())


def outputs_of(response: pb.ParseBatchResponse) -> dict[str, pb.SessionOutput]:
    return {output.key: output for output in response.sessions}


class Batch(StepBuilder):
    """A blocking ``ParseBatch`` stream (``Client.batch()``). Not thread-safe: one serving loop
    drives it."""

    def __init__(self, stub: pb_grpc.ParserServiceStub, timeout: float | None = None) -> None:
        super().__init__()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._call = stub.ParseBatch(iter(self._queue.get, _CLOSE), timeout=timeout)
        self._replies = joined(self._call)
        self.in_flight = 0
        """Steps sent whose replies have not been received yet."""
        self._ended = False

    def send(self) -> None:
        """Send the queued entries as one step (never blocks on the network)."""
        self._queue.put(self.take())
        self.in_flight += 1

    def receive(self) -> dict[str, pb.SessionOutput]:
        """The reply to the oldest step sent: the output of each session that produced any.
        Raises ``grpc.RpcError`` when the stream has ended (its status)."""
        try:
            reply = next(self._replies)
        except grpc.RpcError:
            self._ended = True
            raise
        self.in_flight -= 1
        return outputs_of(reply)

    def step(self) -> dict[str, pb.SessionOutput]:
        """Send the queued entries and wait for their reply."""
        self.send()
        return self.receive()

    def close(self) -> None:
        """Close the stream; sessions still open on it are dropped by the server."""
        self._queue.put(_CLOSE)
        if self._ended:
            return  # its status was raised already
        for _ in self._replies:  # replies to steps still in flight, then the status
            pass

    def cancel_stream(self) -> None:
        self._call.cancel()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            self.close()
        else:
            self.cancel_stream()


class AsyncBatch(StepBuilder):
    """An asyncio ``ParseBatch`` stream (``AsyncClient.batch()``); one task drives it."""

    def __init__(self, stub: pb_grpc.ParserServiceStub, timeout: float | None = None) -> None:
        super().__init__()
        self._call = stub.ParseBatch(timeout=timeout)
        self._joiner = Joiner()
        self.in_flight = 0
        self._ended = False

    async def send(self) -> None:
        await self._call.write(self.take())
        self.in_flight += 1

    async def receive(self) -> dict[str, pb.SessionOutput]:
        reply = None
        while reply is None:
            try:
                message = await self._call.read()
            except grpc.aio.AioRpcError:
                self._ended = True
                raise
            if message is grpc.aio.EOF:
                self._ended = True
                raise await self._status()
            reply = self._joiner.push(message)
        self.in_flight -= 1
        return outputs_of(reply)

    async def step(self) -> dict[str, pb.SessionOutput]:
        await self.send()
        return await self.receive()

    async def close(self) -> None:
        """Close the stream (sessions still open on it are dropped by the server); raises the
        stream's status when it was not OK."""
        with contextlib.suppress(asyncio.InvalidStateError):  # the call may already be over
            await self._call.done_writing()
        if self._ended:
            return  # its status was raised already
        while self.in_flight:
            await self.receive()
        if await self._call.code() != grpc.StatusCode.OK:
            raise await self._status()

    async def _status(self) -> grpc.aio.AioRpcError:
        return grpc.aio.AioRpcError(
            await self._call.code(),
            await self._call.initial_metadata(),
            await self._call.trailing_metadata(),
            await self._call.details(),
        )

    def cancel_stream(self) -> None:
        self._call.cancel()

    async def __aenter__(self) -> AsyncBatch:
        return self

    async def __aexit__(self, kind: object, *exc: object) -> None:
        if kind is None:
            await self.close()
        else:
            self.cancel_stream()
