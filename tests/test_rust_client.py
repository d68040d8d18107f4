"""The Rust client (client/rust) against the real server: the contract is language-neutral.

`cargo test -- --include-ignored` runs the crate's unit tests and its live tests
(`client/rust/tests/live`, ignored by a plain `cargo test`, which has no server) with
PARSETIER_SERVER pointing at a `parsetier serve` subprocess on loopback; the modules that need a
server of their own (mutual TLS and tokens, a small reply limit, a server that reads nothing)
are run by their own tests below, each with its server. Cargo is required, not optional:
without it these tests fail saying so. The build cache is `client/rust/target` (gitignored; CI
may keep it between runs): the first build compiles tonic and takes minutes on two cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from commands import run_bounded
from fleet_outputs import TOOLS
from grpc_servers import ROOT, ProcessServer
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from test_fleet_resume import SESSIONS, STEP_PAUSE, Fleet3, outputs, reference, three_backends, wire
from tls_support import secure_server

pytestmark = pytest.mark.toolchain  # builds the Rust client (cargo)

RUST_DIR = ROOT / "client" / "rust"
RUST_REQUEST = "rust-client-test"  # the request id of the live tests' run_session sessions
TIMEOUT = 900  # seconds, per cargo command; the first build compiles tonic and rustls


def cargo_binary() -> str:
    """The `cargo` command; its absence fails the test (not a skip: CI must run these)."""
    path = shutil.which("cargo") or shutil.which(str(Path.home() / ".cargo" / "bin" / "cargo"))
    if path is None:
        message = "the Rust toolchain (`cargo`) is not on PATH nor in ~/.cargo/bin; install it with rustup"
        pytest.fail(message, pytrace=False)
    return path


def cargo_env(**extra: str) -> dict[str, str]:
    """The environment of a cargo command: the crate's own target directory, two jobs at most."""
    env = dict(os.environ, CARGO_TARGET_DIR=str(RUST_DIR / "target"), CARGO_BUILD_JOBS="2", **extra)
    env["PATH"] = os.pathsep.join([str(Path.home() / ".cargo" / "bin"), env.get("PATH", "")])
    return env


