"""Refused credentials in the log, rate-limited.

A call refused for its credentials (no bearer token, a wrong one, a client certificate whose names
are not allowed) is something an operator must see: a client misconfigured after a token rotation,
or someone probing. One line per refusal would let any client fill the log, so the first refusal
is logged at once and the ones after it are counted and logged together, at most one line per
``interval`` seconds: ``credentials refused`` with the count per reason and the last call's
method and peer.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable

from parsetier.service.logs import SERVER_LOG

REFUSAL_LOG_INTERVAL = 60.0
"""Least seconds between two ``credentials refused`` lines."""


class RefusalLog:
    """Counts refusals and logs them, one warning line per interval at most (on the event loop)."""

    def __init__(self, interval: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = REFUSAL_LOG_INTERVAL if interval is None else interval
        self._clock = clock
        self._counts: Counter[str] = Counter()
        self._last_call: tuple[str, str] = ("", "")
        self._logged_at: float | None = None
        self._flush: asyncio.TimerHandle | None = None

    def refused(self, reason: str, method: str, peer: str) -> None:
        """One call refused for ``reason``: logged now, or with the others at the interval's end."""
        self._counts[reason] += 1
        self._last_call = (method, peer)
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= self.interval:
            self._log()
        elif self._flush is None:
            delay = self._logged_at + self.interval - now
            self._flush = asyncio.get_running_loop().call_later(delay, self._log)

    def _log(self) -> None:
        self._flush = None
        if not self._counts:
            return
        method, peer = self._last_call
        fields = {
            "refused": sum(self._counts.values()),
            "reasons": dict(self._counts),
            "last_method": method,
            "last_peer": peer,
            "interval_s": self.interval,
        }
        SERVER_LOG.warning("credentials refused", extra={"fields": fields})
        self._counts.clear()
        self._logged_at = self._clock()
