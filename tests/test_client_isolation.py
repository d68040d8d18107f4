"""The client package stands alone: importing it (and the replay CLI) never loads the server."""

from __future__ import annotations

import subprocess
import sys

from grpc_servers import ROOT


def test_client_imports_without_the_server():
    client_root = str(ROOT / "client" / "python")
    code = (
        f"import sys; sys.path.insert(0, {client_root!r}); "
        "import parsetier_client, parsetier_client.replay; "
        "loaded = sorted(m for m in sys.modules if m == 'parsetier' or m.startswith('parsetier.')); "
        "assert not loaded, loaded"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
