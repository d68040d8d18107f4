"""The ids that end a model's output: the tokenizer's EOS and generation_config.json's list.

A stack that stops on EOS does not always say so: it may send a ``Finish`` with neither a finish
reason nor a stop id. The session then needs to know which ids are stop tokens, from the files a
Hugging Face model directory carries next to its tokenizer:

* ``generation_config.json``: ``eos_token_id``, one id or a list (what ``generate`` stops on);
* ``tokenizer_config.json``: ``eos_token``, a string or ``{"content": ...}``, looked up by id;

plus the ids a preset or a ``[[models]]`` entry lists itself (``eos_token_ids``), for vocabularies
shipped without those files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tokenizers


def _read(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def eos_token_ids(
    tokenizer: tokenizers.Tokenizer, folder: Path | None, configured: Iterable[int] = ()
) -> frozenset[int]:
    """The model's stop ids: ``configured`` plus what the files in ``folder`` name."""
    ids = set(configured)
    if folder is not None:
        generation = _read(folder / "generation_config.json").get("eos_token_id")
        if isinstance(generation, int):
            ids.add(generation)
        elif isinstance(generation, list):
            ids.update(i for i in generation if isinstance(i, int))
        token = _read(folder / "tokenizer_config.json").get("eos_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            tid = tokenizer.token_to_id(token)
            if tid is not None:
                ids.add(tid)
    return frozenset(ids)
