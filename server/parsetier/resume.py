"""Resume: a session whose stream broke continues on a new stream, on any server.

The client opens the new stream with the same ``Open`` plus a ``ResumePoint`` — the
``client_messages`` and ``sequence`` of the last reply it received — and re-sends every client
message of the broken stream, framed as before, then carries on. The server feeds the first
``client_messages`` of them to the session as usual but sends nothing for them (the client has
their output), counting the replies they would have produced; after the last of them that count
must equal ``sequence``, and that message must have produced a reply. Everything after is
answered as usual, so sequence numbers continue where the client stopped and every delta arrives
exactly once. Output is deterministic (see ``parsetier.call_ids``), so the replayed session is
the same session.

One pass over the history, per failover: the same feed calls the original stream made, under the
same per-session limits (a history is bounded by the token limits like any session).

A point that cannot be right is ``ResumeMismatch`` (FAILED_PRECONDITION), never a wrong output:
the re-sent messages produce a different number of replies, the message the point names produced
none, or the point lies at or after ``Finish`` (the client already has the final reply).
"""

from __future__ import annotations

from parsetier.session import WrongState


class ResumeMismatch(WrongState):
    """The resume point disagrees with the re-sent history."""


class Replay:
    """The silent prefix of a resumed session: client messages ``1..until`` (the Open's included)."""

    __slots__ = ("_replies", "sequence", "until")

    def __init__(self, client_messages: int, sequence: int) -> None:
        if sequence > client_messages or (sequence == 0) != (client_messages == 0):
            raise ResumeMismatch(
                f"resume point client_messages={client_messages} sequence={sequence} is impossible: "
                "every reply answers one client message"
            )
        self.until = client_messages
        self.sequence = sequence
        self._replies = 0

    def silent(self, message_number: int) -> bool:
        """Whether client message ``message_number`` (1-based) is history the client has output for."""
        return message_number <= self.until

    def replayed(self, message_number: int, produced: bool, finished: bool) -> None:
        """Account for one silent message: did it produce a reply, did it finish the session."""
        if finished:
            raise ResumeMismatch(
                f"resume point client_messages={self.until} is at or after Finish (message "
                f"{message_number}): the final reply was already sent, there is nothing to resume"
            )
        self._replies += produced
        if message_number == self.until and (not produced or self._replies != self.sequence):
            raise ResumeMismatch(
                f"the re-sent history disagrees with the resume point: its first {self.until} "
                f"messages produce {self._replies} replies (the last one "
                f"{'a reply' if produced else 'none'}), the point says sequence={self.sequence}"
            )
