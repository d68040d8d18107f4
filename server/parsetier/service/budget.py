"""The server-wide budget for what clients make a server hold: their input not yet parsed and
replies they have not taken yet.

Each stream's own limits bound one client, not a thousand: streams that write and then stop
reading each leave input in gRPC's buffers and a reply blocked on HTTP/2 flow control, and
measured before this budget, 200 such streams took a server from 169 MB to about 1 GB (gRPC's
window, grown by its bandwidth probe, let each client park megabytes). Now gRPC announces a fixed
window per stream (``STREAM_WINDOW``; the probe is off, ``server.build_server``), and the budget
(``--max-buffered-bytes``) counts, for every stream:

* its window, from its start until its handler is done (which, for a stream ended while its
  client does not read, is when the client reads its status or its connection closes): what
  gRPC may hold of the client's input that the server has not read;
* each message read, from its read until its reply is taken;
* each reply, from its write until the client has taken it.

A charge that would pass the budget is refused: a new stream (or unary call) with
``RESOURCE_EXHAUSTED`` before anything is read, a stream that would read or write past it with
the same status, which names the flag. What the budget does not see is a message gRPC is still
receiving for a read in progress (up to ``--max-message-bytes`` per stream, until the idle
timeout): docs/service.md, "Memory bounds".
"""

from __future__ import annotations

import os

from parsetier.status import ProtocolError, exhausted

STREAM_WINDOW = 64 * 1024
"""Bytes of a stream's input gRPC may hold before the server reads it: the HTTP/2 stream window the
server announces (``grpc.http2.lookahead_bytes``)."""
MEMORY_SHARE = 4
"""The default budget is the memory the process may use divided by this (and by the workers)."""
MIN_BUDGET = 64 * 1024 * 1024
"""The default budget is at least this much."""


def memory_bytes() -> int:
    """The memory this process may use: its cgroup's limit when it has one, else the machine's."""
    try:
        with open("/sys/fs/cgroup/memory.max") as file:
            text = file.read().strip()
        if text != "max":
            return int(text)
    except (OSError, ValueError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_budget(workers: int = 1) -> int:
    """A quarter of the memory, shared by the worker processes (each has its own budget)."""
    return max(MIN_BUDGET, memory_bytes() // MEMORY_SHARE // max(1, workers))


class BufferBudget:
    """Bytes held for all streams of this process, against ``limit``; used from the event loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        """Most bytes held at once since start (for operators and tests)."""
        self.refused = 0
        """Charges refused since start."""

    def take(self, size: int) -> None:
        """Hold ``size`` more bytes, or ``RESOURCE_EXHAUSTED`` if that would pass the limit."""
        used = self.used + size
        if used > self.limit:
            self.refused += 1
            raise self.refusal(size)
        self.used = used
        if used > self.peak:
            self.peak = used

    def give(self, size: int) -> None:
        self.used -= size

    def refusal(self, size: int) -> ProtocolError:
        return exhausted(
            f"the server holds {self.used} bytes of client input and unsent replies; {size} more "
            f"would pass its budget of {self.limit} (--max-buffered-bytes)"
        )

    def share(self) -> Share:
        return Share(self)


class Share:
    """One stream's (or call's) bytes in the budget; ``close`` gives back what it still holds."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: BufferBudget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, size: int) -> None:
        self.budget.take(size)
        self.held += size

    def give(self, size: int) -> None:
        self.budget.used -= size
        self.held -= size

    def close(self) -> None:
        self.budget.used -= self.held
        self.held = 0
