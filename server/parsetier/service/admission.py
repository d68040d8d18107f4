"""Admission control: refuse new sessions at once when the server cannot serve them in time.

The measure is event-loop lag: every stream, every reply and every accept runs on the one event
loop of a worker process, so how late the loop runs a short timer is how late every client's
next reply will be. A session count cannot tell that (1,000 idle streams cost nothing, 200 busy
ones saturate a core). While the lag stays above ``max_lag``, new ``Parse`` / ``ParseOnce`` /
``BuildConstraint`` calls and new ``ParseBatch`` sessions (each on its own) are refused with
``UNAVAILABLE`` before any work is done (nothing was parsed, so a retry — after a backoff, or on
another backend — is always safe), and the refusal is logged. Sessions already admitted keep
running: shedding new work is what gives them their latency back.

Health ``Watch`` and reflection streams are long-lived too; they are counted against their own
limit (``max_watch_streams``), so watchers cannot pile up without bound.
"""

from __future__ import annotations

import asyncio
import collections
import statistics
import time
from collections.abc import AsyncIterator, Callable

import grpc
from grpc_health.v1 import health
from grpc_reflection.v1alpha import reflection

from parsetier.service.background import LoopTask
from parsetier.service.errors import abort
from parsetier.service.logs import SERVER_LOG
from parsetier.status import StatusError, exhausted, unavailable

TICK = 0.02
"""Seconds between the lag probe's timer ticks (cost: one timer callback per tick)."""
WINDOW = 1.0
"""Seconds of ticks the lag is measured over."""
MIN_SAMPLES = 10
"""Fewest recent ticks the lag is the median of."""
LOG_EVERY = 1.0
"""Seconds between ``overloaded`` log lines while refusals go on."""


class LoopLag(LoopTask):
    """How late the event loop runs: the median lateness of a ``TICK``-second timer over the last
    ``WINDOW`` seconds (at least ``MIN_SAMPLES`` ticks). A saturated loop makes every tick late;
    one long pause (a model loading in a worker thread that holds the GIL in C for a moment)
    makes one tick late, and the median ignores it, so start-up and first-request loads do not
    shed traffic."""

    task_name = "parsetier-loop-lag"

    def __init__(self, tick: float = TICK, window: float = WINDOW) -> None:
        self.tick = tick
        self.window = window
        self._samples: collections.deque[tuple[float, float]] = collections.deque()

    async def _run(self) -> None:
        samples = self._samples
        while True:
            planned = time.monotonic() + self.tick
            await asyncio.sleep(self.tick)
            now = time.monotonic()
            samples.append((now, max(0.0, now - planned)))
            self._trim(now)

    def current(self) -> float:
        """Seconds the loop is behind (0 when it keeps up)."""
        # A snapshot first: ParseBatch opens call this from a worker thread (large messages are
        # applied off the loop) while the loop appends; copying a deque is one C call under the GIL.
        lags = [lag for _, lag in tuple(self._samples)]
        lags += [0.0] * (MIN_SAMPLES - len(lags))  # just started: no evidence of load yet
        return statistics.median(lags)

    def _trim(self, now: float) -> None:
        """Keep the last ``window`` seconds of samples, and at least ``MIN_SAMPLES``: after one
        long pause the window holds only the late tick, which must not decide alone."""
        samples = self._samples
        while len(samples) > MIN_SAMPLES and samples[0][0] < now - self.window:
            samples.popleft()


class Admission:
    """Decides whether a new session may start now; counts and logs refusals."""

    def __init__(self, max_lag: float, lag: LoopLag | None = None) -> None:
        self.max_lag = max_lag
        """Seconds of loop lag beyond which new sessions are refused; 0 disables the check."""
        self.lag = lag or LoopLag()
        self.refused = 0
        """Sessions refused for load since start (for operators and tests)."""
        self.on_refusal: Callable[[], None] | None = None
        """Called on every refusal (the server arms its extra accepts, ``service.accepts``)."""
        self._logged_at = -LOG_EVERY
        self._logged_refused = 0

    def check(self, rpc: str) -> None:
        if self.max_lag <= 0:
            return
        lag = self.lag.current()
        if lag > self.max_lag:
            self.refused += 1
            self._log(rpc, lag)
            if self.on_refusal is not None:
                self.on_refusal()
            raise unavailable(
                f"server overloaded (event loop {lag * 1000:.0f} ms behind, limit "
                f"{self.max_lag * 1000:.0f} ms); nothing was processed: retry after a backoff or on "
                "another backend",
            )

    def _log(self, rpc: str, lag: float) -> None:
        """One ``overloaded`` line per ``LOG_EVERY`` seconds at most, with the refusals since the
        last one (each refused session also gets its own ``session_end`` line)."""
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY:
            return
        fields = {
            "rpc": rpc,
            "loop_lag_ms": round(lag * 1000, 1),
            "max_loop_lag_ms": round(self.max_lag * 1000, 1),
            "refused_since_last": self.refused - self._logged_refused,
            "refused_total": self.refused,
        }
        SERVER_LOG.warning("overloaded: refusing new sessions", extra={"fields": fields})
        self._logged_at, self._logged_refused = now, self.refused


class StreamCount:
    """Counts long-lived auxiliary streams (health Watch, reflection) against a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def enter(self, what: str) -> None:
        if self.active >= self.limit:
            raise exhausted(f"{self.active} {what} streams are open; the limit is {self.limit}")
        self.active += 1

    def leave(self) -> None:
        self.active -= 1


async def _enter_or_abort(streams: StreamCount, what: str, context: grpc.aio.ServicerContext) -> None:
    try:
        streams.enter(what)
    except StatusError as exc:
        SERVER_LOG.warning("stream refused", extra={"fields": {"rpc": what, "error": exc.message}})
        await abort(context, exc)


class CountedHealthServicer(health.aio.HealthServicer):
    """The standard health servicer, with ``Watch`` streams counted."""

    def __init__(self, streams: StreamCount) -> None:
        super().__init__()
        self._streams = streams

    async def Watch(self, request, context) -> None:
        await _enter_or_abort(self._streams, "health Watch", context)
        try:
            await super().Watch(request, context)
        finally:
            self._streams.leave()


class CountedReflectionServicer(reflection.aio.ReflectionServicer):
    """The standard reflection servicer, with its streams counted."""

    def __init__(self, service_names, streams: StreamCount, pool=None) -> None:
        super().__init__(service_names, pool=pool)
        self._streams = streams

    async def ServerReflectionInfo(self, request_iterator, context) -> AsyncIterator:
        await _enter_or_abort(self._streams, "reflection", context)
        try:
            async for response in super().ServerReflectionInfo(request_iterator, context):
                yield response
        finally:
            self._streams.leave()
