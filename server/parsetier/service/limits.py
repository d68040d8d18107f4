"""What one client may cost the server, and the gate that counts open sessions.

Limits protect the other sessions: a client that exceeds one gets RESOURCE_EXHAUSTED (or
DEADLINE_EXCEEDED for idling) on its own stream and nothing else changes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc

from parsetier.service.errors import ServiceError, exhausted


@dataclass(frozen=True, slots=True)
class Limits:
    max_message_bytes: int = 4 * 1024 * 1024
    """Largest client message gRPC accepts (larger ones fail with RESOURCE_EXHAUSTED)."""
    max_steps_per_message: int = 4096
    max_tokens_per_session: int = 1_000_000
    """Output token ids one session may feed (the prompt tail is held to the same number)."""
    max_text_bytes_per_session: int = 16 * 1024 * 1024
    """UTF-8 bytes of already-detokenized text one session may feed."""
    max_sessions: int = 1024
    """Open sessions (Parse streams and ParseOnce calls) at once."""
    idle_timeout: float = 300.0
    """Seconds a stream may stay silent before it is ended with DEADLINE_EXCEEDED."""
    max_reply_bytes: int = 64 * 1024 * 1024
    """Largest message the server sends (grpc's send limit, and what the Python clients accept).
    The session limits keep ordinary replies far below it; a reply that would be larger ends the
    session with RESOURCE_EXHAUSTED instead of a message the client cannot receive."""
    max_loop_lag: float = 0.1
    """Seconds the event loop may run behind before new sessions are refused (0: never)."""
    max_watch_streams: int = 256
    """Health Watch and reflection streams open at once (each kind counted on its own)."""

    def check_steps(self, count: int) -> None:
        if count > self.max_steps_per_message:
            raise exhausted(f"{count} steps in one message; the limit is {self.max_steps_per_message}")

    def check_tokens(self, total: int) -> None:
        if total > self.max_tokens_per_session:
            raise exhausted(f"session exceeds {self.max_tokens_per_session} tokens")

    def check_reply(self, size: int) -> None:
        if size > self.max_reply_bytes:
            raise exhausted(
                f"the reply would be {size} bytes, more than the {self.max_reply_bytes} the server sends "
                "in one message; send fewer steps per message, or split the output across sessions"
            )

    def check_text(self, total_bytes: int) -> None:
        if total_bytes > self.max_text_bytes_per_session:
            raise exhausted(f"session exceeds {self.max_text_bytes_per_session} bytes of text")


class SessionGate:
    """Counts open sessions; refuses new ones past the limit or while the server drains."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.active = 0
        self.peak = 0
        """Most sessions open at once since start (for operators and tests)."""
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    def check_open(self) -> None:
        """A draining server refuses first: its refusal says where to go (elsewhere)."""
        if self.draining:
            raise ServiceError(grpc.StatusCode.UNAVAILABLE, "server is shutting down; retry elsewhere")

    def enter(self) -> None:
        self.check_open()
        if self.active >= self.max_sessions:
            raise exhausted(f"server has {self.active} open sessions; the limit is {self.max_sessions}")
        self.active += 1
        self.peak = max(self.peak, self.active)
        self._idle.clear()

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no session is open; False if the timeout came first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True
