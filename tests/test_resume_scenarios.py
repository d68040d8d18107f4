"""Every client runs the whole resume scenario corpus (tests/resume_scenarios/, format in its
README.md): real backends on loopback (the client's target lists them, or the deploy nginx config
in front), a driver per client fed one script, the backends killed, stopped, drained or restarted
at the script's pauses, and every reply compared with the uninterrupted run of the same script
(client_messages aside: it counts the stream's own messages).

A driver is a command that speaks the corpus protocol; ``DRIVERS`` lists them (a new client adds
its entry). The uninterrupted run is the Python sync driver's, with resume off, on a backend of
its own: so every client is also held to the Python one, output for output.

The figures (resumes per run) are printed; pytest shows them with ``-s``.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import resume_corpus as corpus
from grpc_servers import ROOT, ProcessServer, subprocess_env, wait_for
from test_cpp_client import BUILD_DIR, BUILD_TIMEOUT, SOURCE_DIR, require_toolchain
from test_cpp_client import run as run_cpp
from test_fleet_nginx import Nginx, free_port, nginx_binary
from test_fleet_resume import backend, ready
from test_go_client import go_binary, run_go

RUN_TIMEOUT = 180.0
"""Seconds one driver run may take before it is killed (the test then fails)."""

PYTHON_DRIVER = corpus.CORPUS / "python_driver.py"
STAND_IN = corpus.CORPUS / "stand_in.py"


def rust_driver() -> list[str]:
    """The Rust client's driver (client/rust/examples/resume_driver.rs), built once per run."""
    from test_rust_client import RUST_DIR, run_cargo

    binary = RUST_DIR / "target" / "debug" / "examples" / "resume_driver"
    if not getattr(rust_driver, "built", False):
        code, output = run_cargo(["build", "--locked", "-j", "2", "--example", "resume_driver"])
        assert code == 0, f"building the Rust driver failed:\n{output}"
        rust_driver.built = True  # type: ignore[attr-defined]
    return [str(binary)]


@functools.cache
def go_driver() -> list[str]:
    """The Go client's driver (client/go/internal/resumedriver), built once into build/go."""
    binary = ROOT / "build" / "go" / "resumedriver"
    code, output = run_go([go_binary(), "build", "-o", str(binary), "./internal/resumedriver"])
    assert code == 0, f"go build of the resume driver failed:\n{output}"
    return [str(binary)]


@functools.cache
def cpp_driver() -> list[str]:
    """The C++ client's driver (client/cpp/tests/resume_driver.cc), built into build/cpp."""
    require_toolchain()
    code, output = run_cpp(["cmake", "-S", str(SOURCE_DIR), "-B", str(BUILD_DIR)], BUILD_TIMEOUT)
    assert code == 0, f"cmake configure failed:\n{output}"
    code, output = run_cpp(
        ["cmake", "--build", str(BUILD_DIR), "-j2", "--target", "parsetier_resume_driver"], BUILD_TIMEOUT
    )
    assert code == 0, f"C++ build of the resume driver failed:\n{output}"
    return [str(BUILD_DIR / "parsetier_resume_driver")]


DRIVERS: dict[str, Callable[[], list[str]]] = {
    "python-sync": lambda: [sys.executable, str(PYTHON_DRIVER), "sync"],
    "python-async": lambda: [sys.executable, str(PYTHON_DRIVER), "async"],
    "go": go_driver,
    "cpp": cpp_driver,
    "rust": rust_driver,
}
"""Driver name -> the command that runs it (built first if it needs building)."""


class Fleet:
    """A scenario's backends (fixed ports, so a restart comes back where the client or nginx
    looks), with nginx in front when the scenario says ``"via": "nginx"``."""

    def __init__(self, scenario: dict, workdir: Path) -> None:
        self.ports = [free_port() for _ in range(scenario.get("backends", 2))]
        self.backends = [ready(backend(port)) for port in self.ports]
        self.stand_in: tuple[int, subprocess.Popen] | None = None
        if "stand_in" in scenario:
            self.stand_in = start_stand_in(scenario["stand_in"])
        self.nginx: Nginx | None = None
        if scenario.get("via") == "nginx":
            nginx_binary()
            self.nginx = Nginx(workdir, [f"127.0.0.1:{p}" for p in self.ports]).start()

    @property
    def target(self) -> str:
        if self.nginx is not None:
            return self.nginx.target
        first = [self.stand_in[0]] if self.stand_in else []
        return "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in first + self.ports)

    def act(self, action: dict) -> None:
        """One harness action at a pause (README.md, "Harness actions")."""
        do = action["do"]
        if do == "sleep":
            time.sleep(action["seconds"])
            return
        index = action["backend"]
        server = self.backends[index]
        assert server.proc is not None
        if do == "kill":
            server.kill()
        elif do == "stop":
            os.kill(server.proc.pid, signal.SIGSTOP)
        elif do == "term":
            server.terminate()
        elif do == "wait_exit":
            assert server.wait(30) == action.get("code", 0), server.logs[-5:]
        elif do == "restart":
            server.kill()
            self.backends[index] = ready(backend(self.ports[index]))
        elif do == "wait_log":
            match = action["match"]
            wait_for(lambda: any(all(r.get(k) == v for k, v in match.items()) for r in list(server.logs)), 30)
        else:
            raise ValueError(f"unknown harness action {do!r}")

    def close(self) -> None:
        if self.stand_in is not None:
            self.stand_in[1].kill()
            self.stand_in[1].wait()
        if self.nginx is not None:
            self.nginx.stop()
        for server in self.backends:
            server.kill()


