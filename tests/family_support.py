"""What every model-family test shares: token ids for any model, and the split-invariance check.

* ``enc(model, text)``: ids as the model emits them (marker texts become their ids);
  ``plain(model, text)``: the same text with every marker spelled as ordinary tokens (a look-alike);
  ``prompted(model, prompt, …)``: options whose ``prompt_token_ids`` are the ids of ``prompt``.
* ``split_check``: the core assertion of every family test. The one-call ``parse`` is the
  reference, and every chunking (``groupings``: one token per delta, the whole output at once, a
  few fixed sizes, seeded random groups; ``edge_groupings``: deltas that start or end at every
  marker, and deltas that end inside a multi-byte character) must give the same deltas-accumulated
  message, the same final message and usage, and the same events (text pieces joined), as a
  streaming client would see them. Deltas of several ids take the session's fast path (plain runs
  parsed as one piece), one id per delta the other path, so both are held to the same result.
* ``arguments_before``: the argument text a client holds part-way through, to show streaming.

The session driver these build on (``run``, ``accumulate``, ``shape``, ``parsed``, ``tools``, the
``Shape`` type) is in ``engine_helpers``.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence
from typing import Any

import tokenizers
from tokenizers.decoders import DecodeStream

from engine_helpers import Shape, check_consistent, chunks, cut, parse_shape, run, shape
from parsetier.engine.events import Event, EventKind
from parsetier.messages import Message, SessionOptions
from parsetier.models import Model

FIXED_SIZES = ((2,), (3, 1), (8,), (5, 2, 7))
"""Regular chunkings every split check runs besides the seeded random ones (sizes are cycled)."""
SEEDS = 12
RANDOM_SIZES = (8, 40, 2, 3)
"""Bounds of the seeded random group sizes: up to 40 ids at once matters for the one-byte-per-token
vocabularies (Kimi, Gemma 4, Seed-OSS, Llama 4), whose outputs are long."""


def enc(model: Model, text: str) -> list[int]:
    """Ids as the model emits them: added-token texts (the format's markers) become their ids."""
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    assert model.tokenizer.decode(ids, skip_special_tokens=False) == text
    return ids


@functools.cache
def _non_special_added(tokenizer: tokenizers.Tokenizer) -> re.Pattern[str] | None:
    """The added tokens ``encode_special_tokens`` does not cover (Qwen's ``<think>``), longest first."""
    added = tokenizer.get_added_tokens_decoder().values()
    texts = sorted((t.content for t in added if not t.special), key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in texts)) if texts else None


def plain(model: Model, text: str) -> list[int]:
    """Ids of ``text`` with every added-token text spelled as ordinary tokens (a marker look-alike).

    Special tokens are spelled by the tokenizer's own switch (``encode_special_tokens``), which also
    suits SentencePiece vocabularies (Mistral v3); added tokens that are not special ignore that
    switch, so each of those is cut after its first character and the pieces encoded on their own.
    """
    tok = model.tokenizer
    pattern = _non_special_added(tok)
    pieces: list[str] = []
    pos = 0
    for m in pattern.finditer(text) if pattern else ():
        pieces += [text[pos : m.start()], m.group(0)[:1], m.group(0)[1:]]
        pos = m.end()
    pieces.append(text[pos:])
    tok.encode_special_tokens = True
    try:
        ids = [i for piece in pieces if piece for i in tok.encode(piece, add_special_tokens=False).ids]
    finally:
        tok.encode_special_tokens = False
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert not set(ids) & set(model.grammar.sentinel_of_id)
    return ids


def prompted(model: Model, prompt: str = "", **options: Any) -> SessionOptions:
    """Session options whose generation prompt is ``prompt`` (its ids, markers included)."""
    return SessionOptions(prompt_token_ids=tuple(enc(model, prompt)) if prompt else (), **options)


