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
