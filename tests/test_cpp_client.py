"""The C++ client (client/cpp) built with CMake on the system's gRPC and run against a real server.

The library, its GoogleTest suite and the example program are built into build/cpp (kept between
runs, so only the first build is slow), then `ctest` runs them with PARSETIER_SERVER pointing at a
`parsetier serve` subprocess on loopback. The toolchain (cmake, a C++17 compiler, libgrpc++-dev,
protobuf-compiler-grpc, libgtest-dev) is required, not optional: `make deps` (.ci/setup) installs
it on Debian, and without it these tests fail saying what is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from commands import run_bounded
from grpc_servers import ROOT, ProcessServer
from tls_support import secure_server

pytestmark = pytest.mark.toolchain  # builds the C++ client (CMake)

SOURCE_DIR = ROOT / "client" / "cpp"
BUILD_DIR = ROOT / "build" / "cpp"
BUILD_TIMEOUT = 1200  # seconds; a first build on two busy cores takes a few minutes
TEST_TIMEOUT = 300
TOOLS = ("cmake", "c++", "protoc", "grpc_cpp_plugin")
APT_PACKAGES = "cmake g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libgtest-dev"


def require_toolchain() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"the C++ client tests need {', '.join(missing)} on PATH; on Debian/Ubuntu: "
            f"apt-get install {APT_PACKAGES} (`make deps` does this)",
            pytrace=False,
        )


def run(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a command from the checkout with a time bound (``run_bounded``)."""
    return run_bounded(argv, timeout, ROOT, env)


@pytest.fixture(scope="module")
def cpp_build() -> None:
    require_toolchain()
    code, output = run(["cmake", "-S", str(SOURCE_DIR), "-B", str(BUILD_DIR)], BUILD_TIMEOUT)
    assert code == 0, f"cmake configure failed:\n{output}"
    code, output = run(["cmake", "--build", str(BUILD_DIR), "-j2"], BUILD_TIMEOUT)
    assert code == 0, f"C++ build failed:\n{output}"


def session_ends(server: ProcessServer, request_id: str, count: int) -> list[dict]:
    """The server's session_end lines for ``request_id`` or ``request_id-<n>``."""
    deadline = time.monotonic() + 10
    while True:
        ends = [
            r
            for r in list(server.logs)
            if r.get("msg") == "session_end"
            and (r.get("request_id") == request_id or str(r.get("request_id")).startswith(request_id + "-"))
        ]
        if len(ends) >= count or time.monotonic() > deadline:
            return ends
        time.sleep(0.05)


@contextmanager
def loaded_servers(count: int) -> Iterator[list[ProcessServer]]:
    """``count`` servers with qwen3 loaded and a 20 s drain grace, started at once; killed after."""
    servers = [ProcessServer("--preload", "qwen3", "--grace", "20") for _ in range(count)]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_for_log("models loaded", 120)
        yield servers
    finally:
        for server in servers:
            server.kill()


