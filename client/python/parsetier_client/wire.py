"""Forwarding wire bytes (``Open.wire``): a failed session's error, and ``n`` > 1 choices joined.

A gateway forwards each reply's ``wire`` and then ``final.wire``; two cases need more than that,
and both are here so that no gateway writes them by hand:

- a session that ends with a status carries the error in its dialect (an error event, or the
  API's error body): ``SessionStatus.wire`` on ``ParseBatch``, the trailing metadata
  ``parsetier-wire-bin`` on ``Parse`` and ``ParseOnce`` (``wire_error`` reads it; the streams'
  ``wire()`` iterators yield it before they raise);
- a request with ``n`` > 1 choices (OpenAI chat and completions) is ``n`` sessions whose bytes
  make one response: ``WireJoin`` orders and joins them (docs/service.md, "Several choices").
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb

WIRE_TRAILER = "parsetier-wire-bin"
"""The trailing metadata key of a failed ``Parse`` stream's or ``ParseOnce`` call's wire bytes."""


def wire_error(error: grpc.RpcError | grpc.aio.AioRpcError | pb.SessionOutput) -> bytes:
    """The error in the session's dialect, to forward as the response's last bytes: from a failed
    call's trailing metadata, or a ``ParseBatch`` output's ``status``. b"" when there is none (the
    session asked for no wire bytes or named no dialect, or was cancelled or handed off)."""
    if isinstance(error, pb.SessionOutput):
        return error.status.wire if error.HasField("status") else b""
    trailer = getattr(error, "trailing_metadata", None)
    items = trailer() if callable(trailer) else None
    for key, value in items or ():
        if key == WIRE_TRAILER:
            return bytes(value)
    return b""


_HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "DEADLINE_EXCEEDED": 504,
    "UNAVAILABLE": 503,
}


def http_status(code: grpc.StatusCode | str) -> int:
    """The HTTP status to send a non-streamed error body (``wire_error``) with, for the status
    code the session ended with (its ``grpc.StatusCode`` or name): the one the SDKs map to their
    error classes (docs/service.md, "Errors in the dialect"); 500 for any other code."""
    name = code if isinstance(code, str) else code.name
    return _HTTP_STATUS.get(name, 500)


class WireJoin:
    """The bytes of ``n`` sessions, the choices 0 .. n-1 of one OpenAI chat or completions
    request, joined into the one response its caller reads; with ``n`` = 1 any dialect's bytes
    pass through unchanged, so one code path serves every request. Feed each session's replies
    (``ParseResponse`` or ``SessionOutput``) as they come (``add``, with the choice index);
    forward what it returns.

    Streamed (``stream`` true): a choice's events are held until every choice before it has sent
    its first (the ``openai`` SDK's accumulator appends a choice index it has not seen, so an
    index that comes early breaks it); every choice's ``final.wire`` (the usage chunk and
    ``data: [DONE]``) is held, and only the last one's goes out, once every choice has finished.
    Send that last choice's ``Finish`` with ``other_choices_usage`` (the others' usage summed) and
    its usage chunk counts every choice, as the API reports it.

    A body (``stream`` false): each choice's ``final.wire`` is a whole body; once every choice
    has one, ``add`` returns one body with their ``choices`` in index order and the usage of the
    last to finish (with ``other_choices_usage``, the request's total).

    A session that ended with a status ends the response: its error bytes (``wire_error``) go
    out at once, events still held are dropped, and nothing more is returned (cancel the other
    choices' sessions).
    """

    def __init__(self, n: int, stream: bool = True) -> None:
        if n < 1:
            raise ValueError("n must be at least 1")
        self.n = n
        self.stream = stream
        self._held: list[list[bytes]] = [[] for _ in range(n)]
        self._started = 0
        """Choices 0 .. ``_started``-1 have sent their first events (and theirs go out as they come)."""
        self._finals: dict[int, bytes] = {}
        self._last = -1
        """The choice that finished last."""
        self.ended = False
        """The response is complete (every choice finished) or failed: ``add`` returns nothing more."""

    def add(self, choice: int, reply: pb.ParseResponse | pb.SessionOutput) -> bytes:
        """The bytes to forward now for ``reply``, one of choice ``choice``'s."""
        if not 0 <= choice < self.n:
            raise ValueError(f"choice {choice} is not in 0..{self.n - 1}")
        if self.ended:
            return b""
        out: list[bytes] = []
        if reply.wire:
            self._held[choice].append(reply.wire)
        error = wire_error(reply) if isinstance(reply, pb.SessionOutput) else b""
        if reply.HasField("final"):
            if choice in self._finals:
                raise ValueError(f"choice {choice} finished twice")
            self._finals[choice] = reply.final.wire
            self._last = choice
        if self.stream:
            out.append(self._release())
        if error:
            self.ended = True
            out.append(error)
            return b"".join(out)
        if len(self._finals) == self.n:
            self.ended = True
            out.append(self._finals[self._last] if self.stream else self._joined_body())
        return b"".join(out)

    def fail(self, error: grpc.RpcError | grpc.aio.AioRpcError) -> bytes:
        """A choice's ``Parse`` stream failed with ``error``: the bytes that end the response
        (``wire_error``'s), then nothing more."""
        if self.ended:
            return b""
        self.ended = True
        return wire_error(error)

    def _release(self) -> bytes:
        """The held events that may go out: those of every choice whose predecessors started."""
        out: list[bytes] = []
        while self._started < self.n and self._held[self._started]:
            out += self._held[self._started]
            self._held[self._started] = []
            self._started += 1
        for choice in range(self._started):
            if self._held[choice]:
                out += self._held[choice]
                self._held[choice] = []
        return b"".join(out)

    def _joined_body(self) -> bytes:
        if self.n == 1:
            return self._finals[0]  # one choice's body is the response's, in any dialect
        bodies = [json.loads(self._finals[i]) for i in range(self.n)]
        joined: dict[str, Any] = dict(bodies[self._last])
        joined["choices"] = sorted((c for b in bodies for c in b["choices"]), key=lambda c: c["index"])
        return json.dumps(joined, ensure_ascii=False, separators=(",", ":")).encode()
