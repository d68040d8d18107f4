"""Blocking client. Use it from plain Python; the async client (``aio``) from asyncio code.

gRPC's blocking bidi call pulls requests from an iterator on its own thread, so a
``ParseStream`` feeds that iterator from a queue: ``send`` never blocks on the network, and the
caller (or another thread) iterates the replies.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.batch import Batch
from parsetier_client.client_base import ClientBase, Then
from parsetier_client.mux import Multiplexer, MuxStream
from parsetier_client.parts import joined
from parsetier_client.rendering import opened
from parsetier_client.requests import (
    StepLike,
    steps_request,
    stream_messages,
)
from parsetier_client.result import ParseResult, collect
from parsetier_client.resume import ResumePolicy
from parsetier_client.security import sync_channel
from parsetier_client.session_api import Session
from parsetier_client.session_core import StreamCore

_CLOSE = object()


class ParseStream(StreamCore, Session):
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

    def _step(self, steps: Iterable[StepLike], finish: pb.Finish | None) -> None:
        self._send(steps_request(steps, finish))

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


class Client(ClientBase):
    """A connection to a parsetier server (``host:port``). Close it, or use it as a context manager."""

    _Multiplexer = Multiplexer
    _channel = staticmethod(sync_channel)

    def _unary(self, method: Callable[..., Any], request: Any, then: Then = None) -> Any:
        reply = method(request, timeout=self.timeout, metadata=self.metadata)
        return reply if then is None else then(reply)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._multiplexer is not None:
            self._multiplexer.close()
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
        if self.resume is None and self.multiplexer is None:
            return collect(list(self.parse(chain([pb.ParseRequest(open=open_)], messages))))
        stream = self.open(open_)
        for message in messages:
            stream._send(message)
        return collect(list(stream))

    def batch(self) -> Batch:
        """A ``ParseBatch`` stream: many sessions, one round trip per engine step (see ``batch``)."""
        return Batch(self.stub, self.timeout, self.metadata, self.resume)
