"""The committed generated code matches the proto, and the proto stays a documented public API."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpc_servers import ROOT, subprocess_env

GENERATED = ROOT / "protos" / "python" / "parsetier_api"
PROTO = ROOT / "protos" / "parsetier" / "v1" / "parsetier.proto"

# Lines that record the generator's version, not the contract: a newer grpcio-tools may change them.
_VERSION_LINES = re.compile(
    r"^(# Protobuf Python Version: .*|GRPC_GENERATED_VERSION = .*|\s+\d+,)$"
    r"|_runtime_version\.Domain\.PUBLIC,",
    re.MULTILINE,
)


def _normalized(path: Path) -> str:
    return _VERSION_LINES.sub("", path.read_text(encoding="utf-8"))


def test_generated_code_is_up_to_date(tmp_path):
    import grpc_tools  # noqa: F401  (protos/python/generate.py runs it: a missing grpcio-tools fails here, by name)

    subprocess.run(
        [sys.executable, str(ROOT / "protos" / "python" / "generate.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        env=subprocess_env(),
    )
    fresh = {p.relative_to(tmp_path): p for p in (tmp_path / "parsetier_api").rglob("*") if p.is_file()}
    committed = {
        p.relative_to(GENERATED.parent): p
        for p in GENERATED.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert sorted(fresh) == sorted(committed), "run `make proto`"
    stale = [str(name) for name, path in fresh.items() if _normalized(path) != _normalized(committed[name])]
    assert not stale, f"generated code is stale, run `make proto`: {stale}"


@pytest.mark.parametrize("crate", ["client/rust", "server/parsetier_core/python"])
def test_the_rust_crates_carry_the_same_proto(crate: str):
    """client/rust and the native core compile the contract from their own folder (so a packaged
    crate builds outside the repository): each of its protos is a relative link to the one in
    protos/, never a copy that could drift (`cargo package` packs the file; tests/test_rust_client.py
    builds that)."""
    rust = ROOT / crate / "proto" / "parsetier" / "v1"
    ours = sorted(p.name for p in PROTO.parent.glob("*.proto"))
    assert sorted(p.name for p in rust.glob("*.proto")) == ours
    for name in ours:
        link = rust / name
        assert link.is_symlink() and not Path(os.readlink(link)).is_absolute(), f"{link}: no relative link"
        assert link.resolve() == (PROTO.parent / name).resolve(), f"{link} points elsewhere"


def test_every_field_enum_value_and_message_is_documented():
    """A comment line directly above every declaration: the proto is the public API's reference."""
    lines = PROTO.read_text(encoding="utf-8").splitlines()
    declaration = re.compile(
        r"^\s*(message|enum|service|rpc|oneof)\s+\w+"
        r"|^\s*(optional\s+|repeated\s+)?[\w.<>, ]+\s+\w+\s*=\s*\d+"
        r"|^\s*[A-Z][A-Z0-9_]*\s*=\s*\d+"
    )
    undocumented = []
    for number, line in enumerate(lines):
        if not declaration.match(line) or line.strip().startswith("//") or "syntax" in line:
            continue
        above = lines[number - 1].strip()
        if not above.startswith("//"):
            undocumented.append(f"{number + 1}: {line.strip()}")
    assert not undocumented, "undocumented declarations:\n" + "\n".join(undocumented)


def test_language_options_name_the_packages_the_clients_build():
    """go_package is the Go client's module path (protoc-gen-go needs no flags); the other
    languages' options give every generator a namespace of the package's version."""
    from parsetier_api.v1 import parsetier_pb2 as pb

    options = pb.DESCRIPTOR.GetOptions()
    module = re.search(r"^module (\S+)$", (ROOT / "client" / "go" / "go.mod").read_text(), re.MULTILINE)
    assert module, "client/go/go.mod names no module"
    assert options.go_package == f"{module.group(1)}/parsetierpb;parsetierpb"
    assert (ROOT / "client" / "go" / "parsetierpb" / "parsetier.pb.go").is_file()
    assert options.java_package.endswith(".v1") and options.java_multiple_files
    assert options.csharp_namespace.endswith(".V1") and options.cc_enable_arenas
    assert pb.DESCRIPTOR.package == "parsetier.v1"
