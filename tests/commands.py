"""Commands the toolchain tests run (go, cmake, cargo, the programs they build), bounded in time."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest


def run_bounded(
    argv: list[str], timeout: float, cwd: Path, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run ``argv`` in its own process group, killing the whole group (a test binary a build tool
    started included) if it overruns ``timeout`` seconds, which fails the test with its output;
    returns the exit code and the combined output."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env or dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"`{' '.join(argv)}` took over {timeout} s:\n{output}", pytrace=False)
    return proc.returncode, output
