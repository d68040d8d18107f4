"""Asyncio client: the same calls as ``sync.Client``, awaitable, for asyncio serving stacks."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from itertools import chain
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.aio_status import server_error, watch, write_failed
from parsetier_client.batch import AsyncBatch
from parsetier_client.client_base import ClientBase, Then
from parsetier_client.mux import AsyncMultiplexer, AsyncMuxStream
from parsetier_client.parts import joined_async
from parsetier_client.rendering import opened
from parsetier_client.requests import (
    StepLike,
    steps_request,
    stream_messages,
)
from parsetier_client.result import ParseResult, collect
from parsetier_client.resume import ResumePolicy
from parsetier_client.security import aio_channel
from parsetier_client.session_api import AsyncSession
from parsetier_client.session_core import StreamCore


async def _status_error(call: grpc.aio.StreamStreamCall) -> grpc.aio.AioRpcError:
    """The error a finished call ended with, for writes that find the call already over."""
    error = grpc.aio.AioRpcError(
        await call.code(),
        await call.initial_metadata(),
        await call.trailing_metadata(),
        await call.details(),
    )
    return await server_error(call, error)


async def _write(call: grpc.aio.StreamStreamCall, message: pb.ParseRequest) -> None:
    """Write, or raise the status the server already ended the call with."""
    try:
        await call.write(message)
    except (asyncio.InvalidStateError, grpc.aio.AioRpcError):
        write_failed(call)
        raise await _status_error(call) from None


async def _await_admission(call: grpc.aio.StreamStreamCall) -> None:
    """Wait for the server's headers, which it sends once it has accepted the Open.

    grpc's asyncio client turns the server's status into INTERNAL when a write is in flight as
    the status arrives (grpc/grpc#36066). Writing steps only after the headers means refusals
    and errors in the Open always arrive as the status the server sent."""
    await call.initial_metadata()
    if call.done():
        raise await _status_error(call)


async def _write_all(call: grpc.aio.StreamStreamCall, messages: Iterable[pb.ParseRequest]) -> None:
    """Send a whole session. If the server ends the call early (an error), stop quietly: the
    reading side raises that status, which is the meaningful error."""
    try:
        for index, message in enumerate(messages):
            await call.write(message)
            if index == 0:
                await _await_admission(call)
        await call.done_writing()
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
        write_failed(call)


class AsyncParseStream(StreamCore, AsyncSession):
    """One live session: ``await send(...)`` steps as they are generated, ``await finish()``,
    and ``async for`` over the replies (from the same task or another one).

    With resume on (the client's default), the stream keeps the session's history (token ids)
    and survives a broken stream — a dead or draining server, a lost connection, a proxy's reset:
    it reconnects, resumes on whichever server the target reaches, and the iteration simply goes
    on with the next reply. Statuses that are the request's own (INVALID_ARGUMENT, NOT_FOUND...)
    surface as before; so does the last error once the retry budget is spent. The session's state
    and decisions are ``StreamCore``'s, shared with the blocking stream."""

    def __init__(
        self,
        stub: pb_grpc.ParserServiceStub,
        open_: pb.Open,
        timeout: float | None = None,
        policy: ResumePolicy | None = None,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        super().__init__(open_, policy)
        self._stub = stub
        self._timeout = timeout
        self._metadata = metadata
        self._call: grpc.aio.StreamStreamCall | None = None
        self._unwritten: deque[pb.ParseRequest] = deque()
        """Messages sent that the current call has not had yet."""
        self._half_closed: grpc.aio.StreamStreamCall | None = None
        self._finished = False
        self._lock = asyncio.Lock()

    async def _connect(self) -> None:
        """Open a new call (resuming from what was received, after the first) and wait for the
        server to accept it; refusals are retried with backoff within the budget."""
        first = self._opening(resuming=self._call is not None)
        attempt = 0
        while True:
            call = watch(self._stub.Parse(timeout=self._timeout, metadata=self._metadata))
            try:
                await _write(call, first)
                await _await_admission(call)
            except grpc.aio.AioRpcError as exc:
                if not self._moves_after(exc, attempt):
                    raise
                assert self._policy is not None
                await asyncio.sleep(self._policy.backoff(attempt))
                attempt += 1
                continue
            async with self._lock:
                self._call = call
                if self._policy is not None:
                    self._unwritten = deque(self._unanswered())
            return

    async def _pump(self) -> None:
        """Write what the current call has not had yet (and half-close after Finish). A write
        that finds the call broken raises its status, unless the session will resume: the
        reading side then moves it and re-sends what is pending."""
        async with self._lock:
            call = self._call
            assert call is not None
            unwritten = self._unwritten
            try:
                while unwritten:
                    await call.write(unwritten[0])
                    unwritten.popleft()
                if self._finished and self._half_closed is not call:
                    await call.done_writing()
                    self._half_closed = call
            except (asyncio.InvalidStateError, grpc.aio.AioRpcError):
                write_failed(call)
                error = await _status_error(call)
                if not self._moves_after(error):
                    raise error from None

    async def _send(self, message: pb.ParseRequest) -> None:
        """Send a client message; one with the Finish closes the send side."""
        self._sending(message)
        self._unwritten.append(message)
        if message.HasField("finish"):
            self._finished = True
        await self._pump()

    def _step(self, steps: Iterable[StepLike], finish: pb.Finish | None) -> Any:
        return self._send(steps_request(steps, finish))

    def cancel(self) -> None:
        self._stop_resuming()
        if self._call is not None:
            self._call.cancel()

    async def __aiter__(self) -> AsyncIterator[pb.ParseResponse]:
        while True:
            call = self._call
            assert call is not None
            try:
                async for message in joined_async(call):
                    self._received(message)
                    yield message
                return
            except grpc.aio.AioRpcError as raised:
                exc = await server_error(call, raised)
                if self._ended_whole():
                    return  # the session is complete; only the stream's ending broke
                if not self._moves_after(exc):
                    raise exc from None
            await self._connect()
            self.resumes += 1
            await self._pump()


class AsyncClient(ClientBase):
    """An asyncio connection to a parsetier server. ``async with AsyncClient(target) as client``."""

    _Multiplexer = AsyncMultiplexer
    _channel = staticmethod(aio_channel)

    def _unary(self, method: Callable[..., Any], request: Any, then: Then = None) -> Any:
        return _unary_call(method, request, self.timeout, self.metadata, then)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._multiplexer is not None:
            await self._multiplexer.close()
        await self.channel.close()

    async def open(self, model: str | pb.Open, **options: Any) -> AsyncParseStream | AsyncMuxStream:
        """Start a streaming session: send its Open and wait until the server accepted it
        (raises ``grpc.aio.AioRpcError`` with the server's status when it did not).
        ``options`` as for ``requests.open_message``; or a whole ``pb.Open`` (``render``'s).
        Multiplexed, the session rides the shared stream (``AsyncMuxStream``, the same API)."""
        mux = self.multiplexer
        if mux is not None:
            return await mux.open(opened(model, options))
        stream = AsyncParseStream(self.stub, opened(model, options), self.timeout, self.resume, self.metadata)
        await stream._connect()
        return stream

    async def parse_stream(
        self, model: str, steps: Iterable[StepLike], finish_reason: str = "stop", **options: Any
    ) -> ParseResult:
        """One call: stream ``steps`` through a session; ``(message, deltas)`` as a ``ParseResult``
        (``options`` as for ``sync.Client.parse_stream``)."""
        open_, messages = stream_messages(model, steps, finish_reason, **options)
        if self.resume is None and self.multiplexer is None:
            opened = chain([pb.ParseRequest(open=open_)], messages)
            return collect([message async for message in self.parse(opened)])
        stream = await self.open(open_)

        async def write() -> None:
            for message in messages:
                await stream._send(message)

        writer = asyncio.create_task(write())
        try:
            replies = [message async for message in stream]
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        return collect(replies)

    async def parse(self, messages: Iterable[pb.ParseRequest]) -> AsyncIterator[pb.ParseResponse]:
        """The raw stream: any client messages in, server messages out."""
        # Written by a task of our own rather than handed to grpc as a request iterator, so the
        # writes can wait for the server's admission (see ``_await_admission``).
        call = watch(self.stub.Parse(timeout=self.timeout, metadata=self.metadata))
        writer = asyncio.create_task(_write_all(call, messages))
        try:
            async for message in joined_async(call):
                yield message
        except grpc.aio.AioRpcError as exc:
            raise await server_error(call, exc) from None
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    def batch(self) -> AsyncBatch:
        """A ``ParseBatch`` stream: many sessions, one round trip per engine step (see ``batch``)."""
        return AsyncBatch(self.stub, self.timeout, self.metadata, self.resume)


async def _unary_call(
    method: Callable[..., Any], request: Any, timeout: float | None, metadata: Any, then: Then
) -> Any:
    """The unary call, made when awaited, on the awaiting loop: grpc.aio calls belong to the loop
    they are made on, and making one in a thread without a running loop (a synchronous caller that
    hands the coroutine to another thread's loop) fails."""
    reply = await method(request, timeout=timeout, metadata=metadata)
    return reply if then is None else then(reply)
