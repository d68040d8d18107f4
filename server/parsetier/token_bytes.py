"""Token id → the raw bytes that token stands for: the tokenizer's byte vocabulary.

Logprobs need every token's bytes (OpenAI's ``bytes``), including the tokens that are only part of
a multi-byte character and decode alone as U+FFFD. ``tokenizer.decode`` cannot give those, so the
bytes are read from the vocabulary entry itself, by the rule of the tokenizer's decoder:

* byte-level BPE (GPT-2's ``bytes_to_unicode`` alphabet; Qwen, DeepSeek, gpt-oss, tekken, Llama 3):
  every character of the entry is one byte;
* SentencePiece-style byte fallback (``<0xAB>`` pieces, ``▁`` for a space; Mistral v1-v3, Llama 2):
  a ``<0xAB>`` piece is that byte, any other piece is its text with ``▁`` as a space;
* anything else (WordPiece, user tokenizers with other decoders): the UTF-8 of the token decoded
  alone, which is exact for every token that is whole characters.

Added tokens (markers, special tokens) are always their decoded text. Lookups are cached per id on
first use, so a model pays only for the ids its sessions actually meet.
"""

from __future__ import annotations

import codecs
import functools
import json
import re

import tokenizers

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")

PER_BYTE = "parsetier-per-byte"
"""UTF-8 error handling of byte-fallback decoders: one U+FFFD per byte that forms no character
(byte-level decoders, like Python's ``replace``, give one per broken sequence)."""
codecs.register_error(PER_BYTE, lambda e: ("\ufffd" * (e.end - e.start), e.end))


@functools.cache
def _unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's ``bytes_to_unicode``: printable stand-in character → byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in keep}
    kept = set(keep)
    extra = 0
    for b in range(256):
        if b not in kept:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def decoder_kinds(tokenizer: tokenizers.Tokenizer) -> set[str]:
    """The ``type`` of the tokenizer's decoder and of every decoder in its sequence.

    Read from the decoder's own serialized state (its pickling state, the same JSON as the
    ``decoder`` member of ``tokenizer.to_str()``), not from the whole tokenizer's JSON: that
    serializes and parses the vocabulary and merges, about half a second for a 150k vocabulary,
    and every model bind asks."""
    decoder = tokenizer.decoder
    spec = json.loads(decoder.__getstate__()) if decoder is not None else {}
    kinds: set[str] = set()
    stack = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "type" in node:
                kinds.add(str(node["type"]))
            stack.extend(node.get("decoders") or ())
    return kinds


def byte_fallback_ids(tokenizer: tokenizers.Tokenizer) -> frozenset[int]:
    """The ids a ``ByteFallback`` decoder reads as one byte each (``<0xAB>`` pieces that are not
    added tokens); empty when the decoder has no ``ByteFallback`` step. The decoder decides a run
    of them only as a whole (their UTF-8, or one U+FFFD per byte), so the scanner keeps such a run
    together (``detokenizer.ByteGroupScanner``)."""
    if "ByteFallback" not in decoder_kinds(tokenizer):
        return frozenset()
    added = tokenizer.get_added_tokens_decoder()
    return frozenset(
        tid
        for piece, tid in tokenizer.get_vocab(with_added_tokens=False).items()
        if tid not in added and _BYTE_PIECE.fullmatch(piece)
    )


class TokenBytes:
    """The byte vocabulary of one tokenizer. Thread-safe for readers (the cache only grows)."""

    __slots__ = ("_added", "_cache", "_rule", "_tokenizer", "alone")

    def __init__(self, tokenizer: tokenizers.Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._rule = ""  # decided on first use: models that never serve logprobs never pay for it
        self._added: frozenset[int] = frozenset()
        self._cache: dict[int, bytes] = {}
        self.alone: dict[int, tuple[str, bytes]] = {}
        """Per id met so far: (``text(id)``, bytes), read directly on the logprob hot path."""

    @property
    def rule(self) -> str:
        """How bytes are read: ``byte_level``, ``byte_fallback`` or ``decoded``."""
        if not self._rule:
            kinds = decoder_kinds(self._tokenizer)
            self._added = frozenset(self._tokenizer.get_added_tokens_decoder())
            if "ByteLevel" in kinds:
                self._rule = "byte_level"
            elif "ByteFallback" in kinds:
                self._rule = "byte_fallback"
            else:
                self._rule = "decoded"
        return self._rule

    @property
    def errors(self) -> str:
        """The ``codecs`` error handler that turns broken UTF-8 into U+FFFD as this decoder does."""
        return PER_BYTE if self.rule == "byte_fallback" else "replace"

    def __getitem__(self, token_id: int) -> bytes:
        data = self._cache.get(token_id)
        if data is None:
            data = self._cache[token_id] = self._read(token_id)
        return data

    def entry(self, token_id: int) -> tuple[str, bytes]:
        """(text, bytes): the text is what the token settles when no bytes are carried before
        it, its complete characters (trailing bytes of an unfinished one are not text yet; broken
        ones are U+FFFD)."""
        entry = self.alone.get(token_id)
        if entry is None:
            data = self[token_id]
            decoder = codecs.getincrementaldecoder("utf-8")(self.errors)
            entry = self.alone[token_id] = (decoder.decode(data), data)
        return entry

    def _read(self, token_id: int) -> bytes:
        tok = self._tokenizer
        rule = self.rule
        if token_id in self._added:
            return tok.decode([token_id], skip_special_tokens=False).encode("utf-8")
        piece = tok.id_to_token(token_id)
        if piece is None:
            return b""  # a gap in a sparse vocabulary; ids are range-checked before this
        if rule == "byte_level":
            table = _unicode_to_byte()
            out = bytearray()
            for ch in piece:
                b = table.get(ch)
                out += ch.encode("utf-8") if b is None else bytes((b,))
            return bytes(out)
        if rule == "byte_fallback":
            m = _BYTE_PIECE.fullmatch(piece)
            if m:
                return bytes((int(m.group(1), 16),))
            return piece.replace("▁", " ").encode("utf-8")
        return tok.decode([token_id], skip_special_tokens=False).encode("utf-8")
