"""The layout mirrors the architecture: the reference engine is laid out like the native crate
(the twin table in ``parsetier/engine/__init__.py`` holds for both trees), and the server's
modules import one another without a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import parsetier.engine
from grpc_servers import ROOT

SERVER = ROOT / "server"
ENGINE = SERVER / "parsetier" / "engine"
CRATE = SERVER / "parsetier_core" / "engine" / "src"

_ROW = re.compile(r"^(\S+\.rs)\s+(\S+)\s")


def _twins() -> dict[str, str]:
    """The docstring's table: Rust path → Python path (``-``: Rust only)."""
    doc = parsetier.engine.__doc__ or ""
    return {m[1]: m[2] for line in doc.splitlines() if (m := _ROW.match(line))}


def test_every_crate_file_has_its_row_and_every_row_names_real_files():
    twins = _twins()
    crate = sorted(str(p.relative_to(CRATE)) for p in CRATE.rglob("*.rs"))
    assert sorted(twins) == crate
    for rust, python in twins.items():
        if python != "-":
            assert (ENGINE / python).is_file(), (rust, python)


def test_a_twin_keeps_its_rust_path_unless_the_table_says_why():
    """Same relative path, ``.py`` for ``.rs``, except the rows the table explains (a package's
    face, a longer name)."""
    moved = {
        rust: python
        for rust, python in _twins().items()
        if python != "-" and python != rust.removesuffix(".rs") + ".py"
    }
    assert moved == {
        "lib.rs": "__init__.py",
        "detok.rs": "detokenizer.py",
        "readers/mod.rs": "readers/__init__.py",
        "grammar.rs": "grammar/__init__.py",
        "wire/mod.rs": "wire/__init__.py",
    }


def _module(path: Path) -> str:
    parts = list(path.relative_to(SERVER).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports, anywhere in it (a function's import counts: it makes
    the same cycle, only later)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in modules else node.module)
    return found & modules


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself
    (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_server_has_no_import_cycle():
    files = {_module(p): p for p in (SERVER / "parsetier").rglob("*.py")}
    graph = {name: _imports(path, set(files)) - {name} for name, path in files.items()}
    assert len(graph) > 100
    assert _cycles(graph) == []


def test_the_engine_imports_nothing_above_it():
    """The reference engine, like the crate, needs no registry, protocol or service: besides its
    own modules only the session's values and the leaves under it."""
    files = {_module(p): p for p in (SERVER / "parsetier").rglob("*.py")}
    leaves = {
        "parsetier.messages",
        "parsetier.status",
        "parsetier.logprobs",
        "parsetier.token_bytes",
        "parsetier.core_module",
    }
    outside = {
        (name, dep)
        for name, path in files.items()
        if name.startswith("parsetier.engine")
        for dep in _imports(path, set(files))
        if not dep.startswith("parsetier.engine") and dep not in leaves
    }
    assert outside == set()


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_engine_crate_has_no_module_cycle():
    """The same for the native crate, by its top-level modules (a folder is one module): a file
    reaching ``crate::x`` depends on ``x``."""
    reach = re.compile(r"\bcrate::(\w+)")
    graph: dict[str, set[str]] = {}
    for path in CRATE.rglob("*.rs"):
        module = path.relative_to(CRATE).parts[0].removesuffix(".rs")
        if module == "lib":
            continue
        graph.setdefault(module, set()).update(reach.findall(path.read_text()))
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    assert {"machine", "readers", "grammar", "wire"} <= set(graph)
    assert _cycles(graph) == []


def test_every_status_is_chosen_through_the_one_mapping():
    """A refusal is a ``StatusError`` whose code ``service/errors.py`` maps to gRPC's; no other
    module names a gRPC status to send (the ones ``handlers`` and ``tracing`` read off a finished
    call are observed, not chosen), and the message of a server bug is written once."""
    from parsetier.status import INTERNAL_MESSAGE

    observed = {"OK", "UNKNOWN", "CANCELLED"}
    chosen: list[str] = []
    for path in (SERVER / "parsetier").rglob("*.py"):
        where = str(path.relative_to(SERVER))
        if where in ("parsetier/status.py", "parsetier/service/errors.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "StatusCode"
                and node.attr not in observed
            ):
                chosen.append(f"{where}:{node.lineno} StatusCode.{node.attr}")
            if isinstance(node, ast.Constant) and node.value == INTERNAL_MESSAGE:
                chosen.append(f"{where}:{node.lineno} the INTERNAL message")
            if _aborts(node) and not (where == "parsetier/service/servicer.py" and _sends_mapped(node)):
                chosen.append(f"{where}:{node.lineno} abort")
    assert chosen == []


def _aborts(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "abort"


def _sends_mapped(node: ast.AST) -> bool:
    """The servicer's ``_end`` sends ``status[0]``: a status ``_failure`` took from the mapping."""
    assert isinstance(node, ast.Call)
    return isinstance(node.args[0], ast.Subscript)
