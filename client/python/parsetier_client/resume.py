"""What the clients need to resume a session on a new stream: its history, its resume point, and
when and how soon to try again. Free of I/O, shared by the sync and async clients.

The contract (docs/service.md, "Resume"): a new stream opens with the same ``Open`` plus the
``client_messages`` and ``sequence`` of the last reply received, then re-sends every client
message of the session so far, framed as before; the server answers only what the client has not
had yet, so the caller's iteration continues with the next reply as if nothing had happened.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb

HANDOFF_TRAILER = "parsetier-handoff"
"""Trailing metadata key a draining server sets when it hands a resumable session off."""


@dataclass(frozen=True, slots=True)
class ResumePolicy:
    """How a client resumes broken sessions. ``attempts`` is the retry budget: reconnects in a row
    that may fail (refused, unreachable) before the last error surfaces; it is renewed whenever the
    session makes progress again (a new stream is accepted, or a reply arrives). Backoff doubles
    from ``initial_backoff`` up to ``max_backoff``, with jitter, so a fleet's clients do not
    reconnect in lock step."""

    attempts: int = 20
    initial_backoff: float = 0.05
    max_backoff: float = 1.0

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before reconnect number ``attempt`` (0-based) of a run of failures."""
        return min(self.max_backoff, self.initial_backoff * 2**attempt) * random.uniform(0.5, 1.0)


def policy_of(resume: bool | ResumePolicy) -> ResumePolicy | None:
    """The clients' ``resume=`` option: True (the default policy), False (off) or a policy."""
    if isinstance(resume, ResumePolicy):
        return resume
    return ResumePolicy() if resume else None


SERVER_FAULT = ("internal server error", "internal error:")
"""How a parsetier server's own INTERNAL statuses begin (a bug it logged): not worth a retry."""


def retryable(code: object, details: str | None) -> bool:
    """A break the session survives by resuming elsewhere: the server or the connection went away
    (UNAVAILABLE: refused, unreachable, draining, handed off), the stream was cut by a stopping
    server or reset by a proxy (CANCELLED; the clients never resume a cancel of their caller's),
    or reset on the way (INTERNAL: a proxy's RST_STREAM after its backend died, or what grpc's
    asyncio client reports when a write was in flight as the stream ended, grpc/grpc#36066; its
    code and details then come out swapped, hence the loose match). An INTERNAL that the server
    itself reported (``SERVER_FAULT``) and every other status are the request's own."""
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return True
    details = details or ""
    if code == grpc.StatusCode.INTERNAL or "INTERNAL" in details or "Internal error" in str(code):
        return not details.startswith(SERVER_FAULT)
    return False


class History:
    """The client messages of one session, numbered as the server counts them (the Open's first).

    Token ids are kept in one array, about 4 bytes per token; messages that are more than a run
    of ids (text steps, steps with logprobs, the Finish) are kept whole. A message of several id
    steps is re-sent as one step of all its ids, which the server parses identically (it joins
    them anyway)."""

    __slots__ = ("_ends", "_ids", "_whole", "open")

    def __init__(self, open_: pb.Open) -> None:
        self.open = open_
        self._ids = array("I")
        self._ends = array("Q", [0, 0])
        """Message k's ids are ``_ids[_ends[k]:_ends[k + 1]]``; message 0 is the Open."""
        self._whole: dict[int, pb.ParseRequest] = {}

    def __len__(self) -> int:
        return len(self._ends) - 1

    def record(self, message: pb.ParseRequest) -> None:
        """Append a client message (not the Open's: that one is message 0 already)."""
        plain = all(step.token_ids and not step.HasField("logprobs") for step in message.steps)
        if message.HasField("finish") or message.HasField("open") or not plain:
            self._whole[len(self)] = message
        else:
            for step in message.steps:
                self._ids.extend(step.token_ids)
        self._ends.append(len(self._ids))

    def record_ids(self, ids: Iterable[int]) -> None:
        """Append a client message that is one step of token ids (``record``'s usual case, cheaper)."""
        self._ids.extend(ids)
        self._ends.append(len(self._ids))

    def message(self, index: int, point: pb.ResumePoint | None = None) -> pb.ParseRequest:
        """Client message ``index`` as it is to be sent (again); message 0, the Open, carries
        ``point`` when the session resumes."""
        if index == 0:
            open_ = self.open
            if point is not None:
                open_ = pb.Open()
                open_.CopyFrom(self.open)
                open_.resume.CopyFrom(point)
            return pb.ParseRequest(open=open_)
        whole = self._whole.get(index)
        if whole is not None:
            return whole
        ids = self._ids[self._ends[index] : self._ends[index + 1]]
        return pb.ParseRequest(steps=[pb.Step(token_ids=ids)]) if ids else pb.ParseRequest()


class Progress:
    """What the caller has received: the resume point, checked for gaps and repeats."""

    __slots__ = ("client_messages", "sequence")

    def __init__(self) -> None:
        self.client_messages = 0
        self.sequence = 0

    def received(self, reply: pb.ParseResponse) -> None:
        if reply.sequence != self.sequence + 1:
            raise RuntimeError(f"reply sequence {reply.sequence} after {self.sequence}: a gap or a repeat")
        self.client_messages, self.sequence = reply.client_messages, reply.sequence

    def point(self) -> pb.ResumePoint:
        return pb.ResumePoint(client_messages=self.client_messages, sequence=self.sequence)
