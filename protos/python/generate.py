"""Generate the Python protobuf/gRPC code from ``protos/`` into ``protos/python/parsetier_api``.

One command (``make proto``) and one place for generated code, beside the contract: the server and
the Python client both import it, and neither reaches into the other's folder. The proto files live under
``protos/parsetier/v1`` (the include root other languages use), but the Python modules must not be
importable as ``parsetier.v1`` — that name belongs to the server package — so the directory is
mapped to the virtual path ``parsetier_api/v1`` and protoc writes ``parsetier_api/v1/*_pb2.py``
with imports to match. ``tests/test_proto_generated.py`` runs this script into a temporary
directory and compares, so stale generated code fails CI.

Usage: ``python protos/python/generate.py [--out DIR]`` (default: ``protos/python``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "protos" / "parsetier" / "v1"
DEFAULT_OUT = ROOT / "protos" / "python"
PACKAGE = "parsetier_api"
VIRTUAL_DIR = f"{PACKAGE}/v1"
INIT_TEXT = '"""Generated from protos/ by `make proto` (protos/python/generate.py). Do not edit."""\n'


def generate(out: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) over every proto file; return the files written."""
    from grpc_tools import protoc  # test/dev dependency only

    out.mkdir(parents=True, exist_ok=True)
    protos = sorted(PROTO_DIR.glob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")  # well-known types
    args = [
        "grpc_tools.protoc",
        f"-I{VIRTUAL_DIR}={PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(f"{VIRTUAL_DIR}/{p.name}" for p in protos),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for package_dir in (out / PACKAGE, out / VIRTUAL_DIR):
        init = package_dir / "__init__.py"
        init.write_text(INIT_TEXT, encoding="utf-8")
    for path in sorted((out / PACKAGE).rglob("*")):
        if path.is_file():
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path.relative_to(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
