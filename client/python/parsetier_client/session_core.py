"""What the blocking and the asyncio ``Parse`` streams share, free of I/O.

A session's state is the same whichever way its messages travel: the resume ledger and policy,
the final result, the count of moves; so are the decisions made on it: the first message of a
new stream, what it re-sends, what a reply answers, whether a broken stream moves. ``StreamCore``
holds all of it once; ``sync.ParseStream`` (a thread pulling from a queue) and
``aio.AsyncParseStream`` (tasks) only move the messages.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.resume import Ledger, ResumePolicy, retryable
from parsetier_client.typed import Final


class StreamCore:
    """One session's state and decisions (see the module docstring). ``policy`` None: resume
    off, nothing is kept."""

    def __init__(self, open_: pb.Open, policy: ResumePolicy | None) -> None:
        self._policy = policy
        if policy is not None:
            open_.resumable = True  # a draining server hands the session off
        self._ledger = Ledger(open_)
        self.final: Final | None = None
        """The outcome once the final reply has come (typed; ``final.proto`` is the raw message)."""
        self.resumes = 0
        """How many times the session moved to a new stream."""

    def _opening(self, resuming: bool) -> pb.ParseRequest:
        """A stream's first message: the Open, with the session's resume point when ``resuming``."""
        return pb.ParseRequest(open=self._ledger.point() if resuming else self._ledger.open)

    def _unanswered(self) -> list[pb.ParseRequest]:
        """The messages sent that no reply has answered: a new stream re-sends them after its Open."""
        return [message for message, _ in self._ledger.restart(2)]

    def _sending(self, message: pb.ParseRequest) -> None:
        """``message`` goes out: the ledger keeps it until a reply answers it."""
        if self._policy is not None:
            self._ledger.send(message)

    def _received(self, message: pb.ParseResponse) -> None:
        """A reply came: what it answered leaves the ledger; the final result is kept."""
        if self._policy is not None:
            self._ledger.received(message.sequence, message.client_messages, message.output_digest)
        if message.HasField("final"):
            self.final = Final.of(message.final)

    def _ended_whole(self) -> bool:
        """A stream broke after the final result: only its ending broke, nothing is lost."""
        return self.final is not None and self._policy is not None

    def _moves_after(self, error: grpc.RpcError, attempt: int | None = None) -> bool:
        """Whether a stream broken with this status moves to a new one: resume on, a status that
        is not the request's own and, when ``attempt`` is given, retry budget left."""
        policy = self._policy
        if policy is None or not retryable(error):
            return False
        return attempt is None or attempt < policy.attempts

    def _stop_resuming(self) -> None:
        """The caller's own cancel is never resumed."""
        self._policy = None


def wire_chunks(message: pb.ParseResponse) -> Iterator[bytes]:
    """The bytes a reply carries for the caller (``Open.wire``): its ``wire``, then its final
    result's, leaving out empty ones."""
    if message.wire:
        yield message.wire
    if message.HasField("final") and message.final.wire:
        yield message.final.wire
