"""Resume (docs/service.md, "Resume"): the retry rule, the backoff, and the per-session ledger the
sync and async ``Parse`` streams and the batch clients drive. Free of I/O."""

from __future__ import annotations

import random
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb

HANDOFF_TRAILER = "parsetier-handoff"
FAULT_TRAILER = "parsetier-fault"
RETRIED = frozenset(grpc.StatusCode[code] for code in ("UNAVAILABLE", "CANCELLED", "INTERNAL", "UNKNOWN"))


@dataclass(frozen=True, slots=True)
class ResumePolicy:
    """``attempts``: reconnects in a row that may fail before the last error surfaces, renewed by
    progress (a stream accepted, a reply). Backoff doubles from ``initial_backoff`` to
    ``max_backoff``, jittered so a fleet's clients do not reconnect in lock step."""

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
    """The proto's retry rule (the comment on ``ParserService``), from trailers and code only."""
    keys = {key for key, _ in error.trailing_metadata() or ()}
    return FAULT_TRAILER not in keys and (HANDOFF_TRAILER in keys or error.code() in RETRIED)


Payload = Sequence[int] | pb.ParseRequest | pb.SessionInput
"""A pending message: a plain run of token ids (one id step), or the message itself."""


class Ledger:
    """One session's ledger (the page's pseudo-code): the ``Open``, the answered history (id runs
    merged into one ``array``, other steps whole), the pending messages as (index on the current
    stream, payload, caller's tag), and the ``sequence`` and ``output_digest`` of the last reply."""

    __slots__ = ("digest", "history", "open", "pending", "sent", "sequence")

    def __init__(self, open_: pb.Open) -> None:
        self.open = open_
        self.history: list[array | pb.Step] = []
        self.pending: deque[tuple[int, Payload, object]] = deque()
        self.sent = 1  # the Open is message 1
        self.sequence = self.digest = 0

    def send(self, payload: Payload, tag: object = None) -> int:
        """A message goes out on the current stream: its index there."""
        self.sent += 1
        self.pending.append((self.sent, payload, tag))
        return self.sent

    def received(self, sequence: int, client_messages: int, digest: int) -> None:
        """A reply: it must follow the last one, and answers the pending messages it covers."""
        if sequence != self.sequence + 1:
            raise RuntimeError(f"reply sequence {sequence} after {self.sequence}: a gap or a repeat")
        self.sequence, self.digest = sequence, digest
        self.answer(client_messages)

    def answer(self, through: int) -> None:
        """Pending messages with index ≤ ``through`` join the history."""
        while self.pending and self.pending[0][0] <= through:
            payload = self.pending.popleft()[1]
            if not isinstance(payload, (pb.ParseRequest, pb.SessionInput)):
                self._extend(payload)
                continue
            for step in payload.steps:
                if step.token_ids and not step.HasField("logprobs"):
                    self._extend(step.token_ids)
                elif step.token_ids or step.text or step.text_tokens:
                    self.history.append(step)

    def _extend(self, ids: Sequence[int]) -> None:
        if self.history and type(self.history[-1]) is array:
            self.history[-1].extend(ids)  # type: ignore[union-attr]
        else:
            self.history.append(array("I", ids))

    def point(self) -> pb.Open:
        """The ``Open`` that resumes the session on a new stream."""
        open_ = pb.Open()
        open_.CopyFrom(self.open)
        point = open_.resume
        point.sequence, point.output_digest = self.sequence, self.digest
        point.history.extend(pb.Step(token_ids=s) if isinstance(s, array) else s for s in self.history)
        return open_

    def restart(self, first: int) -> list[tuple[Payload, object]]:
        """A new stream: the pending (payload, tag) to re-send, renumbered from ``first``."""
        self.pending = deque((first + i, payload, tag) for i, (_, payload, tag) in enumerate(self.pending))
        self.sent = first + len(self.pending) - 1
        return [(payload, tag) for _, payload, tag in self.pending]
