"""The container image's install, without a container builder: CI machines reach package registries
but no container registry, so no base image can be pulled and buildah/podman cannot build the
Dockerfile here. Instead this runs the Dockerfile's own install step (deploy/container/install.sh)
into a fresh venv, starts the server from that venv as the image's ENTRYPOINT would (on loopback),
and runs the image's HEALTHCHECK command against it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from grpc_servers import ROOT

pytestmark = pytest.mark.toolchain  # installs the package (a native-core build) the way the image does

DOCKERFILE = ROOT / "deploy" / "container" / "Dockerfile"
INSTALL = ROOT / "deploy" / "container" / "install.sh"


def _instruction(name: str) -> str:
    """One Dockerfile instruction's text, continuation lines joined."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    match = re.search(rf"^{name} (.*)$", text, re.MULTILINE)
    assert match, f"the Dockerfile has no {name}"
    return match.group(1)


def test_dockerfile_installs_with_the_script_and_drops_root():
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "RUN deploy/container/install.sh /opt/parsetier /src" in text
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2, "multi-stage build"
    assert re.search(r"^USER 10001:10001$", text, re.MULTILINE)
    assert "COPY --from=build /opt/parsetier /opt/parsetier" in text


def test_install_script_keeps_the_makefiles_no_deps_pins():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pins = set(re.search(r"^TEST_NO_DEPS := (.*)$", makefile, re.MULTILINE).group(1).split())
    script = re.search(r"^NO_DEPS=\((.*)\)$", INSTALL.read_text(encoding="utf-8"), re.MULTILINE)
    assert script and set(script.group(1).split()) == pins


def test_image_install_serves_every_model_and_passes_its_healthcheck(tmp_path):
    prefix = tmp_path / "opt-parsetier"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHON"] = sys.executable  # the interpreter of this run; the image uses its own python3
    done = subprocess.run(
        ["bash", str(INSTALL), str(prefix), str(ROOT)], env=env, capture_output=True, text=True, timeout=1500
    )
    assert done.returncode == 0, f"install.sh failed:\n{done.stdout}\n{done.stderr}"
    assert re.search(r"install\.sh: \d+ models load", done.stdout), done.stdout

    entrypoint = json.loads(_instruction("ENTRYPOINT"))
    assert entrypoint[:2] == ["parsetier", "serve"]
    argv = [str(prefix / "bin" / "parsetier"), *entrypoint[1:]]
    argv[argv.index("--host") + 1] = "127.0.0.1"  # tests stay on loopback; the image uses 0.0.0.0
    argv[argv.index("--port") + 1] = "0"
    argv[argv.index("--metrics-port") + 1] = "0"
    argv += ["--preload", "none"]
    server_env = dict(env, PARSETIER_CACHE_DIR=str(prefix / "cache"))
    output = {"stderr": subprocess.PIPE, "stdout": subprocess.DEVNULL, "text": True}
    server = subprocess.Popen(argv, env=server_env, **output)
    try:
        port = None
        assert server.stderr is not None
        deadline = time.monotonic() + 60
        for line in server.stderr:
            record = json.loads(line)
            if record.get("msg") == "listening":
                port = record["port"]
                assert record["models"], record
                break
            assert time.monotonic() < deadline
        assert port, "the server never listened"
        threading.Thread(target=server.stderr.read, daemon=True).start()  # never let the pipe fill
        healthcheck = json.loads(_instruction("HEALTHCHECK").split(" CMD ", 1)[1])
        healthcheck[healthcheck.index("--server") + 1] = f"127.0.0.1:{port}"
        healthcheck[0] = str(prefix / "bin" / healthcheck[0])
        check = subprocess.run(healthcheck, env=env, capture_output=True, text=True, timeout=60)
        assert check.returncode == 0 and check.stdout.strip() == "SERVING", check
        listing = subprocess.run(
            [str(prefix / "bin" / "python"), "-c", LIST_MODELS, f"127.0.0.1:{port}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listing.returncode == 0, listing.stderr
        models = json.loads(listing.stdout)
        # the presets whose vocabulary no package ships wait for a configured tokenizer
        unready = {name for name, ok in models.items() if not ok}
        assert models and unready == NEED_CONFIGURED_TOKENIZER, f"models without their tokenizer: {models}"
    finally:
        server.terminate()
        server.wait(60)


NEED_CONFIGURED_TOKENIZER = {"gemma-4", "kimi-k2", "kimi-k2.6", "kimi-k3", "llama4", "seed-oss"}
NEED_CONFIGURED_TOKENIZER |= {"nemotron-3", "step-3.5", "mimo", "ling-3", "hy3"}
NEED_CONFIGURED_TOKENIZER |= {
    "granite-4",
    "granite-3",
    "ernie-4.5-thinking",
    "command-a",
    "lfm2",
    "phi-4-mini",
    "olmo-3",
    "apertus",
}
NEED_CONFIGURED_TOKENIZER |= {"inkling", "muse-glimmer"}
NEED_CONFIGURED_TOKENIZER |= {"step-3", "internlm2", "intern-s1", "hunyuan-a13b", "hy-v4", "jamba"}
NEED_CONFIGURED_TOKENIZER |= {"gigachat-3", "gigachat-3.5", "minicpm-4", "minicpm-5", "laguna"}
NEED_CONFIGURED_TOKENIZER |= {"longcat-flash", "functiongemma", "granite-20b-fc", "kimi-vl-thinking"}
LIST_MODELS = """
import json, sys
from parsetier_client import Client
with Client(sys.argv[1], timeout=30) as client:
    print(json.dumps({m.name: m.tokenizer_available for m in client.list_models()}))
"""


def _serve_parser():
    import argparse

    from parsetier.cli import _serve_arguments

    parser = argparse.ArgumentParser()
    _serve_arguments(parser)
    return parser


def test_compose_runs_the_image_as_the_dockerfile_says():
    import yaml

    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "compose.yaml").read_text(encoding="utf-8"))
    backend, proxy = compose["services"]["parsetier"], compose["services"]["nginx"]
    assert backend["deploy"]["replicas"] == 3
    assert backend["build"]["dockerfile"] == "deploy/container/Dockerfile"
    entrypoint = json.loads(_instruction("ENTRYPOINT"))
    args = _serve_parser().parse_args([*entrypoint[2:], *backend["command"]])  # flags that exist
    stop_grace = int(backend["stop_grace_period"].rstrip("s"))
    assert stop_grace > args.grace, "compose would SIGKILL a drain within its grace"
    healthcheck = json.loads(_instruction("HEALTHCHECK").split(" CMD ", 1)[1])
    assert backend["healthcheck"]["test"] == ["CMD", *healthcheck]
    assert proxy["depends_on"]["parsetier"]["condition"] == "service_healthy"
    nginx = (ROOT / "deploy" / "compose" / "nginx.conf").read_text(encoding="utf-8")
    assert re.search(rf"server parsetier:{args.port} resolve", nginx)


def test_kubernetes_args_are_serve_flags():
    import yaml

    manifest = ROOT / "deploy" / "kubernetes" / "deployment.yaml"
    deployment = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    entrypoint = json.loads(_instruction("ENTRYPOINT"))
    args = _serve_parser().parse_args([*entrypoint[2:], *container["args"]])
    assert args.host == "0.0.0.0" and args.metrics_port == 9090
