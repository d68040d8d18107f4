"""Blocking client. Use it from plain Python; the async client (``aio``) from asyncio code.

gRPC's blocking bidi call pulls requests from an iterator on its own thread, so a
``ParseStream`` feeds that iterator from a queue: ``send`` never blocks on the network, and the
caller (or another thread) iterates the replies.
"""

from __future__ import annotations

import queue
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.requests import (
    StepLike,
    finish_message,
    open_message,
    parse_once_request,
    session_messages,
    step_message,
)
from parsetier_client.result import ParseResult, collect
from parsetier_client.security import Tls, sync_channel, tls_of, token_metadata

_CLOSE = object()


class ParseStream:
    """One live session: ``send`` steps as they are generated, ``finish``, iterate the replies.

    Iterating yields ``ParseResponse``s (``deltas()`` flattens them to deltas); after the
    iteration ends, ``final`` holds the outcome. Errors raise ``grpc.RpcError`` from the iteration.
    """

    def __init__(
        self,
        stub: pb_grpc.ParserServiceStub,
        open_: pb.Open,
        timeout: float | None = None,
        metadata: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._queue.put(pb.ParseRequest(open=open_))
        self._call = stub.Parse(iter(self._queue.get, _CLOSE), timeout=timeout, metadata=metadata)
        self.final: pb.Final | None = None

    def send(self, *steps: StepLike) -> None:
        """Send one or more decode steps (token-id lists or text) in one message.

        Raises the call's ``grpc.RpcError`` once the call is over (the server ended it, or the
        connection is gone: ``UNAVAILABLE``), instead of queueing messages nobody will read."""
        self._check_live()
        self._queue.put(pb.ParseRequest(steps=[step_message(s) for s in steps]))

    def _check_live(self) -> None:
        if self._call.done() and self._call.code() != grpc.StatusCode.OK:
            raise self._call  # the call object is the RpcError its iteration raises

    def finish(
        self, reason: str = "stop", matched_stop: int | str | None = None, steps: Iterable[StepLike] = ()
    ) -> None:
        """End the output (optionally with last steps in the same message) and close the send side."""
        self._check_live()
        self._queue.put(
            pb.ParseRequest(
                steps=[step_message(s) for s in steps], finish=finish_message(reason, matched_stop)
            )
        )
        self._queue.put(_CLOSE)

    def cancel(self) -> None:
        self._call.cancel()
        self._queue.put(_CLOSE)

    def __iter__(self) -> Iterator[pb.ParseResponse]:
        for message in self._call:
            if message.HasField("final"):
                self.final = message.final
            yield message

    def deltas(self) -> Iterator[pb.Delta]:
        for message in self:
            yield from message.deltas


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
    ) -> None:
        """``tls``: ``True`` (system roots) or a ``Tls`` (CA, client certificate for mTLS, server
        name); ``token``: a bearer token sent with every call."""
        self.channel = channel or sync_channel(target, tls_of(tls))
        self.stub = pb_grpc.ParserServiceStub(self.channel)
        self.timeout = timeout
        self.metadata = token_metadata(token)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def open(self, model: str, **options: Any) -> ParseStream:
        """Start a streaming session; ``options`` are ``requests.open_message``'s keywords."""
        return ParseStream(self.stub, open_message(model, **options), self.timeout, self.metadata)

    def parse(self, messages: Iterable[pb.ParseRequest]) -> Iterator[pb.ParseResponse]:
        """The raw stream: any client messages in (pulled lazily), server messages out."""
        return iter(self.stub.Parse(iter(messages), timeout=self.timeout, metadata=self.metadata))

    def parse_stream(
        self,
        model: str,
        steps: Iterable[StepLike],
        finish_reason: str = "stop",
        *,
        matched_stop: int | str | None = None,
        tools: Iterable[Mapping[str, Any]] | str | None = None,
        steps_per_message: int = 1,
        **options: Any,
    ) -> ParseResult:
        """One call: stream ``steps`` through a session and return ``(message, deltas)``
        (a ``ParseResult``, which also has ``final``, ``finish_reason``, ``usage``, ``events``)."""
        open_ = open_message(model, tools=tools, **options)
        messages = session_messages(
            open_, steps, finish_message(finish_reason, matched_stop), steps_per_message
        )
        return collect(list(self.parse(messages)))

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

    def list_models(self) -> list[pb.ModelInfo]:
        reply = self.stub.ListModels(pb.ListModelsRequest(), timeout=self.timeout, metadata=self.metadata)
        return list(reply.models)

    def build_constraint(self, model: str, **options: Any) -> pb.BuildConstraintResponse:
        """The decoding constraint for a request with these options (``tools``, ``tool_choice``,
        ``parallel_tool_calls``, ``thinking``, ``prompt_token_ids``...; a tool's
        ``"strict": True`` enforces its schema): ``.structural_tag_json``, ``.lark_grammar``."""
        request = pb.BuildConstraintRequest(open=open_message(model, **options))
        return self.stub.BuildConstraint(request, timeout=self.timeout, metadata=self.metadata)
