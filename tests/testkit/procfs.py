"""A process's CPU time and memory from /proc (Linux): what the server used, not the client beside it."""

from __future__ import annotations

import os
import re
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def rss_pss_bytes(pid: int) -> tuple[int, int]:
    """(RSS, PSS): PSS splits the pages shared with other processes (a forked worker's) among them."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    rss = re.search(r"^Rss:\s+(\d+)", text, re.M)
    pss = re.search(r"^Pss:\s+(\d+)", text, re.M)
    assert rss and pss, f"no Rss/Pss in /proc/{pid}/smaps_rollup"
    return int(rss.group(1)) * 1024, int(pss.group(1)) * 1024


def threads(pid: int) -> list[int]:
    """The thread ids of ``pid`` (its tasks in /proc; the main thread's id is ``pid``)."""
    return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descending from it (a supervisor's workers, their helpers), read
    from each thread's ``children`` in /proc."""
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        for tid in threads(current):
            try:
                children = Path(f"/proc/{current}/task/{tid}/children").read_text().split()
            except FileNotFoundError:  # the thread ended while we read
                continue
            pending.extend(int(child) for child in children)
    return tree


def allowed_cpus(pid: int, tid: int) -> set[int]:
    """The CPUs thread ``tid`` of ``pid`` may run on (``Cpus_allowed_list`` in its status)."""
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cpus: set[int] = set()
            for part in line.split(":", 1)[1].strip().split(","):
                first, _, last = part.partition("-")
                cpus.update(range(int(first), int(last or first) + 1))
            return cpus
    raise RuntimeError(f"no Cpus_allowed_list for thread {tid} of {pid}")
