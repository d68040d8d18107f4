"""Blocking client. Use it from plain Python; the async client (``aio``) from asyncio code.

gRPC's blocking bidi call pulls requests from an iterator on its own thread, so a
``ParseStream`` feeds that iterator from a queue: ``send`` never blocks on the network, and the
caller (or another thread) iterates the replies.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.batch import Batch
from parsetier_client.mux import Multiplexer, MuxStream
from parsetier_client.mux_core import MAX_BATCH
from parsetier_client.parts import joined
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
from parsetier_client.security import Tls, sync_channel, tls_of, token_metadata
from parsetier_client.session_core import StreamCore, wire_chunks
from parsetier_client.typed import Delta
from parsetier_client.wire import wire_error

_CLOSE = object()


class ParseStream(StreamCore):
    """One live session: ``send`` steps as they are generated, ``finish``, iterate the replies.

    Iterating yields ``ParseResponse``s (``deltas()`` flattens them to deltas); after the
    iteration ends, ``final`` holds the outcome. Errors raise ``grpc.RpcError`` from the iteration.

    With resume on (the client's default), the stream keeps the session's history (token ids)
    and survives a broken stream — a dead or draining server, a lost connection, a proxy's reset:
    it reconnects with backoff, resumes on whichever server the target reaches, and the iteration
    goes on with the next reply. Statuses that are the request's own surface as before; so does
    the last error once the retry budget is spent. ``send`` may be called from another thread.
    The session's state and decisions are ``StreamCore``'s, shared with the asyncio stream.
    """

    def __init__(
        self,
        stub: pb_grpc.ParserServiceStub,
        open_: pb.Open,
        timeout: float | None = None,
        metadata: tuple[tuple[str, str], ...] | None = None,
        policy: ResumePolicy | None = None,
    ) -> None:
        super().__init__(open_, policy)
        self._stub = stub
        self._timeout = timeout
        self._metadata = metadata
        self._lock = threading.Lock()
        self._finished = False
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._call = self._start(resuming=False)

    def _start(self, resuming: bool) -> Any:
        """A call fed from a fresh queue: the Open (with the resume point when ``resuming``),
        then the pending messages and whatever is sent from now on. With resume on, they wait
        for the server's headers, so a refusal arrives as the status the server sent."""
        with self._lock:
            self._queue = outgoing = queue.SimpleQueue()
            first = self._opening(resuming)
            for message in self._unanswered():
                outgoing.put(message)
            if self._finished:
                outgoing.put(_CLOSE)
        admitted = threading.Event()
        holder: list[Any] = []

        def requests() -> Iterator[pb.ParseRequest]:
            yield first
            if self._policy is not None:
                admitted.wait()
                holder[0].initial_metadata()
            yield from iter(outgoing.get, _CLOSE)

        call = self._stub.Parse(requests(), timeout=self._timeout, metadata=self._metadata)
        holder.append(call)
        admitted.set()
        return call

    def _send(self, message: pb.ParseRequest) -> None:
        """Queue a client message; one with the Finish closes the send side."""
        if self._policy is None:
            self._check_live()
        with self._lock:
            self._sending(message)
            self._queue.put(message)
            if message.HasField("finish"):
                self._finished = True
                self._queue.put(_CLOSE)

    def _check_live(self) -> None:
        if self._call.done() and self._call.code() != grpc.StatusCode.OK:
            raise self._call  # the call object is the RpcError its iteration raises

    def send(self, *steps: StepLike) -> None:
        """Send one or more decode steps (token-id lists or text) in one message.

        With resume off, raises the call's ``grpc.RpcError`` once the call is over (the server
        ended it, or the connection is gone: ``UNAVAILABLE``), instead of queueing messages nobody
        will read; with resume on, a broken call is the iteration's to resume."""
        self._send(steps_request(steps))

    def finish(
        self,
        reason: str = "stop",
        matched_stop: int | str | None = None,
        steps: Iterable[StepLike] = (),
        other_choices_usage: pb.Usage | tuple[int, int] | None = None,
    ) -> None:
        """End the output (optionally with last steps in the same message) and close the send side
        (``other_choices_usage``: see ``finish_message``)."""
        self._send(steps_request(steps, finish_message(reason, matched_stop, other_choices_usage)))

    def cancel(self) -> None:
        self._stop_resuming()
        self._call.cancel()
        self._queue.put(_CLOSE)

    def __iter__(self) -> Iterator[pb.ParseResponse]:
        attempt = 0
        while True:
            try:
                for message in joined(self._call):
                    attempt = 0
                    with self._lock:
                        self._received(message)
                    yield message
                return
            except grpc.RpcError as exc:
                if self._ended_whole():
                    return  # the session is complete; only the stream's ending broke
                if not self._moves_after(exc, attempt):
                    raise
                self._queue.put(_CLOSE)  # end the broken call's request thread
                assert self._policy is not None
                time.sleep(self._policy.backoff(attempt) if attempt else 0)
                attempt += 1
            self.resumes += 1
            self._call = self._start(resuming=True)

    def deltas(self) -> Iterator[Delta]:
        """The replies' deltas in order, as typed records (iterate the stream for the raw replies)."""
        for message in self:
            for delta in message.deltas:
                yield Delta.of(delta)

    def wire(self) -> Iterator[bytes]:
        """With ``Open.wire``: the bytes to forward to the caller as they come (each reply's
        ``wire``, then ``final.wire``), never empty. A stream that ends with a status yields its
        error in the dialect (``wire_error``) last, then raises."""
        try:
            for message in self:
                yield from wire_chunks(message)
        except grpc.RpcError as exc:
            error = wire_error(exc)
            if error:
                yield error
            raise


class Client:
    """A connection to a parsetier server (``host:port``). Close it, or use it as a context manager."""

    def __init__(
        self,
        target: str,
        *,
        channel: grpc.Channel | None = None,
        timeout: float | None = None,
        tls: Tls | bool | None = None,
        token: str | None = None,
        resume: bool | ResumePolicy = True,
        multiplex: bool = False,
        flush_interval: float = 0.0,
        max_batch: int = MAX_BATCH,
    ) -> None:
        """``tls``: ``True`` (system roots) or a ``Tls`` (CA, client certificate for mTLS, server
        name); ``token``: a bearer token sent with every call. ``multiplex``: sessions ride one
        shared ``ParseBatch`` stream (``mux``), their sends coalesced into one message per flush:
        at ``max_batch`` entries, or ``flush_interval`` seconds after the first (0: as soon as
        the flushing thread runs)."""
        self.channel = channel or sync_channel(target, tls_of(tls))
        self.stub = pb_grpc.ParserServiceStub(self.channel)
        self.timeout = timeout
        self.metadata = token_metadata(token)
        self.resume = policy_of(resume)
        """How streams resume after a break (``ResumePolicy``), or None: resume off."""
        self.multiplexer = (
            Multiplexer(self.stub, self.metadata, self.resume, flush_interval, max_batch, timeout)
            if multiplex
            else None
        )
        """The shared stream of multiplexed sessions, or None (a ``Parse`` stream per session)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.multiplexer is not None:
            self.multiplexer.close()
        self.channel.close()

    def open(self, model: str | pb.Open, **options: Any) -> ParseStream | MuxStream:
        """Start a streaming session; ``options`` are ``requests.open_message``'s keywords. Or
        give a whole ``pb.Open`` (``render``'s ``RenderResult.open``) and no options. Multiplexed,
        the session rides the shared stream (``MuxStream``, the same API)."""
        open_ = opened(model, options)
        if self.multiplexer is not None:
            return MuxStream(self.multiplexer, open_)
        return ParseStream(self.stub, open_, self.timeout, self.metadata, self.resume)

    def parse(self, messages: Iterable[pb.ParseRequest]) -> Iterator[pb.ParseResponse]:
        """The raw stream: any client messages in (pulled lazily), server messages out."""
        return joined(self.stub.Parse(iter(messages), timeout=self.timeout, metadata=self.metadata))

    def parse_stream(
        self, model: str, steps: Iterable[StepLike], finish_reason: str = "stop", **options: Any
    ) -> ParseResult:
        """One call: stream ``steps`` through a session and return ``(message, deltas)``
        (a ``ParseResult``, which also has ``final``, ``finish_reason``, ``usage``, ``events``).
        ``options``: ``requests.stream_messages``' keywords (``matched_stop``, ``tools``,
        ``steps_per_message``, ``other_choices_usage``) and ``open_message``'s."""
        open_, messages = stream_messages(model, steps, finish_reason, **options)
        if self.multiplexer is not None:
            mux = MuxStream(self.multiplexer, open_)
            for message in messages:
                self.multiplexer.send_request(mux.key, message)
            return collect(list(mux))
        if self.resume is None:
            return collect(list(self.parse(chain([pb.ParseRequest(open=open_)], messages))))
        stream = ParseStream(self.stub, open_, self.timeout, self.metadata, self.resume)
        for message in messages:
            stream._send(message)
        return collect(list(stream))

    def parse_once(
        self, model: str, token_ids: Iterable[int] = (), finish_reason: str = "stop", **options: Any
    ) -> pb.ParseOnceResponse:
        """The unary call: the whole output in, ``ParseOnceResponse`` (``.final``) out. ``options``
        are ``requests.parse_once_request``'s keywords (``text``, ``text_tokens``, ``matched_stop``,
        ``tools``, ``logprobs``, and ``open_message``'s)."""
        request = parse_once_request(model, token_ids, finish_reason, **options)
        return self.stub.ParseOnce(request, timeout=self.timeout, metadata=self.metadata)

    def batch(self) -> Batch:
        """A ``ParseBatch`` stream: many sessions, one round trip per engine step (see ``batch``)."""
        return Batch(self.stub, self.timeout, self.metadata, self.resume)

    def list_models(self) -> list[pb.ModelInfo]:
        reply = self.stub.ListModels(pb.ListModelsRequest(), timeout=self.timeout, metadata=self.metadata)
        return list(reply.models)

    def render(
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
        return RenderResult.of(self.stub.Render(request, timeout=self.timeout, metadata=self.metadata))

    def build_constraint(self, model: str, **options: Any) -> pb.BuildConstraintResponse:
        """The decoding constraint for a request with these options (``tools``, ``tool_choice``,
        ``parallel_tool_calls``, ``thinking``, ``prompt_token_ids``...; a tool's
        ``"strict": True`` enforces its schema): ``.structural_tag_json``, ``.lark_grammar``."""
        request = pb.BuildConstraintRequest(open=open_message(model, **options))
        return self.stub.BuildConstraint(request, timeout=self.timeout, metadata=self.metadata)
