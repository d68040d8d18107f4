"""The native core (``parsetier._core``) behind the reference engine's interfaces.

A model's tokenizer is read once into a ``_core.Vocabulary``: every id's vocabulary entry and the
tokenizer's decoder as a list of steps, so the core can decode without ``tokenizers`` (see
``parsetier_core/engine/src/detok.rs``). A decoder the core does not know (WordPiece, a regex
``Replace``, …) leaves the model on the reference engine (``NativeUnsupported``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import tokenizers

from parsetier.engine.grammar import BoundGrammar

try:
    from parsetier import _core
except ImportError:  # pragma: no cover - a source tree without `make native`
    _core = None  # type: ignore[assignment]


class NativeUnsupported(Exception):
    """Something the native core cannot serve (yet): the session falls back to the reference
    engine, and says why once per model."""


_STEP_KINDS = frozenset({"ByteLevel", "ByteFallback", "Fuse", "Replace", "Strip", "Metaspace"})


def decoder_steps(spec: dict[str, Any] | None) -> list[tuple[str, str, str, int, int]] | None:
    """The tokenizer's decoder (its JSON) as the core's steps, sequences flattened; None when the
    tokenizer has no decoder. Raises ``NativeUnsupported`` for a step the core lacks."""
    if spec is None:
        return None
    steps: list[tuple[str, str, str, int, int]] = []

    def add(node: dict[str, Any]) -> None:
        kind = str(node.get("type"))
        if kind == "Sequence":
            for child in node.get("decoders") or ():
                add(child)
            return
        if kind not in _STEP_KINDS:
            raise NativeUnsupported(f"decoder {kind}")
        if kind == "Replace":
            pattern = node.get("pattern") or {}
            if "String" not in pattern:
                raise NativeUnsupported("decoder Replace with a regex pattern")
            steps.append((kind, str(pattern["String"]), str(node.get("content", "")), 0, 0))
        elif kind == "Strip":
            start, stop = int(node.get("start", 0)), int(node.get("stop", 0))
            steps.append((kind, str(node["content"]), "", start, stop))
        elif kind == "Metaspace":
            scheme = node.get("prepend_scheme")
            if scheme is None:
                raise NativeUnsupported("decoder Metaspace without prepend_scheme")
            steps.append((kind, str(node.get("replacement", "▁")), "", int(scheme != "never"), 0))
        else:
            steps.append((kind, "", "", 0, 0))

    add(spec)
    return steps


def vocabulary(tokenizer: tokenizers.Tokenizer, id_space: int) -> Any:
    """The tokenizer as the core decodes it: ``id_to_token`` of every id below ``id_space``."""
    if _core is None:
        raise NativeUnsupported("the native core is not built (make native)")
    decoder = tokenizer.decoder
    steps = decoder_steps(None if decoder is None else json.loads(decoder.__getstate__()))
    tokens: list[str | None] = [None] * id_space
    for text, tid in tokenizer.get_vocab(with_added_tokens=False).items():
        if tid < id_space:
            tokens[tid] = text
    added = tokenizer.get_added_tokens_decoder()
    for tid, tok in added.items():
        if tid < id_space:
            tokens[tid] = tok.content
    try:
        return _core.Vocabulary(tokens, steps, sorted(added))
    except ValueError as exc:
        raise NativeUnsupported(str(exc)) from None


_lock = threading.Lock()
_vocabularies: dict[int, tuple[tokenizers.Tokenizer, Any]] = {}
_detokenizers: dict[tuple[int, int], tuple[BoundGrammar, Any]] = {}


def detokenizer(tokenizer: tokenizers.Tokenizer, grammar: BoundGrammar) -> Any:
    """The ``_core.Detokenizer`` of a tokenizer bound to a grammar, built once and shared by every
    session (the objects are kept alive with it, so the ids used as keys stay theirs)."""
    key = (id(tokenizer), id(grammar))
    found = _detokenizers.get(key)
    if found is not None:
        return found[1]
    with _lock:
        vocab = _vocabularies.get(id(tokenizer))
        if vocab is None:
            vocab = (tokenizer, vocabulary(tokenizer, grammar.vocab_size))
            _vocabularies[id(tokenizer)] = vocab
        marks = [(tid, text, sentinel) for tid, (text, sentinel) in grammar.mark_of_id.items()]
        made = _core.Detokenizer(vocab[1], marks)
        _detokenizers[key] = (grammar, made)
        return made
