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
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.batch import Batch
from parsetier_client.parts import joined
from parsetier_client.requests import (
    StepLike,
    finish_message,
    open_message,
    parse_once_request,
    session_messages,
    step_message,
)
from parsetier_client.result import ParseResult, collect
from parsetier_client.resume import Ledger, ResumePolicy, as_request, policy_of, retryable
from parsetier_client.security import Tls, sync_channel, tls_of, token_metadata

_CLOSE = object()


class ParseStream:
    """One live session: ``send`` steps as they are generated, ``finish``, iterate the replies.

    Iterating yields ``ParseResponse``s (``deltas()`` flattens them to deltas); after the
    iteration ends, ``final`` holds the outcome. Errors raise ``grpc.RpcError`` from the iteration.

    With resume on (the client's default), the stream keeps the session's history (token ids)
    and survives a broken stream — a dead or draining server, a lost connection, a proxy's reset:
    it reconnects with backoff, resumes on whichever server the target reaches, and the iteration
    goes on with the next reply. Statuses that are the request's own surface as before; so does
    the last error once the retry budget is spent. ``send`` may be called from another thread.
    """

    def __init__(
        self,
        stub: pb_grpc.ParserServiceStub,
        open_: pb.Open,
        timeout: float | None = None,
        metadata: tuple[tuple[str, str], ...] | None = None,
        policy: ResumePolicy | None = None,
    ) -> None:
        self._stub = stub
        self._timeout = timeout
        self._metadata = metadata
        self._policy = policy
        if policy is not None:
            open_.resumable = True
        self._ledger = Ledger(open_)
        self._lock = threading.Lock()
        self._finished = False
        self.final: pb.Final | None = None
        self.resumes = 0
        """How many times the session moved to a new stream."""
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._call = self._start(resuming=False)

    def _start(self, resuming: bool) -> Any:
        """A call fed from a fresh queue: the Open (with the resume point when ``resuming``),
        then the pending messages and whatever is sent from now on. With resume on, they wait
        for the server's headers, so a refusal arrives as the status the server sent."""
        with self._lock:
            self._queue = outgoing = queue.SimpleQueue()
            first = pb.ParseRequest(open=self._ledger.point() if resuming else self._ledger.open)
            for payload, _ in self._ledger.restart(2):
                outgoing.put(as_request(payload))
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

    def _put(self, message: pb.ParseRequest, last: bool = False) -> None:
        if self._policy is None:
            self._check_live()
        with self._lock:
            if self._policy is not None:
                self._ledger.send(message)
            self._queue.put(message)
            if last:
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
        self._put(pb.ParseRequest(steps=[step_message(s) for s in steps]))

    def finish(
        self,
        reason: str = "stop",
        matched_stop: int | str | None = None,
        steps: Iterable[StepLike] = (),
        other_choices_usage: pb.Usage | tuple[int, int] | None = None,
    ) -> None:
        """End the output (optionally with last steps in the same message) and close the send side
        (``other_choices_usage``: see ``finish_message``)."""
        steps_ = [step_message(s) for s in steps]
        self._put(
            pb.ParseRequest(steps=steps_, finish=finish_message(reason, matched_stop, other_choices_usage)),
            last=True,
        )

    def cancel(self) -> None:
        self._policy = None  # the caller's own cancel is never resumed
        self._call.cancel()
        self._queue.put(_CLOSE)

    def __iter__(self) -> Iterator[pb.ParseResponse]:
        attempt = 0
        while True:
            try:
                for message in joined(self._call):
                    attempt = 0
                    if self._policy is not None:
                        with self._lock:
                            self._ledger.received(
                                message.sequence, message.client_messages, message.output_digest
                            )
                    if message.HasField("final"):
                        self.final = message.final
                    yield message
                return
            except grpc.RpcError as exc:
                policy = self._policy
                if self.final is not None and policy is not None:
                    return  # the session is complete; only the stream's ending broke
                if policy is None or not retryable(exc.code(), exc.details()) or attempt >= policy.attempts:
                    raise
                self._queue.put(_CLOSE)  # end the broken call's request thread
                time.sleep(policy.backoff(attempt) if attempt else 0)
                attempt += 1
            self.resumes += 1
            self._call = self._start(resuming=True)

    def deltas(self) -> Iterator[pb.Delta]:
        for message in self:
            yield from message.deltas

    def wire(self) -> Iterator[bytes]:
        """With ``Open.wire``: the bytes to forward to the caller as they come (each reply's
        ``wire``, then ``final.wire``), never empty."""
        for message in self:
            if message.wire:
                yield message.wire
            if message.HasField("final") and message.final.wire:
                yield message.final.wire


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
    ) -> None:
        """``tls``: ``True`` (system roots) or a ``Tls`` (CA, client certificate for mTLS, server
        name); ``token``: a bearer token sent with every call."""
        self.channel = channel or sync_channel(target, tls_of(tls))
        self.stub = pb_grpc.ParserServiceStub(self.channel)
        self.timeout = timeout
        self.metadata = token_metadata(token)
        self.resume = policy_of(resume)
        """How streams resume after a break (``ResumePolicy``), or None: resume off."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def open(self, model: str, **options: Any) -> ParseStream:
        """Start a streaming session; ``options`` are ``requests.open_message``'s keywords."""
        open_ = open_message(model, **options)
        return ParseStream(self.stub, open_, self.timeout, self.metadata, self.resume)

    def parse(self, messages: Iterable[pb.ParseRequest]) -> Iterator[pb.ParseResponse]:
        """The raw stream: any client messages in (pulled lazily), server messages out."""
        return joined(self.stub.Parse(iter(messages), timeout=self.timeout, metadata=self.metadata))

    def parse_stream(
        self,
        model: str,
        steps: Iterable[StepLike],
        finish_reason: str = "stop",
        *,
        matched_stop: int | str | None = None,
        tools: Iterable[Mapping[str, Any]] | str | None = None,
        steps_per_message: int = 1,
        other_choices_usage: pb.Usage | tuple[int, int] | None = None,
        **options: Any,
    ) -> ParseResult:
        """One call: stream ``steps`` through a session and return ``(message, deltas)``
        (a ``ParseResult``, which also has ``final``, ``finish_reason``, ``usage``, ``events``)."""
        if self.resume is None:
            open_ = open_message(model, tools=tools, **options)
            messages = session_messages(
                open_,
                steps,
                finish_message(finish_reason, matched_stop, other_choices_usage),
                steps_per_message,
            )
            return collect(list(self.parse(messages)))
        stream = self.open(model, tools=tools, **options)
        batch: list[StepLike] = []
        for step in steps:
            batch.append(step)
            if len(batch) >= steps_per_message:
                stream.send(*batch)
                batch = []
        stream.finish(finish_reason, matched_stop, steps=batch, other_choices_usage=other_choices_usage)
        return collect(list(stream))

    def parse_once(
        self,
        model: str,
        token_ids: Iterable[int] = (),
        finish_reason: str = "stop",
        *,
        text: str = "",
        text_tokens: int = 0,
        matched_stop: int | str | None = None,
        tools: Iterable[Mapping[str, Any]] | str | None = None,
        **options: Any,
    ) -> pb.ParseOnceResponse:
        """The unary call: the whole output in, ``ParseOnceResponse`` (``.final``) out."""
        request = parse_once_request(
            model,
            token_ids,
            finish_reason,
            text=text,
            text_tokens=text_tokens,
            matched_stop=matched_stop,
            tools=tools,
            **options,
        )
        return self.stub.ParseOnce(request, timeout=self.timeout, metadata=self.metadata)

    def batch(self) -> Batch:
        """A ``ParseBatch`` stream: many sessions, one round trip per engine step (see ``batch``)."""
        return Batch(self.stub, self.timeout, self.metadata, self.resume)

    def list_models(self) -> list[pb.ModelInfo]:
        reply = self.stub.ListModels(pb.ListModelsRequest(), timeout=self.timeout, metadata=self.metadata)
        return list(reply.models)

    def build_constraint(self, model: str, **options: Any) -> pb.BuildConstraintResponse:
        """The decoding constraint for a request with these options (``tools``, ``tool_choice``,
        ``parallel_tool_calls``, ``thinking``, ``prompt_token_ids``...; a tool's
        ``"strict": True`` enforces its schema): ``.structural_tag_json``, ``.lark_grammar``."""
        request = pb.BuildConstraintRequest(open=open_message(model, **options))
        return self.stub.BuildConstraint(request, timeout=self.timeout, metadata=self.metadata)
