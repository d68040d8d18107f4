"""The benchmarks' launcher pins what it says it pins: every thread of the server, checked in /proc.

``os.sched_setaffinity(pid)`` sets one thread's affinity (the main one); grpcio's polling and
executor threads kept running on any core, next to the load the bench pinned elsewhere. The
launcher now starts the server under the affinity (``ProcessServer(cpus=...)``) and ``pin`` walks
every thread of every process of the server.
"""

from __future__ import annotations

import os

import pytest

from parsetier_client import Client
from tests.testkit.servers import ProcessServer

CPUS = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(
    len(CPUS) < 2, reason="pinning is only visible with two CPUs to pin between"
)


def _serve_calls(server: ProcessServer) -> None:
    """A few calls, so the threads grpcio starts on demand exist when they are counted."""
    with Client(server.target, resume=False) as client:
        for _ in range(3):
            client.list_models()


@needs_two_cpus
def test_a_server_started_under_cpus_has_every_thread_there() -> None:
    with ProcessServer("--preload", "none", cpus={CPUS[-1]}) as server:
        _serve_calls(server)
        found = server.thread_cpus()
        assert len(found) > 1, "a gRPC server runs more than one thread"
        assert {tuple(sorted(cpus)) for cpus in found.values()} == {(CPUS[-1],)}, found


@needs_two_cpus
def test_pin_moves_every_thread_where_the_main_threads_affinity_alone_did_not() -> None:
    with ProcessServer("--preload", "none") as server:
        _serve_calls(server)
        assert server.proc is not None
        os.sched_setaffinity(server.proc.pid, {CPUS[0]})  # what the launcher did before
        found = server.thread_cpus()
        stray = [task for task, cpus in found.items() if cpus != {CPUS[0]}]
        assert stray, "the main thread's affinity alone leaves the other threads unpinned"
        server.pin(CPUS[0])
        found = server.thread_cpus()
        assert {tuple(sorted(cpus)) for cpus in found.values()} == {(CPUS[0],)}, found


@needs_two_cpus
def test_workers_inherit_the_affinity_they_are_forked_under() -> None:
    with ProcessServer(
        "--preload", "none", "--workers", "2", ready="workers listening", cpus={CPUS[-1]}
    ) as server:
        _serve_calls(server)
        found = server.thread_cpus()
        assert len({pid for pid, _ in found}) >= 3, "the supervisor and two workers"
        assert {tuple(sorted(cpus)) for cpus in found.values()} == {(CPUS[-1],)}, found
