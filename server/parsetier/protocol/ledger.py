"""A session's ledger: the counters its protocol keeps as it streams — client messages, output
tokens (against ``max_tokens_per_session``), the reply ``sequence``, what was sent, and the
output digest (``parsetier.engine.digest``).

One contract (``Ledger``), two implementations: ``PyLedger`` here (the reference engine's,
readable) and ``_core.Ledger`` (``parsetier_core/python/src/ledger.rs``), whose ``step`` is the
core's one plain step (the ``Parse`` stream's ``step_reply`` and the packed ``ParseBatch`` items,
``_core.PackedSteps``: no Python per item). What moves each counter: ``rules.COUNTS``.
``SessionProtocol`` reads and writes either only through this contract, so a session's counts are
the same whichever path stepped it. ``SessionCounts`` (the log record) shows the ledger's counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from parsetier import native
from parsetier.engine import digest
from parsetier.messages import Delta
from parsetier.protocol import rules


class Ledger(Protocol):
    client_messages: int
    """Every message received (empty keep-alives too)."""
    tokens: int
    """Output token ids received (plus the ``text_tokens`` of text steps)."""
    sequence: int
    """Number of the last reply that carried something."""
    deltas: int
    events: int
    server_messages: int
    digest: int
    """The running digest of the output produced (``output_digest`` of the replies)."""
    digest_kind: str
    """The tag of the last piece digested (``parsetier.engine.digest``)."""

    def count_message(self, tokens: int) -> int:
        """A client message carrying ``tokens`` token ids arrived: the session's tokens so far.
        The one place a message is counted (the core's twin: ``Ledger::count``)."""
        ...

    def count_tokens(self, tokens: int) -> int:
        """``tokens`` more token ids of the message counted last: the session's tokens so far."""
        ...

    def count_reply(self, deltas: int, events: int) -> int:
        """A reply carrying ``deltas`` and ``events`` goes out: its sequence number."""
        ...

    def digest_deltas(self, deltas: Sequence[Delta]) -> int:
        """Account for produced deltas (in order) in the digest: its new value."""
        ...

    def digest_finish(self, reason: str) -> int:
        """The session's end in the digest: its new value."""
        ...

    def unbind(self) -> None:
        """The session left STREAMING: no path may step it for the protocol any more (the native
        ledger lets go of the session the packed path steps; ``PyLedger`` holds none)."""
        ...


class PyLedger:
    """The reference engine's ``Ledger``."""

    __slots__ = (
        "client_messages",
        "deltas",
        "digest",
        "digest_kind",
        "events",
        "sequence",
        "server_messages",
        "tokens",
    )

    def __init__(self) -> None:
        self.client_messages = self.tokens = self.sequence = 0
        self.deltas = self.events = self.server_messages = 0
        self.digest = 0
        self.digest_kind = ""

    def count_message(self, tokens: int) -> int:
        self.client_messages += 1
        self.tokens += tokens
        return self.tokens

    def count_tokens(self, tokens: int) -> int:
        self.tokens += tokens
        return self.tokens

    def count_reply(self, deltas: int, events: int) -> int:
        self.sequence += 1
        self.deltas += deltas
        self.events += events
        self.server_messages += 1
        return self.sequence

    def digest_deltas(self, deltas: Sequence[Delta]) -> int:
        return digest.add(self, deltas)

    def digest_finish(self, reason: str) -> int:
        return digest.finish(self, reason)

    def unbind(self) -> None:
        pass


def new_ledger() -> Ledger:
    """A new session's ledger: the native one when sessions run on the native core (the packed
    path can then step them), else ``PyLedger``."""
    if rules.core_batches():
        return native._core.Ledger()
    return PyLedger()