def test_cpp_client_against_real_server(cpp_build):
    with ProcessServer("--preload", "qwen3") as server:
        env = dict(os.environ, PARSETIER_SERVER=server.target)
        code, output = run(
            ["ctest", "--test-dir", str(BUILD_DIR), "--output-on-failure", "-j2", "--timeout", "120"],
            TEST_TIMEOUT,
            env=env,
        )
        assert code == 0, f"ctest failed (exit {code}):\n{output}"
        for name in (
            "LiveServer.ListModelsHasQwen3",
            "LiveServer.SessionOneTokenPerMessage",
            "LiveServer.SessionSeveralStepsPerMessage",
            "LiveServer.ParseStreamEqualsParseOnce",
            "LiveServer.WireBytesToForward",
            "LiveServer.SeveralChoicesUsageCountsEveryChoice",
            "LiveServer.Options",
            "LiveServer.BuildConstraint",
            "LiveServer.LogprobStepsResolve",
            "LiveServer.CompletionLogprobsInTheWire",
            "BatchLive.ManySessionsOneTokenPerStep",
            "BatchLive.SessionErrors",
            "BatchLive.PackedAndUnpackedEntriesInOneStep",
            "BatchLive.EmptyKeyEndsTheStream",
            "MuxLive.SessionsGetTheirParseStreamsReplies",
            "MuxLive.WireDialectsGiveTheParseStreamsBytes",
            "MuxLive.ErrorsStayInTheirSession",
            "MuxLive.CancelDeadlineAndCallbacks",
            "LiveServer.Callbacks",
            "LiveServer.ConcurrentSessions",
            "LiveServer.CancelAndDestroyMidway",
            "LiveServer.ErrorCodes",
            "LiveServer.ErrorNamesTheBadId",
            "LiveServer.KeepaliveDefaultsWithinServerPolicy",
            "RenderLive.ThenParseWithItsOpen",
            "RenderLive.AnthropicMessages",
            "RenderLive.ChoicesAndConstraint",
            "RenderLive.ErrorsCarryTheDialectsErrorBody",
            "ClientOptions.CredentialsAreRequired",
            "WireJoin.OneChoicePassesThrough",
            "WireJoin.StreamedChoicesStartInIndexOrder",
            "WireJoin.AFailedChoiceEndsTheResponse",
            "WireJoin.BodiesJoinInIndexOrder",
            "WireJoinLive.TwoChoicesOfABatch",
            "WireJoinLive.AFailedParseSessionEndsTheResponse",
            "parsetier_stream_example",
        ):
            passed = re.search(rf"Test +#\d+: {re.escape(name)} \.* +Passed", output)
            assert passed, f"{name} did not run and pass:\n{output}"
        assert "100% tests passed" in output, output
        # The sessions were the C++ client's, on this server, and ended as the server saw them.
        sequential = session_ends(server, "cpp-client-test", 5)
        concurrent = session_ends(server, "cpp-concurrent", 8)
        example = session_ends(server, "cpp-example", 1)
        # MuxLive: each session ran once on its own Parse stream and, with the same request id,
        # as an entry of a multiplexed client's shared ParseBatch stream (6 + 6 + 3 x 2).
        mux_ends = session_ends(server, "cpp-mux", 34)
    mux = [r for r in mux_ends if re.fullmatch(r"cpp-mux-\d+", r["request_id"])]
    by_rpc = {rpc: [r for r in mux if r["rpc"] == rpc] for rpc in ("Parse", "ParseBatch")}
    assert (len(by_rpc["Parse"]), len(by_rpc["ParseBatch"])) == (12, 18), mux
    assert all(r["outcome"] == "OK" and r["finish_reason"] == "tool_calls" for r in mux), mux
    for ends, count in ((sequential, 5), (concurrent, 8), (example, 1)):
        assert len(ends) == count, f"expected {count} session_end lines: {ends}"
        assert all(r["outcome"] == "OK" and r["finish_reason"] == "tool_calls" for r in ends), ends


def test_cpp_client_tls_mtls_and_tokens(cpp_build, tmp_path):
    """TlsCredentialsFromFiles and bearer_token against a server with mutual TLS and tokens."""
    with secure_server(tmp_path, "cpp") as (_, secure):
        env = dict(os.environ, **secure)
        code, output = run([str(BUILD_DIR / "parsetier_secure_test")], TEST_TIMEOUT, env=env)
    assert code == 0, f"parsetier_secure_test failed (exit {code}):\n{output}"
    for name in (
        "MutualTLSAndToken",
        "MissingToken",
        "WrongToken",
        "NoClientCertificate",
        "PlaintextToATLSServer",
        "CredentialFileErrors",
    ):
        assert f"[       OK ] Secure.{name}" in output, f"{name} did not pass:\n{output}"


def test_cpp_client_resumes_on_another_server(cpp_build):
    """parsetier_resume_test: 8 resuming sessions (pull and push, 1-3 steps per message) on a server
    that is SIGKILLed mid-stream, then 8 on one that is SIGTERMed (it hands them off), complete on
    the spare with every reply equal to an uninterrupted run there; a session with resume off fails
    with UNAVAILABLE on the kill and gets the drain's grace."""
    with loaded_servers(3) as (killed, drained, spare):
        env = dict(
            os.environ,
            PARSETIER_RESUME_SPARE=spare.target,
            PARSETIER_RESUME_KILL=f"{killed.proc.pid}@{killed.target}",
            PARSETIER_RESUME_DRAIN=f"{drained.proc.pid}@{drained.target}",
        )
        argv = [str(BUILD_DIR / "parsetier_resume_test"), "--gtest_filter=-Resume.SigkillBehindNginx"]
        code, output = run(argv, TEST_TIMEOUT, env=env)
        assert code == 0, f"parsetier_resume_test failed (exit {code}):\n{output}"
        print(output)  # the sessions and resumes per case, for `pytest -s`
        for name in ("SigkillMidStream", "SigtermHandsOff", "UnreachableOpenSpendsTheBudget"):
            assert f"[       OK ] Resume.{name}" in output, f"{name} did not pass:\n{output}"
        assert killed.wait(10) == -signal.SIGKILL
        assert drained.wait(30) == 0, drained.logs[-5:]
        stopped = next(r for r in drained.logs if r.get("msg") == "stopped")
        # Handed off: the resuming sessions, at once between two messages, busy ones at their next read.
        assert stopped["handed_off"] >= 4, stopped
        moved = session_ends(spare, "cpp-resume-kill", 16)
        assert sum(r["outcome"] == "OK" for r in moved) >= 16, moved


