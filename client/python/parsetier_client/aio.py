"""Asyncio client: the same calls as ``sync.Client``, awaitable, for asyncio serving stacks."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from itertools import chain
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.batch import AsyncBatch
from parsetier_client.mux import AsyncMultiplexer, AsyncMuxStream
from parsetier_client.mux_core import MAX_BATCH
from parsetier_client.parts import joined_async
from parsetier_client.rendering import RenderResult, opened, render_request
from parsetier_client.requests import (
    StepLike,
    finish_message,
    open_message,
    parse_once_request,
    steps_request,
    stream_messages,
)
from parsetier_client.result import ParseResult, collect
from parsetier_client.resume import ResumePolicy, policy_of
from parsetier_client.security import Tls, aio_channel, tls_of, token_metadata
from parsetier_client.session_core import StreamCore, wire_chunks
from parsetier_client.typed import Delta
from parsetier_client.wire import wire_error


async def _status_error(call: grpc.aio.StreamStreamCall) -> grpc.aio.AioRpcError:
    """The error a finished call ended with, for writes that find the call already over."""
    return grpc.aio.AioRpcError(
        await call.code(),
        await call.initial_metadata(),
        await call.trailing_metadata(),
        await call.details(),
    )


_TRANSPORT_LOSS = (
    "stream removed",
    "socket closed",
    "connection reset",
    "broken pipe",
    "rst_stream",
    "internal error from core",  # a write whose transport broke under it
)
"""Details of an INTERNAL status that grpc's asyncio client reports when the connection dropped
under a call (a write in flight, or a reset mid-stream): the server never sent it."""


def connection_loss_as_unavailable(error: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """The error with a lost connection reported as UNAVAILABLE (retryable), whatever race in
    grpc's client turned it into INTERNAL."""
    details = (error.details() or "").lower()
    if error.code() == grpc.StatusCode.INTERNAL and any(word in details for word in _TRANSPORT_LOSS):
        return grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE,
            error.initial_metadata(),
            error.trailing_metadata(),
            f"connection to the server lost ({error.details()})",
        )
    return error


async def _write(call: grpc.aio.StreamStreamCall, message: pb.ParseRequest) -> None:
    """Write, or raise the status the server already ended the call with."""
    try:
        await call.write(message)
    except asyncio.InvalidStateError:
        raise connection_loss_as_unavailable(await _status_error(call)) from None
    except grpc.aio.AioRpcError as exc:
        raise connection_loss_as_unavailable(await _final_status(call, exc)) from None