def start_stand_in(spec: dict) -> tuple[int, subprocess.Popen]:
    """The scenario's stand-in backend (``stand_in.py``), first in the target: its port and process."""
    port = free_port()
    command = [sys.executable, str(STAND_IN), "--port", str(port), "--code", spec["code"]]
    command += ["--message", spec.get("message", ""), "--calls", str(spec.get("calls", 1))]
    for key, value in spec.get("trailers", {}).items():
        command += ["--trailer", f"{key}={value}"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=subprocess_env())
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return port, proc


def drive(command: list[str], script: dict, at_pause: Callable[[str], None]) -> dict:
    """Run a driver on ``script``: at each ``{"paused": name}`` line call ``at_pause(name)``,
    then tell it to go on; its result."""
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    watchdog = threading.Timer(RUN_TIMEOUT, proc.kill)
    watchdog.start()
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    result = None
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(script) + "\n")
        proc.stdin.flush()
        for line in proc.stdout:
            message = json.loads(line)
            if "paused" in message:
                at_pause(message["paused"])
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif "result" in message:
                result = message["result"]
        code = proc.wait(RUN_TIMEOUT)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    assert code == 0 and result is not None, f"driver exited {code}:\n{''.join(stderr)[-4000:]}"
    return result


@pytest.fixture(scope="module")
def reference_backend() -> Iterator[ProcessServer]:
    server = ready(backend(free_port()))
    try:
        yield server
    finally:
        server.kill()


_REFERENCE: dict[str, dict] = {}


def reference(name: str, scenario: dict, server: ProcessServer) -> dict:
    """The scenario's uninterrupted run: the Python sync driver, resume off, nothing done at the
    pauses."""
    if name not in _REFERENCE:
        script = corpus.script(scenario, server.target, resume=False)
        _REFERENCE[name] = drive(DRIVERS["python-sync"](), script, lambda _: None)
    return _REFERENCE[name]


TOOLCHAIN_DRIVERS = {"go", "rust"}
"""Drivers built with their language's toolchain first (``toolchain``-marked runs)."""


def _marked(values: list[str], toolchain: Callable[[str], bool]) -> list:
    return [pytest.param(v, marks=pytest.mark.toolchain) if toolchain(v) else v for v in values]


def _run(
    name: str, driver: str, command: list[str], reference_backend: ProcessServer, tmp_path: Path
) -> None:
    """Scenario ``name`` through the driver ``command`` against its fleet, the pauses' actions done
    as the driver reaches them, judged against the uninterrupted reference."""
    scenario = corpus.load(name)
    want = reference(name, scenario, reference_backend)
    fleet = Fleet(scenario, tmp_path)
    try:
        script = corpus.script(scenario, fleet.target, nginx=fleet.nginx is not None)

        def at_pause(pause: str) -> None:
            for action in scenario.get("at", {}).get(pause, []):
                fleet.act(action)

        got = drive(command, script, at_pause)
    finally:
        fleet.close()
    corpus.judge(scenario, got, want)
    print(f"\n{name} ({driver}): resumes {corpus.resumes(got)}")


@pytest.mark.slow
@pytest.mark.parametrize("driver", _marked(sorted(DRIVERS), lambda d: d in TOOLCHAIN_DRIVERS))
@pytest.mark.parametrize("name", _marked(corpus.names(), lambda n: corpus.load(n).get("via") == "nginx"))
def test_scenario(name: str, driver: str, reference_backend: ProcessServer, tmp_path: Path):
    _run(name, driver, DRIVERS[driver](), reference_backend, tmp_path)


MULTIPLEXED_DRIVERS: dict[str, Callable[[], list[str]]] = {
    "python-sync-mux": lambda: [sys.executable, str(PYTHON_DRIVER), "sync-mux"],
    "python-async-mux": lambda: [sys.executable, str(PYTHON_DRIVER), "async-mux"],
    "go-mux": lambda: [*go_driver(), "multiplex"],
    "rust-mux": lambda: [*rust_driver(), "multiplex"],
    "cpp-mux": lambda: [*cpp_driver(), "multiplex"],
}
"""The clients' multiplexed mode (sessions on one shared ParseBatch stream, the session API
unchanged): the scenarios of ``Parse`` sessions, whose replies must equal the ``Parse`` streams'."""


@pytest.mark.slow
@pytest.mark.parametrize("driver", _marked(sorted(MULTIPLEXED_DRIVERS), lambda d: not d.startswith("python")))
@pytest.mark.parametrize(
    "name",
    _marked(
        [n for n in corpus.names() if corpus.load(n).get("api") == "parse"],
        lambda n: corpus.load(n).get("via") == "nginx",
    ),
)
def test_scenario_multiplexed(name: str, driver: str, reference_backend: ProcessServer, tmp_path: Path):
    """A ``Parse`` scenario through multiplexed sessions: every session's replies are its
    uninterrupted ``Parse`` stream's (the reference), and it resumes across the same breaks."""
    _run(name, driver, MULTIPLEXED_DRIVERS[driver](), reference_backend, tmp_path)