def run_cargo(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a cargo command with a time bound (``run_bounded``)."""
    return run_bounded([cargo_binary(), *args], TIMEOUT, RUST_DIR, env or cargo_env())


def passed(output: str) -> set[str]:
    """The names of the tests cargo reports as passed (`test path::name ... ok`)."""
    lines = re.finditer(r"^test (\S+) \.\.\. ok$", output, re.MULTILINE)
    return {m.group(1).rsplit("::", 1)[-1] for m in lines}


def cargo_test(env: dict[str, str], *filters: str) -> str:
    """`cargo test --locked` of every target (unit, live and doc tests) with test filters, the
    live tests included (`--include-ignored`: they are ignored without a server)."""
    code, output = run_cargo(["test", "--locked", "-j", "2", "--", "--include-ignored", *filters], env)
    assert code == 0, f"cargo test failed (exit {code}):\n{output}"
    return output


def test_rust_client_against_real_server():
    with ProcessServer("--preload", "qwen3") as server:
        env = cargo_env(PARSETIER_SERVER=server.target)
        output = cargo_test(env, "--skip", "secure::", "--skip", "parts::", "--skip", "backpressure::")
        logs = list(server.logs)
        ends = [r for r in logs if r.get("msg") == "session_end" and r.get("request_id") == RUST_REQUEST]
    for name in (
        "list_models_has_qwen3",
        "session_one_token_per_message",
        "session_several_steps_per_message",
        "parse_stream_equals_parse_once",
        "deltas_stream",
        "errors_carry_the_status",
        "options_reach_the_server",
        "build_constraint",
        "completion_sessions",
        "builder_needs_credentials",
        "keepalive_defaults_within_server_policy",
        "dropping_a_session_cancels_it",
        "wire_bytes_to_forward",
        "unreachable_open_spends_the_budget_and_addresses_are_used_in_order",
        "batch_many_sessions_one_token_per_step",
        "batch_packed_and_unpacked_entries_in_one_step",
        "batch_session_errors",
        "batch_empty_key_ends_the_stream",
        "logprob_steps_resolve_and_the_wire_carries_them",
        "completion_logprobs_in_the_wire",
        "bad_logprobs_are_invalid_argument",
        "rune_offsets_count_code_points",
        "logprob_step_flattens_alternatives_id_major",
        "history_merges_id_runs_and_pending_messages_are_resent",
        "a_sequence_gap_is_an_error",
        "replay_reopens_every_live_session_in_one_message",
        "a_gap_is_an_error",
        "packs_the_usual_entries_and_leaves_the_rest",
        "malformed_replies_are_errors",
        "multiplexed_sessions_get_their_parse_streams_replies",
        "multiplexed_session_errors_stay_in_their_session",
        "render_then_parse_with_its_open",
        "render_anthropic_messages",
        "render_choices_and_constraint",
        "render_errors_carry_the_dialects_error_body",
        "wire_join_orders_two_choices_of_a_batch",
        "wire_join_ends_with_a_failed_choices_error",
        "one_choice_passes_through",
        "streamed_choices_start_in_index_order",
        "a_failed_choice_ends_the_response",
        "bodies_join_in_index_order",
    ):
        assert name in passed(output), f"{name} did not pass:\n{output}"
    # The sessions were the Rust client's, on this server, and ended OK (its run_session sessions:
    # 4 per run of the two session tests, twice).
    assert ends and all(r["outcome"] == "OK" and r["finish_reason"] == "tool_calls" for r in ends), ends


def test_rust_client_joins_a_reply_sent_in_parts():
    """Replies past a small --max-reply-bytes come in parts; the Rust session and batch join them."""
    limit = 256 * 1024
    with ProcessServer("--preload", "qwen3", "--max-reply-bytes", str(limit)) as server:
        env = cargo_env(PARSETIER_PARTS_SERVER=server.target, PARSETIER_PARTS_LIMIT=str(limit))
        output = cargo_test(env, "parts::")
    for name in ("parts_raw_stream_is_in_parts", "parts_session_joins_them", "parts_batch_joins_them"):
        assert name in passed(output), f"{name} did not pass:\n{output}"


class StalledParser(pb_grpc.ParserServiceServicer):
    """Accepts a `Parse` stream (its response headers go out) and then reads nothing."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def Parse(self, request_iterator, context):
        context.send_initial_metadata(())
        self.release.wait(60)
        return iter(())


def test_rust_client_sends_wait_when_the_server_reads_nothing():
    """A session's sends are bounded (`ClientBuilder::send_capacity`): against a server that reads
    nothing they stop completing, where an unbounded channel accepted every one."""
    servicer = StalledParser()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_ParserServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        output = cargo_test(cargo_env(PARSETIER_STALLED_SERVER=f"127.0.0.1:{port}"), "backpressure::")
    finally:
        servicer.release.set()
        server.stop(0)
    assert "sends_wait_when_the_server_reads_nothing" in passed(output), output


def test_rust_client_tls_mtls_and_tokens(tmp_path):
    """Tls::from_files / ClientBuilder::tls / token against a server with mutual TLS and tokens."""
    with secure_server(tmp_path, "rust") as (_, secure):
        env = cargo_env(**secure)
        output = cargo_test(env, "secure::")
    for name in (
        "secure_mutual_tls_and_token",
        "secure_missing_or_wrong_token_is_unauthenticated",
        "secure_no_client_certificate_is_refused",
        "secure_tls_file_errors",
    ):
        assert name in passed(output), f"{name} did not pass:\n{output}"


def test_rust_client_is_a_crate_of_its_own_that_needs_no_protoc():
    """`cargo package` builds the crate from its packaged files alone (outside the repository:
    its proto is inside it), with any protoc made unusable (`PROTOC` points nowhere: protox
    compiles the proto); and its `rust-version` is no older than any locked dependency's."""
    code, output = run_cargo(
        ["package", "--locked", "--allow-dirty", "-j", "2"], cargo_env(PROTOC="/nonexistent/protoc")
    )
    assert code == 0, f"cargo package:\n{output}"
    code, listing = run_cargo(["package", "--list", "--allow-dirty"])
    assert code == 0 and "proto/parsetier/v1/parsetier.proto" in listing.split(), listing
    code, text = run_cargo(["metadata", "--format-version", "1", "--locked"])
    assert code == 0, text
    metadata = json.loads(text[text.index("{") :])
    packages = {package["id"]: package for package in metadata["packages"]}
    crate = packages[metadata["resolve"]["root"]]

    def version(package: dict) -> tuple[int, ...]:
        return tuple(int(part) for part in (package.get("rust_version") or "0").split("."))

    needed = max(
        (version(packages[node["id"]]), packages[node["id"]]["name"])
        for node in metadata["resolve"]["nodes"]
        if node["id"] != crate["id"]
    )
    assert version(crate)[:2] >= needed[0][:2], f"rust-version {crate['rust_version']} < {needed}"


def test_rust_client_is_linted_and_formatted():
    """`cargo clippy --all-targets -- -D warnings` and `cargo fmt --check` are clean."""
    code, output = run_cargo(["clippy", "--locked", "-j", "2", "--all-targets", "--", "-D", "warnings"])
    assert code == 0, f"cargo clippy:\n{output}"
    code, output = run_cargo(["fmt", "--check"])
    assert code == 0, f"cargo fmt --check lists unformatted code:\n{output}"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet3]:
    """Three backends behind the deploy nginx config, as tests/test_fleet_resume.py runs them."""
    with three_backends(tmp_path) as running:
        yield running


