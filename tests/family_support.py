"""Checks shared by the XML-style family tests (GLM, MiniMax-M2, Seed-OSS, Qwen3 XML).

``split_check`` is the core assertion of every family test: the one-call ``parse`` is the reference,
and every chunking (one token per delta, seeded random groups, the whole output at once) must give
the same deltas-accumulated message and the same final message, as a streaming client would see it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from engine_helpers import accumulate, check_consistent, run, shape
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model
from parsetier.session import parse

Shape = tuple[str, str, tuple[tuple[str, str], ...]]


def enc(model: Model, text: str) -> list[int]:
    """Ids as the model emits them: added-token texts (the format's markers) become their ids."""
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    assert model.tokenizer.decode(ids, skip_special_tokens=False) == text
    return ids


def plain(model: Model, text: str) -> list[int]:
    """Ids of ``text`` with every added-token text spelled as ordinary tokens (a look-alike)."""
    tok = model.tokenizer
    added = sorted((t.content for t in tok.get_added_tokens_decoder().values()), key=len, reverse=True)
    ids: list[int] = []
    pos = 0
    while pos < len(text):
        hit = min(
            ((text.find(a, pos), a) for a in added if text.find(a, pos) >= 0),
            default=(-1, ""),
            key=lambda x: x[0],
        )
        if hit[0] < 0:
            ids += tok.encode(text[pos:], add_special_tokens=False).ids
            break
        start, marker = hit
        if start > pos:
            ids += tok.encode(text[pos:start], add_special_tokens=False).ids
        ids += tok.encode(marker[:1], add_special_tokens=False).ids
        ids += tok.encode(marker[1:], add_special_tokens=False).ids
        pos = start + len(marker)
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert not set(ids) & set(model.grammar.sentinel_of_id)
    return ids


def tools(**specs: dict[str, Any]) -> tuple[Tool, ...]:
    """``tools(f={"a": {"type": "integer"}})``: tools by name with their properties."""
    return tuple(Tool(name, {"type": "object", "properties": props}) for name, props in specs.items())


def groupings(ids: Sequence[int], seeds: int = 6) -> list[list[list[int]]]:
    """One token per delta, the whole output in one delta, and seeded random groups of 1..8."""
    out = [[[i] for i in ids], [list(ids)]]
    for seed in range(seeds):
        rng = random.Random(seed)
        groups, pos = [], 0
        while pos < len(ids):
            n = rng.randint(1, 8)
            groups.append(list(ids[pos : pos + n]))
            pos += n
        out.append(groups)
    return out


def split_check(
    model: Model, ids: Sequence[int], options: SessionOptions | None = None, reason: str = "stop"
) -> Shape:
    """The parse of ``ids``, asserted identical under every grouping (deltas and final message)."""
    options = options or SessionOptions()
    message, final, deltas = parse(model, options, list(ids), reason)
    assert accumulate(deltas) == message
    want = shape(message)
    for groups in groupings(ids):
        streamed = run(model, groups, options, reason)
        check_consistent(streamed)
        assert shape(streamed.message) == want, groups
        assert streamed.final.finish_reason == final.finish_reason
        assert streamed.final.usage == final.usage
    return want


def arguments_before(model: Model, ids: Sequence[int], options: SessionOptions, index: int) -> str:
    """Fed one token at a time: the argument text a client holds just before ``ids[index]`` is
    fed. Shows that string values stream instead of arriving whole when the call ends."""
    streamed = run(model, [[i] for i in ids], options)
    return "".join(tc.arguments for feed in streamed.per_feed[:index] for d in feed for tc in d.tool_calls)
