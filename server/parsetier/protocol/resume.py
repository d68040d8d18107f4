"""Resume: a session whose stream broke continues on a new stream, on any server, counted in tokens.

The client opens the new stream with the same ``Open`` plus a ``ResumePoint``: the history it has
the output of (its answered steps, consecutive id steps merged into one packed run), and the
``sequence`` and ``output_digest`` of the last reply it received. The server feeds the history
right after the ``Open`` (``SessionProtocol._start``) through the same feed as any input, under
the same per-session limits, and sends nothing for it; then it compares its own digest of the
output that produced (``parsetier.engine.digest``) with the client's. Equal: the session is the one the
client had, and its replies number on from ``sequence + 1``; the client re-sends its unanswered
messages as live input. Different: ``ResumeMismatch`` (FAILED_PRECONDITION), never a silently
different output.

Exactness rests on two server properties: output is deterministic (tool call ids included, see
``parsetier.engine.call_ids``) and split-invariant (any split of the same ids gives the same output), so
one packed run stands for any number of the original steps. One pass over the history per
failover; nothing is stored on any server between streams.
"""

from __future__ import annotations

from parsetier.engine.session import WrongState
from parsetier_api.v1 import parsetier_pb2 as pb


class ResumeMismatch(WrongState):
    """The resumed history does not reproduce the output the client received."""


def check(point: pb.ResumePoint, digest: int) -> None:
    """The history has been fed and produced output with ``digest``: it must be the client's."""
    if digest != point.output_digest:
        raise ResumeMismatch(
            f"the resumed history does not reproduce the output received: its output digest is "
            f"{digest:#010x}, the resume point says {point.output_digest:#010x} (sequence "
            f"{point.sequence}); re-send exactly the steps whose replies arrived"
        )


def history_tokens(point: pb.ResumePoint) -> int:
    """Token ids in the history (what a resumed session's log line reports)."""
    return sum(len(step.token_ids) for step in point.history)
