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

from parsetier.engine.grammar import Grammar, GrammarError, grammar_from_dict

_BUILTIN_DIR = Path(__file__).parent
_log = logging.getLogger("parsetier.formats")


class UnknownFormat(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown format"


def load_file(path: str | Path) -> Grammar:
    """Read and validate one format file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GrammarError(f"{path}: {exc}") from None
    return grammar_from_dict(data, source=str(path))


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
