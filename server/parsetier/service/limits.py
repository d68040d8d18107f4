"""The gate that counts a server's open sessions (the per-session limits are the protocol's:
``parsetier.protocol.rules.Limits``, re-exported here)."""

from __future__ import annotations

import asyncio

from parsetier.protocol.rules import Limits
from parsetier.status import exhausted, unavailable

__all__ = ["Limits", "SessionGate"]


class SessionGate:
    """Counts open sessions; refuses new ones past the limit or while the server drains."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.active = 0
        self.peak = 0
        """Most sessions open at once since start (for operators and tests)."""
        self.ended = 0
        """Sessions that have left since start."""
        self._peak_since_look = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def check_open(self) -> None:
        """A draining server refuses first: its refusal says where to go (elsewhere)."""
        if self.draining:
            raise unavailable("server is shutting down; retry elsewhere")

    def enter(self) -> None:
        self.check_open()
        if self.active >= self.max_sessions:
            raise exhausted(f"server has {self.active} open sessions; the limit is {self.max_sessions}")
        self.active = active = self.active + 1
        if active > self.peak:
            self.peak = active
        if active > self._peak_since_look:
            self._peak_since_look = active
        if active == 1:  # the first: ``leave`` sets it when the last one goes (a call per session)
            self._idle.clear()

    def leave(self) -> None:
        self.active -= 1
        self.ended += 1
        if self.active == 0:
            self._idle.set()

    def peak_since_look(self) -> int:
        """Most sessions open at once since the last call (the heap trimmer's view of a burst)."""
        peak, self._peak_since_look = self._peak_since_look, self.active
        return peak

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no session is open; False if the timeout came first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