async def _final_status(call: grpc.aio.StreamStreamCall, error: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """A write failed with grpc's own INTERNAL ("Internal error from Core": the transport broke
    under it); the call's status says what happened (UNAVAILABLE when the connection is gone)."""
    if error.code() != grpc.StatusCode.INTERNAL:
        return error
    try:
        status = await asyncio.wait_for(_status_error(call), FINAL_STATUS_WAIT)
    except TimeoutError:
        return error
    return status if status.code() not in (grpc.StatusCode.OK, grpc.StatusCode.INTERNAL) else error


FINAL_STATUS_WAIT = 5.0
"""Seconds a failed write waits for the call's own status."""


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
        pass


class AsyncParseStream(StreamCore):
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
            call = self._stub.Parse(timeout=self._timeout, metadata=self._metadata)
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
                error = connection_loss_as_unavailable(await _status_error(call))
                if not self._moves_after(error):
                    raise error from None

    async def _send(self, message: pb.ParseRequest) -> None:
        """Send a client message; one with the Finish closes the send side."""
        self._sending(message)
        self._unwritten.append(message)
        if message.HasField("finish"):
            self._finished = True
        await self._pump()

    async def send(self, *steps: StepLike) -> None:
        """Send one or more decode steps (token-id lists or text) in one message."""
        await self._send(steps_request(steps))

    async def finish(
        self,
        reason: str = "stop",
        matched_stop: int | str | None = None,
        steps: Iterable[StepLike] = (),
        other_choices_usage: pb.Usage | tuple[int, int] | None = None,
    ) -> None:
        """End the output (optionally with last steps in the same message) and close the send side
        (``other_choices_usage``: see ``finish_message``)."""
        await self._send(steps_request(steps, finish_message(reason, matched_stop, other_choices_usage)))

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
            except grpc.aio.AioRpcError as exc:
                if self._ended_whole():
                    return  # the session is complete; only the stream's ending broke
                if not self._moves_after(exc):
                    raise connection_loss_as_unavailable(exc) from None
            await self._connect()
            self.resumes += 1
            await self._pump()

    async def deltas(self) -> AsyncIterator[Delta]:
        """The replies' deltas in order, as typed records (iterate the stream for the raw replies)."""
        async for message in self:
            for delta in message.deltas:
                yield Delta.of(delta)

    async def wire(self) -> AsyncIterator[bytes]:
        """With ``Open.wire``: the bytes to forward as they come (``ParseStream.wire``), the
        error in the dialect last when the stream ends with a status (then it raises)."""
        try:
            async for message in self:
                for chunk in wire_chunks(message):
                    yield chunk
        except grpc.aio.AioRpcError as exc:
            error = wire_error(exc)
            if error:
                yield error
            raise


class AsyncClient:
    """An asyncio connection to a parsetier server. ``async with AsyncClient(target) as client``."""

    def __init__(
        self,
        target: str,
        *,
        channel: grpc.aio.Channel | None = None,
        timeout: float | None = None,
        tls: Tls | bool | None = None,
        token: str | None = None,
        resume: bool | ResumePolicy = True,
        multiplex: bool = False,
        flush_interval: float = 0.0,
        max_batch: int = MAX_BATCH,
    ) -> None:
        """``tls``, ``token``, ``multiplex``, ``flush_interval`` and ``max_batch`` as for
        ``sync.Client`` (``flush_interval`` 0: flush on the event loop's next turn)."""
        self.channel = channel or aio_channel(target, tls_of(tls))
        self.stub = pb_grpc.ParserServiceStub(self.channel)
        self.timeout = timeout
        self.metadata = token_metadata(token)
        self.resume = policy_of(resume)
        """How streams resume after a break (``ResumePolicy``), or None: resume off."""
        self._mux_options = (flush_interval, max_batch) if multiplex else None
        self._multiplexer: AsyncMultiplexer | None = None

    @property
    def multiplexer(self) -> AsyncMultiplexer | None:
        """The shared stream of multiplexed sessions (made on first use, on the running loop), or
        None when the client is not multiplexed."""
        if self._mux_options is not None and self._multiplexer is None:
            interval, max_batch = self._mux_options
            self._multiplexer = AsyncMultiplexer(
                self.stub, self.metadata, self.resume, interval, max_batch, self.timeout
            )
        return self._multiplexer

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
        mux = self.multiplexer
        if mux is not None:
            session = await mux.open(open_)

            async def send_all() -> None:
                for message in messages:
                    await mux.send_request(session.key, message)

            sender = asyncio.create_task(send_all())
            try:
                replies = [message async for message in session]
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
            return collect(replies)
        if self.resume is None:
            opened = chain([pb.ParseRequest(open=open_)], messages)
            return collect([message async for message in self.parse(opened)])
        stream = AsyncParseStream(self.stub, open_, self.timeout, self.resume, self.metadata)
        await stream._connect()

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
        call = self.stub.Parse(timeout=self.timeout, metadata=self.metadata)
        writer = asyncio.create_task(_write_all(call, messages))
        try:
            async for message in joined_async(call):
                yield message
        except grpc.aio.AioRpcError as exc:
            raise connection_loss_as_unavailable(exc) from None
        finally:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)

    async def parse_once(
        self, model: str, token_ids: Iterable[int] = (), finish_reason: str = "stop", **options: Any
    ) -> pb.ParseOnceResponse:
        """The unary call (``sync.Client.parse_once``)."""
        request = parse_once_request(model, token_ids, finish_reason, **options)
        return await self.stub.ParseOnce(request, timeout=self.timeout, metadata=self.metadata)

    def batch(self) -> AsyncBatch:
        """A ``ParseBatch`` stream: many sessions, one round trip per engine step (see ``batch``)."""
        return AsyncBatch(self.stub, self.timeout, self.metadata, self.resume)

    async def list_models(self) -> list[pb.ModelInfo]:
        request = pb.ListModelsRequest()
        response = await self.stub.ListModels(request, timeout=self.timeout, metadata=self.metadata)
        return list(response.models)

    async def render(
        self,
        model: str,
        body: Mapping[str, Any] | str | bytes,
        dialect: str | int = "openai_chat",
        **fields: Any,
    ) -> RenderResult:
        """An API request's body (``dialect``: ``openai_chat``, ``openai_completions``,
        ``openai_responses``, ``anthropic_messages``) rendered for ``model``: the prompt's ids, the
        output session's ``Open`` (pass it to ``open``), sampling and constraint. ``fields``:
        ``request_id``, ``response_id``, ``created``, ``chat_template``, ``return_prompt_text``."""
        request = render_request(model, body, dialect, **fields)
        return RenderResult.of(await self.stub.Render(request, timeout=self.timeout, metadata=self.metadata))

    async def build_constraint(self, model: str, **options: Any) -> pb.BuildConstraintResponse:
        """The decoding constraint for a request with these options (``tools``, ``tool_choice``,
        ``parallel_tool_calls``, ``thinking``, ``prompt_token_ids``...; a tool's
        ``"strict": True`` enforces its schema): ``.structural_tag_json``, ``.lark_grammar``."""
        request = pb.BuildConstraintRequest(open=open_message(model, **options))
        return await self.stub.BuildConstraint(request, timeout=self.timeout, metadata=self.metadata)
