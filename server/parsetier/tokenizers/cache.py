"""Converted tokenizers kept on disk, so a conversion (seconds for a large rank table) runs once.

Entries live under ``$PARSETIER_CACHE_DIR`` (default ``~/.cache/parsetier``) as ``tokenizer.json``
files whose names carry the converter version and the source file's size and mtime, so a new
package version or converter never reuses a stale file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

CONVERTER_VERSION = 2
"""Bump when a converter's output changes."""


def cache_dir() -> Path:
    """Where converted tokenizers are kept; ``$PARSETIER_CACHE_DIR`` overrides ``~/.cache/parsetier``."""
    env = os.environ.get("PARSETIER_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "parsetier"


def cached_conversion(name: str, source: Path, convert: Callable[[Path], Tokenizer]) -> Tokenizer:
    """Load a converted tokenizer from the disk cache, converting (and writing it) on a miss.

    Writes are atomic (temp file + rename), so concurrent workers at worst convert twice; a
    read-only home still converts, it just does not cache.
    """
    st = source.stat()
    tag = hashlib.sha256(f"{CONVERTER_VERSION}:{source}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
    path = cache_dir() / f"{name}-{tag[:16]}.tokenizer.json"
    if path.is_file():
        try:
            return Tokenizer.from_file(str(path))
        except Exception:  # a corrupt cache entry is rebuilt below
            pass
    tok = convert(source)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tok.save(str(tmp))
        os.replace(tmp, path)
    except OSError:
        pass
    return tok