def test_rust_client_resumes_behind_nginx_when_a_backend_is_sigkilled(fleet: Fleet3):
    """200 sessions through the Rust client (`examples/fleetcheck.rs`) behind the deploy nginx
    config, one of the three backends SIGKILLed once 40% of the steps are out: every session
    completes with the replies of an uninterrupted run on one server (no gap, no repeat, no
    lost or doubled delta), byte for byte but for client_messages (it counts the stream's own
    messages)."""
    outs = outputs()
    total = sum(len(o.ids) for o in outs)
    want = asyncio.run(reference(fleet.backends[1].target, outs))
    code, output = run_cargo(["build", "--locked", "-j", "2", "--example", "fleetcheck"])
    assert code == 0, output
    plan = [fleet.nginx.target, json.dumps(TOOLS), str(int(STEP_PAUSE * 1000))]
    for i, o in enumerate(outs):
        prompt, ids = ",".join(map(str, o.prompt_ids)), ",".join(map(str, o.ids))
        plan.append(f"{o.model}\tfleet-{i}\t{prompt}\t{ids}")
    binary = RUST_DIR / "target" / "debug" / "examples" / "fleetcheck"
    proc = subprocess.Popen(
        [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    results: dict[int, tuple[int, list[pb.ParseResponse]]] = {}
    errors: dict[int, str] = {}
    killed = False
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n".join(plan) + "\n")
        proc.stdin.close()
        for line in proc.stdout:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "sent" and not killed and int(rest) >= 0.4 * total:
                fleet.backends[0].kill()
                killed = True
            elif kind == "result":
                index, resumes, replies = [*rest.split(" "), ""][:3]
                decoded = [pb.ParseResponse.FromString(bytes.fromhex(r)) for r in replies.split(",") if r]
                results[int(index)] = (int(resumes), decoded)
            elif kind == "error":
                index, _, message = rest.partition(" ")
                errors[int(index)] = message
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed and not errors, errors
    for i, expected in enumerate(want):
        assert wire(results[i][1], drop_client_messages=True) == expected, (
            f"session {i} differs from its uninterrupted run"
        )
    moved = sum(resumes > 0 for resumes, _ in results.values())
    print(f"\nRust client SIGKILL behind nginx: {SESSIONS} sessions x 1 kill; {moved} resumed; all identical")
    assert moved >= SESSIONS // 6, moved