def test_cpp_batch_resumes_on_another_server(cpp_build):
    """parsetier_batch_resume_test: 60 sessions on 2 resuming batch streams whose server is
    SIGKILLed at 40% of the steps, then on one that is SIGTERMed (it hands them off), complete on
    the spare with every step's reply equal to an uninterrupted run there; with resume off the kill
    surfaces as UNAVAILABLE and the drain gives the grace; pipelined steps full of edge cases
    (finish, cancel, a key reopened, no session, a bad id, an empty step) unanswered at a kill
    resume exactly; an open refused by a draining server on an idle stream moves the stream."""
    with loaded_servers(5) as (killed, drained, edge, refusing, spare):
        env = dict(
            os.environ,
            PARSETIER_BATCH_RESUME_SPARE=spare.target,
            PARSETIER_BATCH_RESUME_KILL=f"{killed.proc.pid}@{killed.target}",
            PARSETIER_BATCH_RESUME_DRAIN=f"{drained.proc.pid}@{drained.target}",
            PARSETIER_BATCH_RESUME_EDGE=f"{edge.proc.pid}@{edge.target}",
            PARSETIER_BATCH_RESUME_REFUSE=f"{refusing.proc.pid}@{refusing.target}",
        )
        argv = [str(BUILD_DIR / "parsetier_batch_resume_test"), "--gtest_filter=-*BehindNginx"]
        code, output = run(argv, TEST_TIMEOUT, env=env)
        print(output)  # the signals and resumes per stream, for `pytest -s`
        assert code == 0, f"parsetier_batch_resume_test failed (exit {code}):\n{output}"
        for name in (
            "SigkillMidRun",
            "SigtermHandsOff",
            "PipelinedEdgeCasesResumeExactly",
            "UnreachableSpendsTheBudget",
            "RefusedOpenMovesTheStream",
        ):
            assert f"[       OK ] BatchResume.{name}" in output, f"{name} did not pass:\n{output}"
        assert killed.wait(10) == -signal.SIGKILL
        assert edge.wait(10) == -signal.SIGKILL
        assert drained.wait(30) == 0, drained.logs[-5:]
        stopped = next(r for r in drained.logs if r.get("msg") == "stopped")
        # The resuming streams were handed off (the resume-off one got the grace instead).
        assert stopped["handed_off"] >= 1 and stopped["clean"] is True, stopped
        # The idle stream's open was refused as draining (then opened on the spare).
        assert refusing.wait(30) == 0, refusing.logs[-5:]
        refused = session_ends(refusing, "cpp-refused-second", 1)
        assert refused and all(r["outcome"] == "UNAVAILABLE" for r in refused), refused


def test_cpp_client_joins_a_reply_sent_in_parts(cpp_build):
    """Replies past a small --max-reply-bytes come in parts; the C++ Session and Batch join them."""
    limit = 256 * 1024
    with ProcessServer("--preload", "qwen3", "--max-reply-bytes", str(limit)) as server:
        env = dict(os.environ, PARSETIER_PARTS_SERVER=server.target, PARSETIER_PARTS_LIMIT=str(limit))
        code, output = run([str(BUILD_DIR / "parsetier_parts_test")], TEST_TIMEOUT, env=env)
    assert code == 0, f"parsetier_parts_test failed (exit {code}):\n{output}"
    for name in ("RawStreamIsInParts", "SessionJoinsThem", "BatchJoinsThem"):
        assert f"[       OK ] Parts.{name}" in output, f"{name} did not pass:\n{output}"


@pytest.mark.parametrize(
    ("program", "case", "env_prefix"),
    [
        ("parsetier_resume_test", "Resume.SigkillBehindNginx", "PARSETIER_RESUME_"),
        ("parsetier_batch_resume_test", "BatchResume.SigkillBehindNginx", "PARSETIER_BATCH_RESUME_"),
    ],
    ids=["sessions", "batch"],
)
def test_cpp_client_resumes_behind_nginx(cpp_build, tmp_path, program, case, env_prefix):
    """Two backends behind the deploy nginx config, one SIGKILLed mid-stream: Resume.SigkillBehindNginx
    (8 Parse sessions) and BatchResume.SigkillBehindNginx (60 sessions on 4 batch streams) resume
    through nginx on the other, every reply as an uninterrupted run there gives it."""
    from test_fleet_nginx import Nginx

    with loaded_servers(2) as backends:
        killed, other = backends
        nginx = Nginx(tmp_path, [server.target for server in backends]).start()
        env = dict(os.environ)
        env[env_prefix + "SPARE"] = other.target
        env[env_prefix + "PROXY"] = nginx.target
        env[env_prefix + "PROXIED_KILL"] = f"{killed.proc.pid}@{killed.target}"
        try:
            code, output = run([str(BUILD_DIR / program), f"--gtest_filter={case}"], TEST_TIMEOUT, env=env)
        finally:
            nginx.stop()
        print(output)
        assert code == 0, f"{program} behind nginx failed (exit {code}):\n{output}"
        assert f"[       OK ] {case}" in output, output
        assert killed.wait(10) == -signal.SIGKILL
