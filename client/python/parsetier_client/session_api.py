"""The session API, written once for the four kinds of session (a ``Parse`` stream's or a
multiplexed one, blocking or asyncio): ``send``, ``finish``, ``deltas()`` and ``wire()``.

What differs between them is only how a message travels and how a reply is waited for. So
``send`` and ``finish`` build the message's parts here and hand them to the class's ``_step``,
which queues them (blocking) or returns the awaitable that sends them (asyncio: ``await
stream.send(...)`` awaits what ``_step`` returned); ``deltas()`` and ``wire()`` read the class's
``_replies()`` (its replies: ``ParseResponse``, or the ``SessionOutput`` a multiplexed session
receives, which carries the same ``deltas``, ``wire`` and ``final``) through one shell for
iterators (``Session``) and one for async iterators (``AsyncSession``). The httpcore habit
(docs/clients.md): one source, thin shells for the two I/O styles.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.requests import StepLike, finish_message
from parsetier_client.session_core import wire_chunks
from parsetier_client.typed import Delta
from parsetier_client.wire import wire_error

Reply = pb.ParseResponse | pb.SessionOutput
"""What a session's ``_replies()`` yields: both carry ``deltas``, ``wire`` and ``final``."""


class Sending:
    """``send`` and ``finish`` for every session; the class's ``_step`` moves the message."""

    def _step(self, steps: Iterable[StepLike], finish: pb.Finish | None) -> Any:
        """Queue (or return the awaitable sending) one message of ``steps``, ending the output when
        ``finish`` is given."""
        raise NotImplementedError

    def send(self, *steps: StepLike) -> Any:
        """Send one or more decode steps (token-id lists or text) in one message (awaitable on the
        asyncio sessions).

        A blocking ``Parse`` stream with resume off raises the call's ``grpc.RpcError`` once the
        call is over (the server ended it, or the connection is gone: ``UNAVAILABLE``) instead of
        queueing messages nobody will read; with resume on, a broken call is the iteration's to
        resume. A multiplexed session waits while the shared stream has ``mux.HIGH_WATER``
        messages unwritten (back-pressure, as an asyncio ``Parse`` stream awaits its write)."""
        return self._step(steps, None)

    def finish(
        self,
        reason: str = "stop",
        matched_stop: int | str | None = None,
        steps: Iterable[StepLike] = (),
        other_choices_usage: pb.Usage | tuple[int, int] | None = None,
    ) -> Any:
        """End the output (optionally with last steps in the same message) and close the send side
        (``other_choices_usage``: see ``finish_message``; awaitable on the asyncio sessions)."""
        return self._step(steps, finish_message(reason, matched_stop, other_choices_usage))


def _error_bytes(error: grpc.RpcError) -> tuple[bytes, ...]:
    """A failed session's error in its dialect, as the last bytes ``wire()`` yields (or none)."""
    data = wire_error(error)
    return (data,) if data else ()


class Session(Sending):
    """The blocking sessions' reading side over ``_replies()`` (``__iter__`` unless overridden)."""

    def _replies(self) -> Iterator[Reply]:
        return iter(self)  # type: ignore[call-overload]

    def deltas(self) -> Iterator[Delta]:
        """The replies' deltas in order, as typed records (iterate the session for the raw replies)."""
        for message in self._replies():
            yield from map(Delta.of, message.deltas)

    def wire(self) -> Iterator[bytes]:
        """With ``Open.wire``: the bytes to forward to the caller as they come (each reply's
        ``wire``, then ``final.wire``), never empty. A session that ends with a status yields its
        error in the dialect (``wire_error``) last, then raises."""
        try:
            for message in self._replies():
                yield from wire_chunks(message)  # type: ignore[arg-type]
        except grpc.RpcError as exc:
            yield from _error_bytes(exc)
            raise


class AsyncSession(Sending):
    """The asyncio sessions' reading side: ``Session``'s, as async iterators."""

    def _replies(self) -> AsyncIterator[Reply]:
        return self.__aiter__()  # type: ignore[attr-defined]

    async def deltas(self) -> AsyncIterator[Delta]:
        """As ``Session.deltas``."""
        async for message in self._replies():
            for delta in message.deltas:
                yield Delta.of(delta)

    async def wire(self) -> AsyncIterator[bytes]:
        """As ``Session.wire``."""
        try:
            async for message in self._replies():
                for chunk in wire_chunks(message):  # type: ignore[arg-type]
                    yield chunk
        except grpc.RpcError as exc:
            for chunk in _error_bytes(exc):
                yield chunk
            raise
