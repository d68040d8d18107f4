"""Format registries: every model family is a TOML grammar file, looked up by name.

Built-in formats are the ``*.toml`` files beside this module, read once per process. A
``FormatRegistry`` is one server's set: the built-ins plus the user's format files
(``parsetier serve --config``, ``format_files``), read by the very same loader. Each model registry
owns one; nothing is global and mutable. The schema is documented in ``docs/formats.md``.
"""

from __future__ import annotations

import functools
import logging
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parsetier.engine.grammar import Grammar, GrammarError, grammar_from_dict

_BUILTIN_DIR = Path(__file__).parent
_log = logging.getLogger("parsetier.formats")


class UnknownFormat(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown format"


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GrammarError(f"{path}: {exc}") from None


def extended(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A format file's data with ``extends = "<built-in>"`` resolved.

    Families that speak a built-in format with other defaults (Step-3.5's template always opens
    the reasoning; MiMo writes parameter values without wrapping newlines) say only what differs:
    top-level keys replace the base's, ``[terminals]`` and ``[states]`` entries replace the base's
    entries of the same name (a state is replaced whole), and ``[[presets]]`` are the file's own.
    """
    base_name = data.get("extends")
    if base_name is None:
        return dict(data)
    base_file = _BUILTIN_DIR / f"{base_name}.toml"
    if not isinstance(base_name, str) or not base_file.is_file():
        raise GrammarError(f"{source}: extends names no built-in format: {base_name!r}")
    base = _read(base_file)
    if "extends" in base:
        raise GrammarError(f"{source}: extends {base_name!r}, which extends another format")
    out = {k: v for k, v in base.items() if k != "presets"}
    for key, value in data.items():
        if key in ("terminals", "states"):
            out[key] = {**base.get(key, {}), **value}
        elif key != "extends":
            out[key] = value
    out["presets"] = list(data.get("presets", ()))
    return out


def load_file(path: str | Path) -> Grammar:
    """Read and validate one format file (resolving ``extends``)."""
    path = Path(path)
    return grammar_from_dict(extended(_read(path), str(path)), source=str(path))


@functools.cache
def builtins() -> Mapping[str, Grammar]:
    """The built-in formats by name (each file's name is its format's name)."""
    out: dict[str, Grammar] = {}
    for file in sorted(_BUILTIN_DIR.glob("*.toml")):
        grammar = load_file(file)
        if grammar.name != file.stem:
            raise GrammarError(f"{file}: name {grammar.name!r} must equal the file name {file.stem!r}")
        out[grammar.name] = grammar
    return out


class FormatRegistry:
    """One server's formats: the built-ins, plus user format files added at start-up."""

    def __init__(self) -> None:
        self._formats: dict[str, Grammar] = dict(builtins())

    def add_file(self, path: str | Path, override: bool = False) -> Grammar:
        """Add a user format file. A name already taken (a built-in, or an earlier file) is an error
        unless ``override`` says replacing it is meant; the replacement is then logged."""
        grammar = load_file(path)
        if grammar.name in self._formats:
            if not override:
                raise GrammarError(
                    f"{path}: format name {grammar.name!r} is already taken (a built-in or an earlier "
                    "file); rename it, or list the file under override_format_files to replace it"
                )
            _log.warning("format %r replaced by %s", grammar.name, path)
        self._formats[grammar.name] = grammar
        return grammar

    def get(self, name: str) -> Grammar:
        try:
            return self._formats[name]
        except KeyError:
            raise UnknownFormat(f"unknown format {name!r}; known: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return sorted(self._formats)
