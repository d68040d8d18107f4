"""What the clients need to resume a session on a new stream: its history, its resume point, and
when and how soon to try again. Free of I/O, shared by the sync and async clients.

The contract (docs/service.md, "Resume"), counted in tokens: a new stream opens with the same
``Open`` plus a resume point — the answered history as one packed run of ids, the ``sequence`` and
``output_digest`` of the last reply received — then re-sends the messages not answered yet, as
they were sent; the server feeds the history silently, checks the digest and answers the rest, so
the caller's iteration continues with the next reply as if nothing had happened.
"""

from __future__ import annotations

import random
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb

HANDOFF_TRAILER = "parsetier-handoff"
"""Trailing metadata key of a hand-off: a draining server moved the session (retry)."""
FAULT_TRAILER = "parsetier-fault"
"""Trailing metadata key of the server's own fault (never retry)."""
RETRIED = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
    }
)
"""The codes a break ends with when the trailers say nothing (see ``retryable``)."""


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


def retryable(error: grpc.RpcError) -> bool:
    """The proto's retry rule (the comment on ``ParserService``): the server's own fault
    (``FAULT_TRAILER``) never; a hand-off (``HANDOFF_TRAILER``) always; else UNAVAILABLE,
    CANCELLED (the clients never resume their caller's own cancel), INTERNAL and UNKNOWN, which
    a parsetier server never sends unmarked: a reset on the way, a proxy's page. No message text."""
    keys = {key for key, _ in error.trailing_metadata() or ()}
    return FAULT_TRAILER not in keys and (HANDOFF_TRAILER in keys or error.code() in RETRIED)


Message = (pb.ParseRequest, pb.SessionInput)
Payload = Sequence[int] | pb.ParseRequest | pb.SessionInput
"""A client message as the ledger keeps it: a plain run of token ids (the usual message, one id
step), or the message itself (its ``steps``; the ``Finish``, a cancel... ride along)."""


class Ledger:
    """All a client keeps to resume one session (docs/service.md, "Resume"): the ``Open``, the
    answered history (consecutive id steps merged into one growing array, about 4 bytes a token;
    text and logprob steps whole, in place), the pending messages (sent on the current stream,
    unanswered, each with its index on that stream and a caller's tag), and the ``sequence`` and
    ``output_digest`` of the last reply received. Free of I/O: the sync and async Parse streams
    and the batch clients drive the same object."""

    __slots__ = ("digest", "history", "open", "pending", "sent", "sequence")

    def __init__(self, open_: pb.Open) -> None:
        self.open = open_
        self.history: list[array | pb.Step] = []
        self.pending: deque[tuple[int, Payload, object]] = deque()
        self.sent = 1
        """Messages of this session on the current stream; the one with the Open is 1."""
        self.sequence = 0
        self.digest = 0

    def send(self, payload: Payload, tag: object = None) -> int:
        """A message goes out on the current stream: its index there."""
        self.sent += 1
        self.pending.append((self.sent, payload, tag))
        return self.sent

    def received(self, sequence: int, client_messages: int, digest: int) -> None:
        """A reply: it answers every pending message through ``client_messages``; its sequence
        must follow the last one (a gap or a repeat is an error, not output)."""
        if sequence != self.sequence + 1:
            raise RuntimeError(f"reply sequence {sequence} after {self.sequence}: a gap or a repeat")
        self.sequence, self.digest = sequence, digest
        self.answer(client_messages)

    def answer(self, through: int) -> None:
        """Pending messages with index ≤ ``through`` are answered: their steps join the history."""
        pending, history = self.pending, self.history
        while pending and pending[0][0] <= through:
            payload = pending.popleft()[1]
            if not isinstance(payload, Message):  # a plain run of ids: the usual message
                self._extend(payload)
                continue
            for step in payload.steps:
                if step.token_ids and not step.HasField("logprobs"):
                    self._extend(step.token_ids)
                elif step.token_ids or step.text or step.text_tokens:
                    history.append(step)  # text and logprob steps keep their place, whole

    def _extend(self, ids: Sequence[int]) -> None:
        history = self.history
        if history and type(history[-1]) is array:
            history[-1].extend(ids)  # type: ignore[union-attr]
        else:
            history.append(array("I", ids))

    def point(self) -> pb.Open:
        """The ``Open`` that resumes the session on a new stream."""
        open_ = pb.Open()
        open_.CopyFrom(self.open)
        point = open_.resume
        point.sequence, point.output_digest = self.sequence, self.digest
        point.history.extend(pb.Step(token_ids=s) if isinstance(s, array) else s for s in self.history)
        return open_

    def restart(self, first: int) -> list[tuple[Payload, object]]:
        """A new stream: the pending messages (payload, tag) to re-send in order, numbered there
        from ``first`` (2 after an Open alone; 1 when the first rides with the Open)."""
        self.pending = deque((first + i, payload, tag) for i, (_, payload, tag) in enumerate(self.pending))
        self.sent = first + len(self.pending) - 1
        return [(payload, tag) for _, payload, tag in self.pending]


def as_request(payload: Payload) -> pb.ParseRequest:
    """A ``Parse`` stream's pending message as it is (re-)sent."""
    if isinstance(payload, pb.ParseRequest):
        return payload
    return pb.ParseRequest(steps=[pb.Step(token_ids=payload)])