def groupings(ids: Sequence[int]) -> list[list[list[int]]]:
    """One token per delta, the whole output in one delta, the ``FIXED_SIZES``, and for every one
    of ``SEEDS`` seeds, random groups of 1..n ids for every n in ``RANDOM_SIZES``."""
    out = [[[i] for i in ids], [list(ids)], *(list(chunks(ids, sizes)) for sizes in FIXED_SIZES)]
    for seed in range(SEEDS):
        rng = random.Random(seed)
        for most in RANDOM_SIZES:
            groups, pos = [], 0
            while pos < len(ids):
                n = rng.randint(1, most)
                groups.append(list(ids[pos : pos + n]))
                pos += n
            out.append(groups)
    return out


def edge_groupings(model: Model, ids: Sequence[int]) -> list[list[list[int]]]:
    """Chunkings that put the edges of multi-id runs where the fast path must be exact: every
    marker id first in its delta, every marker last in its delta, every marker alone between
    long runs, and deltas that end in the middle of a multi-byte character (an id after which the
    decoder still holds bytes)."""
    markers = model.grammar.marker_ids
    at = [i for i, t in enumerate(ids) if t in markers]
    stream = DecodeStream(skip_special_tokens=False)
    inside = []
    for i, t in enumerate(ids):
        try:
            held = not stream.step(model.tokenizer, t)
        except Exception:  # bytes no character can complete (see TokenScanner._restart)
            stream, held = DecodeStream(skip_special_tokens=False), False
        if held:
            inside.append(i + 1)
    out = [
        cut(ids, at),  # each marker opens a delta
        cut(ids, [i + 1 for i in at]),  # each marker closes one
        cut(ids, [c for i in at for c in (i, i + 1)]),  # each marker alone
        cut(ids, inside),  # runs end inside a character
        cut(ids, [c for i in inside for c in (i - 1, i)]),  # …and the next one starts there too
    ]
    return [[g for g in groups if g] for groups in out]


def event_shape(events: Sequence[Event]) -> list[tuple[EventKind, str, int, str]]:
    """Events with consecutive text pieces of the same kind and call joined, without token counts:
    what every split must agree on."""
    out: list[tuple[EventKind, str, int, str]] = []
    for e in events:
        if out and e.kind in _TEXT_EVENTS and out[-1][0] is e.kind and out[-1][2] == e.tool_index:
            kind, text, index, call_id = out[-1]
            out[-1] = (kind, text + e.text, index, call_id)
        else:
            out.append((e.kind, e.text, e.tool_index, e.call_id))
    return out


_TEXT_EVENTS = (EventKind.CONTENT, EventKind.REASONING, EventKind.TOOL_ARGUMENTS)


def call_ids(message: Message) -> list[str]:
    """The ids of the message's calls, in order."""
    return [c.id for c in message.tool_calls]


def split_check(
    model: Model, ids: Sequence[int], options: SessionOptions | None = None, reason: str = "stop"
) -> Shape:
    """The parse of ``ids``, asserted identical under every grouping (deltas and final message:
    content, reasoning, calls, finish reason, usage). Call ids the model writes itself (Kimi K2)
    must be the same in every grouping too."""
    want, final = parse_shape(model, ids, options, reason)
    want_events = event_shape(run(model, [list(ids)], options, reason).events)
    written_ids = model.grammar.grammar.tool_call_id == "format"
    for groups in groupings(ids) + edge_groupings(model, ids):
        streamed = run(model, groups, options, reason)
        check_consistent(streamed, written_ids)
        assert shape(streamed.message) == want, groups
        assert streamed.final.finish_reason == final.finish_reason
        assert streamed.final.usage == final.usage, groups
        assert event_shape(streamed.events) == want_events, groups
        assert sum(e.tokens for e in streamed.events) == final.usage.completion_tokens
        if written_ids:
            assert call_ids(streamed.final.message) == call_ids(final.message), groups
    return want


def arguments_before(model: Model, ids: Sequence[int], options: SessionOptions, index: int) -> str:
    """Fed one token at a time: the argument text a client holds just before ``ids[index]`` is
    fed. Shows that string values stream instead of arriving whole when the call ends."""
    streamed = run(model, [[i] for i in ids], options)
    return "".join(tc.arguments for feed in streamed.per_feed[:index] for d in feed for tc in d.tool_calls)
