"""The format registry: every model family is a TOML grammar file, looked up by name.

Built-in formats are the ``*.toml`` files beside this module; users add their own with
``parsetier serve --config`` (``format_files``), through the very same loader. The schema is
documented in ``docs/formats.md``.
"""

from __future__ import annotations

import threading
import tomllib
from pathlib import Path

from parsetier.engine.grammar import Grammar, GrammarError, grammar_from_dict

_BUILTIN_DIR = Path(__file__).parent
_registry: dict[str, Grammar] = {}
_lock = threading.Lock()
_builtins_loaded = False


class UnknownFormat(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown format"


def load_file(path: str | Path) -> Grammar:
    """Read and validate one format file (no registration)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GrammarError(f"{path}: {exc}") from None
    return grammar_from_dict(data, source=str(path))


def register(grammar: Grammar) -> Grammar:
    with _lock:
        _registry[grammar.name] = grammar
    return grammar


def register_file(path: str | Path) -> Grammar:
    _load_builtins()
    return register(load_file(path))


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    with _lock:
        if _builtins_loaded:
            return
        for file in sorted(_BUILTIN_DIR.glob("*.toml")):
            grammar = load_file(file)
            if grammar.name != file.stem:
                raise GrammarError(f"{file}: name {grammar.name!r} must equal the file name {file.stem!r}")
            _registry.setdefault(grammar.name, grammar)
        _builtins_loaded = True


def get(name: str) -> Grammar:
    _load_builtins()
    try:
        return _registry[name]
    except KeyError:
        raise UnknownFormat(f"unknown format {name!r}; known: {', '.join(names())}") from None


def names() -> list[str]:
    _load_builtins()
    return sorted(_registry)
