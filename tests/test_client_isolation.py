"""The client package stands alone: importing it (and its command, parsetier-client) never loads
the server; nor does the server's command load the client."""

from __future__ import annotations

import json
import subprocess
import sys

from grpc_servers import ROOT


def _loaded_after(roots: list[str], code: str, package: str) -> list[str]:
    """The modules of ``package`` that a fresh, isolated interpreter has loaded after running
    ``code`` with only ``roots`` (and the venv) on its path."""
    script = (
        f"import sys, json; sys.path[:0] = {roots!r}\n"
        # an editable install finds every package in its own checkout: only ``roots`` may serve
        "sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in str(f.__module__)]\n"
        f"{code}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == {package!r})))"
    )
    done = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_client_imports_without_the_server():
    code = "import parsetier_client, parsetier_client.cli"
    assert (
        _loaded_after([str(ROOT / "client" / "python"), str(ROOT / "protos" / "python")], code, "parsetier")
        == []
    )


def test_server_command_never_loads_the_client():
    """The other way round: the server's ``parsetier`` command (its parser and every serve module)
    does not import ``parsetier_client``; the client's tools are ``parsetier-client``'s."""
    roots = [str(ROOT / "server"), str(ROOT / "client" / "python"), str(ROOT / "protos" / "python")]
    code = (
        "import parsetier.cli, parsetier.service.server\n"
        "try:\n    parsetier.cli.main(['serve', '--help'])\nexcept SystemExit:\n    pass"
    )
    assert _loaded_after(roots, code, "parsetier_client") == []


def test_the_server_needs_nothing_from_the_client_folder():
    """The server's generated stubs and argument types live beside the contract (``protos/python``),
    where the client imports them too: the server runs with ``client/`` absent."""
    roots = [str(ROOT / "server"), str(ROOT / "protos" / "python")]
    code = "import parsetier.cli, parsetier.service.server, parsetier.service.servicer"
    loaded = _loaded_after(roots, code, "parsetier_api")
    assert "parsetier_api.v1.parsetier_pb2" in loaded


def test_server_command_has_no_client_subcommands():
    from test_cli import parsetier

    done = parsetier("replay", "--server", "127.0.0.1:1", "--model", "qwen3")
    assert done.returncode == 2 and "invalid choice: 'replay'" in done.stderr, done.stderr
