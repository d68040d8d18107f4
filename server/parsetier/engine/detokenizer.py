"""Token ids → text in sentinel form: the incremental detokenizer and the token-id scanner.

``tokenizers``' ``DecodeStream`` (``skip_special_tokens=False``) turns one id at a time into text,
holding back bytes of an incomplete UTF-8 character until a later token completes it. On top of
that the scanner classifies ids: an added token that a format terminal uses becomes that
terminal's sentinel code point, placed after any text the stream was still holding (so a marker
never overtakes the text before it); special tokens the format does not use are dropped; every
other id is plain text. Work per id is constant: nothing is ever re-decoded. A run of plain ids
(no marker among them) is decoded in one ``DecodeStream`` step (``run``), which gives the same text
as stepping them one by one, for a fraction of the cost.

A ``ByteFallback`` decoder (SentencePiece ``<0xAB>`` pieces) decides a run of byte tokens only as
a whole: their UTF-8, or one U+FFFD per byte when they are no UTF-8. Stepped one id at a time, the
stream would settle the valid prefix of such a run first, so the text would depend on how the ids
were grouped. For those vocabularies the scanner is a ``ByteGroupScanner``: it holds a run of byte
ids and steps it together with the next other id (or with the flush's probe), so every step ends
on a non-byte id and the decoder always sees whole groups, whatever the split.
"""

from __future__ import annotations

from collections.abc import Sequence

import tokenizers
from tokenizers.decoders import DecodeStream

from parsetier.engine.grammar import BoundGrammar
from parsetier.engine.lexer import TerminalSet

PROMPT_CONTEXT = 8
"""Prompt tail ids that seed the decoder, so the first output token decodes as it would in context
(SentencePiece-style decoders treat a leading space at the very start differently)."""

PROBE = "a"
"""The token ``TokenScanner.flush`` steps the decoder with to settle what it holds; its text is
removed again."""


class TokenScanner:
    """One request's detokenizer: ``piece(id)`` → the text that id settles (sentinel form).
    Made for a byte-fallback vocabulary (``BoundGrammar.byte_ids``), it is a ``ByteGroupScanner``,
    so other vocabularies pay nothing for byte groups."""

    __slots__ = ("_marks", "_stream", "_tokenizer")

    def __new__(
        cls, tokenizer: tokenizers.Tokenizer, bound: BoundGrammar, prompt_ids: Sequence[int] = ()
    ) -> TokenScanner:
        if cls is TokenScanner and bound.byte_ids:
            cls = ByteGroupScanner
        return object.__new__(cls)

    def __init__(
        self, tokenizer: tokenizers.Tokenizer, bound: BoundGrammar, prompt_ids: Sequence[int] = ()
    ) -> None:
        self._tokenizer = tokenizer
        self._marks = bound.mark_of_id
        tail = [i for i in prompt_ids[-PROMPT_CONTEXT:] if i not in bound.token_text]
        self._stream = DecodeStream(ids=tail or None, skip_special_tokens=False)

    def run(self, token_ids: list[int]) -> str:
        """The text plain ids settle (none of them in ``BoundGrammar.marker_ids``), in one step."""
        try:
            return self._stream.step(self._tokenizer, token_ids) or ""
        except Exception:  # tokenizers raises a bare Exception
            return self._restart(token_ids)

    def piece(self, token_id: int) -> str:
        try:
            text = self._stream.step(self._tokenizer, token_id) or ""
        except Exception:
            text = self._restart(token_id)
        mark = self._marks.get(token_id)  # (``ByteGroupScanner.piece`` does the same)
        if mark is None:
            return text
        marker, sentinel = mark
        if text.endswith(marker):
            text = text[: -len(marker)]
        return text + sentinel

    def flush(self) -> str:
        """At the end of the output, the text the stream still holds: bytes of a character no
        later id completed (shown as ``U+FFFD``, as a decode of invalid UTF-8 shows them) and,
        after a run (``run``), the whole characters stepped with them, since ``DecodeStream``
        answers a step whose text ends in an incomplete character with nothing at all. Without
        this the held text would be lost, and how much depends on how the ids were grouped.

        ``DecodeStream`` has no flush: one more step with a probe token (``PROBE``, plain ASCII
        that every decoder appends as is) settles the held bytes, and the probe's text is cut off
        again. The scanner is spent afterwards (the output has ended)."""
        return self._flush([])

    def _flush(self, held: list[int]) -> str:
        """``flush``, stepping the ``held`` ids (a byte group not yet decided) with the probe."""
        probe = self._tokenizer.token_to_id(PROBE)
        if probe is None:
            return TokenScanner.run(self, held) if held else ""
        ids = [*held, probe]
        try:
            text = self._stream.step(self._tokenizer, ids) or ""
        except Exception:
            text = self._restart(ids)
        return text.removesuffix(PROBE) if text.endswith(PROBE) else ""

    def _restart(self, ids: int | list[int]) -> str:
        """``DecodeStream`` refuses a step whose decoding no longer starts with the text it has
        already settled: bytes that are no UTF-8 character held back, then a token the decoder
        joins to them differently (the fuzz found it on a SentencePiece vocabulary: byte tokens,
        then a marker). Odd model output is never an error: the held bytes become one U+FFFD,
        as a decode of invalid UTF-8 shows them, and the stream starts again at this step."""
        self._stream = DecodeStream(skip_special_tokens=False)
        try:
            return "\ufffd" + (self._stream.step(self._tokenizer, ids) or "")
        except Exception:
            self._stream = DecodeStream(skip_special_tokens=False)
            return "\ufffd"


