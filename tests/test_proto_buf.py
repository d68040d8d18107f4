"""buf on the contract: `buf lint` (STANDARD rules, protos/buf.yaml) and `buf breaking` (FILE rules)
of the working tree's protos against the previous commit's.

buf is a Go module that `.ci/setup` (run by `make test`) installs into .tools/bin; without it these
tests fail naming the command to run. A breaking change is a test failure by design: the fix is a new
package version (parsetier.v2), not an edit to v1.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from grpc_servers import ROOT

PROTOS = ROOT / "protos"
TIMEOUT = 300  # seconds; buf compiles the module on its first run


def buf_binary() -> str:
    for candidate in (ROOT / ".tools" / "bin" / "buf", shutil.which("buf")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("buf is not installed: run `make deps` (or .ci/setup), which `go install`s it", pytrace=False)


def run_buf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [buf_binary(), *args], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def previous_protos(into: Path) -> str:
    """Unpack the protos/ tree of HEAD~1 into ``into``; the revision used, for messages."""
    git = shutil.which("git")
    assert git, "git is required to read the previous commit's protos"
    revision = "HEAD~1"
    probe = subprocess.run(
        [git, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.fail(
            "the checkout has no previous commit to compare the proto with (a shallow clone?): "
            "buf breaking needs HEAD~1; clone with --depth 2 or more",
            pytrace=False,
        )
    archive = subprocess.run(
        [git, "archive", "--format=tar", revision, "protos"], cwd=ROOT, capture_output=True, check=True
    )
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return revision


def test_buf_lint_standard():
    result = run_buf("lint", "protos")
    assert result.returncode == 0, f"buf lint failed:\n{result.stdout}{result.stderr}"


def test_buf_breaking_against_previous_commit(tmp_path):
    revision = previous_protos(tmp_path)
    against = tmp_path / "protos"
    assert (against / "parsetier" / "v1" / "parsetier.proto").is_file(), f"{revision} has no v1 proto"
    result = run_buf("breaking", "protos", "--against", str(against))
    assert result.returncode == 0, (
        f"buf breaking against {revision} failed; a breaking change needs a new package version:\n"
        f"{result.stdout}{result.stderr}"
    )


def test_buf_breaking_detects_a_removed_field(tmp_path):
    """The check is live: deleting a field from a copy of the proto is reported."""
    changed = tmp_path / "protos"
    shutil.copytree(PROTOS, changed)
    proto = changed / "parsetier" / "v1" / "parsetier.proto"
    text = proto.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if "string request_id = " in line)
    proto.write_text(text.replace(line + "\n", ""), encoding="utf-8")
    result = run_buf("breaking", str(changed), "--against", "protos")
    assert result.returncode != 0 and "request_id" in result.stdout + result.stderr, result
