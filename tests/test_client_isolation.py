"""The client package stands alone: importing it (and its command, parsetier-client) never loads
the server; nor does the server's command load the client."""

from __future__ import annotations

import subprocess
import sys

from grpc_servers import ROOT


def test_client_imports_without_the_server():
    client_root = str(ROOT / "client" / "python")
    code = (
        f"import sys; sys.path.insert(0, {client_root!r}); "
        "import parsetier_client, parsetier_client.cli; "
        "loaded = sorted(m for m in sys.modules if m == 'parsetier' or m.startswith('parsetier.')); "
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_server_command_never_loads_the_client():
    """The other way round: the server's ``parsetier`` command (its parser and every serve module)
    does not import ``parsetier_client``; the client's tools are ``parsetier-client``'s."""
    roots = [str(ROOT / "server"), str(ROOT / "client" / "python")]
    code = (
        f"import sys; sys.path[:0] = {roots!r}; "
        "import parsetier.cli, parsetier.service.server; "
        "from parsetier.cli import main\n"
        "try:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'parsetier_client'); "
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_server_command_has_no_client_subcommands():
    from test_cli import parsetier

    done = parsetier("replay", "--server", "127.0.0.1:1", "--model", "qwen3")
    assert done.returncode == 2 and "invalid choice: 'replay'" in done.stderr, done.stderr
