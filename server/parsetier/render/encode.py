"""Rendered text to token ids, and the cache that makes a conversation's next turn cost its new part.

``encode`` is exactly ``tokenizer.encode(text, add_special_tokens=False)`` (what
``apply_chat_template(tokenize=True)`` does: the template writes BOS itself). A conversation's next
turn re-renders its whole history, so a long conversation would be tokenized again and again;
``PrefixCache`` keeps the ids of rendered prefixes and tokenizes only the text after the longest
cached one.

Where a prefix may be cut: right before a *boundary token*, a special added token (the template's
own markers, ``<|im_start|>``) that the tokenizer splits out before anything else, whose match takes
no whitespace on its right (``rstrip`` off) and whose text no other added token contains (so no
longer match can span the cut). The tokenizer splits added tokens first and runs its normalizer
and pre-tokenizer on each piece between them on its own, so the ids of ``prefix + rest`` are the
prefix's ids followed by the ids of ``rest``, ``rest`` starting with the boundary token. The cut is
where the boundary token's own id starts in the ids (found by its offset), so it is never inside
a token. Entries are keyed by a digest of the prefix text and the tokenizer; outputs are
identical with and without the cache (tested).
"""

from __future__ import annotations

import hashlib
import re
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import tokenizers

KEEP_PER_TEXT = 2
"""Boundaries cached per rendered text: the last ones, where the next turn's text departs."""
MIN_CACHED_CHARS = 2048
"""Prefixes shorter than this are not worth an entry."""


@dataclass(frozen=True)
class Boundaries:
    """A tokenizer's boundary tokens and a pattern that finds them."""

    pattern: re.Pattern[str] | None
    ids: dict[str, int]


def boundaries(tokenizer: tokenizers.Tokenizer) -> Boundaries:
    """The tokenizer's boundary tokens (see the module's docstring)."""
    added = tokenizer.get_added_tokens_decoder()
    texts = [t.content for t in added.values() if t.content]
    safe: dict[str, int] = {}
    for token_id, token in added.items():
        text = token.content
        if not token.special or token.rstrip or token.lstrip or token.single_word or not text:
            continue
        if token.normalized:
            continue  # matched after normalisation: its text in the input may differ
        if any(text in other and other != text for other in texts):
            continue
        safe[text] = token_id
    if not safe:
        return Boundaries(None, {})
    alternatives = sorted(safe, key=len, reverse=True)
    return Boundaries(re.compile("|".join(re.escape(t) for t in alternatives)), safe)


def encode(tokenizer: tokenizers.Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


class PrefixCache:
    """Ids of rendered prefixes, bounded by the number of ids held (least recently used go first)."""

    def __init__(self, max_ids: int = 4_000_000) -> None:
        self.max_ids = max_ids
        self._entries: OrderedDict[bytes, array] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _get(self, key: bytes) -> array | None:
        with self._lock:
            ids = self._entries.get(key)
            if ids is not None:
                self._entries.move_to_end(key)
            return ids

    def _put(self, key: bytes, ids: array) -> None:
        if len(ids) > self.max_ids:
            return
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = ids
            self._held += len(ids)
            while self._held > self.max_ids:
                _, dropped = self._entries.popitem(last=False)
                self._held -= len(dropped)

    def encode(self, tokenizer: tokenizers.Tokenizer, bounds: Boundaries, salt: str, text: str) -> list[int]:
        """``encode(tokenizer, text)``, reusing and refreshing cached prefixes."""
        if bounds.pattern is None or len(text) < MIN_CACHED_CHARS:
            return encode(tokenizer, text)
        cuts = [m.start() for m in bounds.pattern.finditer(text) if m.start() >= MIN_CACHED_CHARS]
        if not cuts:
            return encode(tokenizer, text)
        digest = hashlib.blake2b(salt.encode("utf-8", "surrogatepass"), digest_size=20)
        keys: list[bytes] = []
        done = 0
        for cut in cuts:
            digest.update(text[done:cut].encode("utf-8", "surrogatepass"))
            done = cut
            keys.append(digest.copy().digest())
        start, prefix = 0, array("I")
        for cut, key in zip(reversed(cuts), reversed(keys), strict=True):
            found = self._get(key)
            if found is not None:
                start, prefix = cut, found
                break
        if start:
            self.hits += 1
        else:
            self.misses += 1
        encoding = tokenizer.encode(text[start:], add_special_tokens=False)
        ids = prefix.tolist() + encoding.ids
        self._remember(encoding, start, len(prefix), cuts, keys, ids)
        return ids

    def _remember(
        self, encoding: Any, start: int, held: int, cuts: list[int], keys: list[bytes], ids: list[int]
    ) -> None:
        """Cache the last few boundaries of this text (those past ``start``)."""
        later = [(c, k) for c, k in zip(cuts, keys, strict=True) if c > start][-KEEP_PER_TEXT:]
        if not later:
            return
        offsets = encoding.offsets
        for cut, key in later:
            index = bisect_left(offsets, cut - start, key=lambda o: o[0])
            if index < len(offsets) and offsets[index][0] == cut - start:
                self._put(key, array("I", ids[: held + index]))
