"""More ways in while the server sheds load, so that refusals are quick.

grpc.aio takes new calls in one at a time per method: its accept loop keeps one pending request
per registered method and re-arms it after each call, a few event-loop iterations per call. Under
load each iteration first runs every ready stream's parsing (tens to hundreds of ms), so new calls
were taken in at about ten a second and waited seconds in grpc before admission could refuse them
in microseconds (``bench/refusal_latency.py``: 8 s median, 10 s at worst).

While admission refuses, ``ExtraAccepts`` keeps ``EXTRA`` more requests pending for every method
that admission guards, each served exactly as grpc's own loop serves a call (same handlers, same
interceptors); a waiting burst is then taken in, and refused, within a few iterations. They are
armed only while refusing: a server that keeps up admits a burst at grpc's own pace, which is what
gives the lag time to show before a whole burst is in (``docs/service.md``, *Overload*).

This drives grpc.aio's server internals (``grpcio`` 1.85): the pending-request coroutine and the
per-call handler of its Cython server. Where they are missing (another grpcio), nothing is
armed, one warning is logged, and refusals are as slow as before.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence

import grpc

from parsetier.service.logs import SERVER_LOG

EXTRA = 32
"""Requests kept pending per guarded method while refusing: a waiting burst of this many calls
per method is taken in within one round of the accept (a few loop iterations)."""

SIGNATURES = {
    "_handle_rpc": (
        "method_name",
        "method_resolver",
        "interceptors",
        "rpc_state",
        "loop",
        "concurrency_exceeded",
    ),
    "_schedule_rpc_coro": ("rpc_coro", "rpc_state", "loop", "method_name"),
}
"""The grpc.aio internals a call is started with, as this module calls them: checked at start, so
that a grpcio that changed them gets no extra accepts rather than calls taken in and dropped."""


class ExtraAccepts:
    """Extra pending accepts for ``methods`` (full names to handlers) of a started ``server``."""

    def __init__(
        self,
        server: grpc.aio.Server,
        methods: Mapping[str, grpc.RpcMethodHandler],
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        extra: int = EXTRA,
    ) -> None:
        self.extra = extra
        self._pending = dict.fromkeys(methods, 0)
        self._interceptors = tuple(interceptors)
        self._tasks: set[asyncio.Task] = set()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        try:
            from grpc._cython import cygrpc

            self._cygrpc = cygrpc
            self._core = server._server  # type: ignore[attr-defined]
            self._core._request_registered_call  # noqa: B018  (present in this grpcio?)
            self._resolver = cygrpc._MethodResolver([], dict(methods))
            for function, parameters in SIGNATURES.items():
                found = tuple(inspect.signature(getattr(cygrpc, function)).parameters)
                if found != parameters:
                    raise TypeError(f"{function}{found}")
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            SERVER_LOG.warning(
                "extra accepts unavailable in this grpcio: refusals under load wait for grpc's accept loop",
                extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}},
            )
            self._closed = True

    def top_up(self) -> None:
        """Keep ``extra`` requests pending for every method (called on each refusal, from the
        loop or from a worker thread: ``ParseBatch`` applies large messages off the loop)."""
        if self._closed:
            return
        loop = self._loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if not on_loop:
            loop.call_soon_threadsafe(self.top_up)
            return
        for method, pending in self._pending.items():
            for _ in range(self.extra - pending):
                self._pending[method] += 1
                task = loop.create_task(self._accept(method, loop), name="parsetier-extra-accept")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _accept(self, method: str, loop: asyncio.AbstractEventLoop) -> None:
        """Take in one call of ``method`` and start it the way grpc's own accept loop does."""
        try:
            rpc_state = await self._core._request_registered_call(method.encode())
        except Exception:  # the server is stopping (grpc fails pending requests then)
            self._closed = True
            return
        finally:
            self._pending[method] -= 1
        cygrpc = self._cygrpc
        call = cygrpc._handle_rpc(method, self._resolver, self._interceptors, rpc_state, loop, False)
        task = loop.create_task(cygrpc._schedule_rpc_coro(call, rpc_state, loop, method), name="rpc_task")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