class ByteGroupScanner(TokenScanner):
    """``TokenScanner`` for a ``ByteFallback`` vocabulary: a run of byte ids is held (its ids
    settle no text yet, as an unfinished character does) and stepped together with the next
    non-byte id, in ``piece``, ``run`` or ``flush`` alike."""

    __slots__ = ("_bytes", "_held")

    def __init__(
        self, tokenizer: tokenizers.Tokenizer, bound: BoundGrammar, prompt_ids: Sequence[int] = ()
    ) -> None:
        super().__init__(tokenizer, bound, prompt_ids)
        self._bytes = bound.byte_ids
        self._held: list[int] = []

    def run(self, token_ids: list[int]) -> str:
        ids = self._held + token_ids if self._held else token_ids
        byte = self._bytes
        end = len(ids)
        while end and ids[end - 1] in byte:
            end -= 1
        self._held = ids[end:]
        return super().run(ids[:end]) if end else ""

    def piece(self, token_id: int) -> str:
        if token_id in self._bytes:
            self._held.append(token_id)
            return ""
        if not self._held:
            return super().piece(token_id)
        ids, self._held = [*self._held, token_id], []
        try:
            text = self._stream.step(self._tokenizer, ids) or ""
        except Exception:
            text = self._restart(ids)
        mark = self._marks.get(token_id)
        if mark is None:
            return text
        marker, sentinel = mark
        return (text[: -len(marker)] if text.endswith(marker) else text) + sentinel

    def flush(self) -> str:
        held, self._held = self._held, []
        return self._flush(held)


class LiteralMarkers:
    """For text steps (stacks that detokenize themselves): marker texts of bound tokens found in
    raw text become their sentinels, as if the ids had been seen. A suffix that could still grow
    into a marker is held back between steps."""

    __slots__ = ("_hold", "_sentinel_of", "_set")

    def __init__(self, bound: BoundGrammar) -> None:
        self._sentinel_of = {text: s for s, text in bound.text_of_sentinel.items()}
        self._set = TerminalSet(tuple(sorted(self._sentinel_of, key=len, reverse=True)))
        self._hold = ""

    def convert(self, text: str) -> str:
        buf = self._hold + text
        out: list[str] = []
        pos = 0
        while True:
            match, hold = self._set.scan(buf, pos)
            if match is None:
                out.append(buf[pos:hold])
                self._hold = buf[hold:]
                return "".join(out)
            out.append(buf[pos : match.start()])
            out.append(self._sentinel_of[match.group()])
            pos = match.end()

    def flush(self) -> str:
        held, self._hold = self._hold, ""
        return held
