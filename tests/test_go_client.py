"""The Go client (client/go) against the real server: the contract is language-neutral.

`go test` runs the Go package's tests and examples with PARSETIER_SERVER pointing at a
`parsetier serve` subprocess on loopback (without the variable, the Go tests start a server
themselves). Go is required, not optional: without it these tests fail with a message
saying so. The first run downloads the Go modules (and the pinned protoc plugins), hence the
generous time bound.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commands import run_bounded
from grpc_servers import ROOT, ProcessServer
from tls_support import secure_server

pytestmark = pytest.mark.toolchain  # builds and runs the Go client

GO_DIR = ROOT / "client" / "go"
TIMEOUT = 300  # seconds, per go command; module downloads happen on the first run


def go_binary() -> str:
    """The `go` command; its absence fails the test (not a skip: CI must run these)."""
    path = shutil.which("go")
    if path is None:
        pytest.fail(
            "the Go toolchain (`go`, >= 1.25) is not on PATH; the Go client tests need it "
            "(install Go from https://go.dev/dl/ and put its bin directory on PATH)",
            pytrace=False,
        )
    return path


def run_go(argv: list[str], cwd: Path = GO_DIR, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a go command with a time bound (``run_bounded``); the exit code and the combined output."""
    return run_bounded(argv, TIMEOUT, cwd, env)


def test_go_client_against_real_server():
    go = go_binary()
    with ProcessServer("--preload", "qwen3") as server:
        env = dict(os.environ, PARSETIER_SERVER=server.target)
        skip = "TestSecure|TestReplyParts"  # each needs a server of its own (tests below)
        argv = [go, "test", "-count=1", "-v", "-timeout", f"{TIMEOUT - 30}s", "-skip", skip, "./..."]
        code, output = run_go(argv, env=env)
        assert code == 0, f"go test failed (exit {code}):\n{output}"
        assert "--- SKIP" not in output, f"Go tests skipped instead of running:\n{output}"
        for name in (
            "TestSessionOneTokenPerMessage",
            "TestSessionSeveralStepsPerMessage",
            "TestParseStreamEqualsParseOnce",
            "TestErrors",
            "TestOptions",
            "TestNewClientNeedsCredentials",
            "TestDefaultKeepaliveWithinServerPolicy",
            "TestDefaultKeepaliveQuietSessionSurvives",
            "TestDeltasIterator",
            "TestIteratorsEndWithTheStatus",
            "TestContextCancelsSession",
            "TestBuildConstraint",
            "TestLogprobStepsResolve",
            "TestCompletionLogprobsInTheWire",
            "TestCompletionSessions",
            "TestBatchManySessionsOneTokenPerStep",
            "TestBatchSessionErrors",
            "TestBatchEmptyKeyEndsTheStream",
            "TestBatchPackedAndUnpackedEntriesInOneStep",
            "TestBatchResumesPackedSessions",
            "TestSessionWire",
            "ExampleClient_Open",
            "ExampleClient_ParseOnce",
            "ExampleClient_ParseStream",
            "TestRenderThenParseWithItsOpen",
            "TestRenderAnthropicMessages",
            "TestRenderChoicesAndConstraint",
            "TestRenderErrors",
            "ExampleClient_Render",
            "TestWireJoinOneChoicePassesThrough",
        ):
            assert f"--- PASS: {name}" in output, f"{name} did not run:\n{output}"
        # The sessions were the Go client's, on this server: its five runSession sessions ended OK.
        deadline = time.monotonic() + 10
        while True:
            ends = [
                r
                for r in list(server.logs)
                if r.get("msg") == "session_end" and r.get("request_id") == "go-client-test"
            ]
            if len(ends) >= 5 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert len(ends) == 5, f"expected 5 session_end lines from the Go client: {server.logs}"
    assert all(r["outcome"] == "OK" and r["finish_reason"] == "tool_calls" for r in ends), ends


def test_go_client_joins_a_reply_sent_in_parts():
    """Replies past a small --max-reply-bytes come in parts; the Go session and batch join them."""
    go = go_binary()
    limit = 256 * 1024
    with ProcessServer("--preload", "qwen3", "--max-reply-bytes", str(limit)) as server:
        env = dict(os.environ, PARSETIER_SERVER=server.target, PARSETIER_PARTS_SERVER=server.target)
        env["PARSETIER_PARTS_LIMIT"] = str(limit)
        argv = [go, "test", "-count=1", "-v", "-timeout", f"{TIMEOUT - 30}s", "-run", "^TestReplyParts$", "."]
        code, output = run_go(argv, env=env)
    assert code == 0, f"go test -run TestReplyParts failed (exit {code}):\n{output}"
    for name in ("RawStreamIsInParts", "SessionJoinsThem", "BatchJoinsThem", "PackedBatchJoinsThem"):
        assert f"--- PASS: TestReplyParts/{name}" in output, f"{name} did not run:\n{output}"


def test_go_client_tls_mtls_and_tokens(tmp_path):
    """The Go client's TLSConfig / WithTLS / WithToken against a server with mutual TLS and tokens."""
    go = go_binary()
    with secure_server(tmp_path, "go") as (server, secure):
        env = dict(os.environ, PARSETIER_SERVER=server.target, **secure)
        argv = [go, "test", "-count=1", "-v", "-timeout", f"{TIMEOUT - 30}s", "-run", "^TestSecure$", "."]
        code, output = run_go(argv, env=env)
    assert code == 0, f"go test -run TestSecure failed (exit {code}):\n{output}"
    for name in ("MutualTLSAndToken", "MissingToken", "WrongToken", "NoClientCertificate", "TLSConfigErrors"):
        assert f"--- PASS: TestSecure/{name}" in output, f"{name} did not run:\n{output}"


def test_go_client_is_vetted_and_formatted():
    go = go_binary()
    code, output = run_go([go, "vet", "./..."])
    assert code == 0, f"go vet:\n{output}"
    goroot = subprocess.run([go, "env", "GOROOT"], capture_output=True, text=True, check=True).stdout.strip()
    code, output = run_go([str(Path(goroot) / "bin" / "gofmt"), "-l", "."])
    assert code == 0 and output == "", f"gofmt -l lists unformatted files:\n{output}"


# The protoc version grpcio-tools bundles is recorded in the header; the plugins' are pinned.
_PROTOC_LINE = re.compile(r"^// (\t|- )protoc\s+v\S+$", re.MULTILINE)


def test_go_generated_code_is_up_to_date(tmp_path):
    go_binary()
    env = dict(os.environ, PYTHON=sys.executable)
    code, output = run_go(["bash", str(GO_DIR / "generate.sh"), str(tmp_path)], env=env)
    assert code == 0, f"generate.sh failed:\n{output}"
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(GO_DIR) for p in (GO_DIR / "parsetierpb").rglob("*") if p.is_file())
    assert fresh == committed, "run client/go/generate.sh"
    stale = [
        str(name)
        for name in fresh
        if _PROTOC_LINE.sub("", (tmp_path / name).read_text(encoding="utf-8"))
        != _PROTOC_LINE.sub("", (GO_DIR / name).read_text(encoding="utf-8"))
    ]
    assert not stale, f"generated Go code is stale, run client/go/generate.sh: {stale}"
