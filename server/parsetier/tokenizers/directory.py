"""A user's tokenizer: a directory (or file) in one of the three forms models ship.

* HF form: ``tokenizer.json`` (read directly; no optional dependency);
* SentencePiece form: ``tokenizer.model`` (converted by ``transformers``);
* tiktoken form, as Kimi ships it: ``tiktoken.model`` plus ``tokenizer_config.json`` with the
  special tokens' ids (converted by ``transformers``).

``tokenizer.json`` wins when a directory holds several. Conversions are cached on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from parsetier.tokenizers import convert
from parsetier.tokenizers.cache import cached_conversion
from parsetier.tokenizers.errors import TokenizerUnavailable

FORMS = ("tokenizer.json", "tokenizer.model", "tiktoken.model")
"""The files a tokenizer directory may hold, in order of preference."""


def looks_like_path(source: str) -> bool:
    return "/" in source or source.startswith((".", "~")) or source.endswith((".json", ".model"))


def find(source: str) -> Path | None:
    """The vocabulary file a path source points at, or None if there is none."""
    path = Path(source).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        for name in FORMS:
            if (path / name).is_file():
                return path / name
    return None


def load_directory(source: str) -> Tokenizer:
    """The tokenizer of a path source (a directory, or one of its files)."""
    path = find(source)
    if path is None:
        raise TokenizerUnavailable(
            f"no tokenizer at {source!r}: expected a directory holding {', '.join(FORMS)} "
            "(tiktoken.model with its tokenizer_config.json), or one of those files"
        )
    if path.suffix == ".json":
        return Tokenizer.from_file(str(path))
    config = tokenizer_config(path.parent)
    if path.name == "tiktoken.model":
        if not config.get("added_tokens_decoder"):
            raise TokenizerUnavailable(
                f"{path}: a tiktoken vocabulary needs the tokenizer_config.json beside it "
                "(its added_tokens_decoder)"
            )
        return cached_conversion("tiktoken", path, lambda p: convert.tiktoken_to_tokenizer(p, config))
    return cached_conversion("sentencepiece", path, lambda p: convert.sentencepiece_to_tokenizer(p, config))


def tokenizer_config(directory: Path) -> dict[str, Any]:
    """The directory's ``tokenizer_config.json`` (``{}`` when there is none): the special tokens'
    ids of a tiktoken vocabulary, the chat template, the ``response_template``. Shared by
    everything that reads a model directory; an unreadable file is ``TokenizerUnavailable``."""
    file = directory / "tokenizer_config.json"
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerUnavailable(f"{file}: {exc}") from None
    return data if isinstance(data, dict) else {}
