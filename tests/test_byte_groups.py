"""Byte-fallback groups are decided whole, whatever the split (issue 27, docs/engine.md).

A ``ByteFallback`` decoder (mistral-7b-v0.3's ``<0xAB>`` pieces) decodes a run of byte tokens only
as a whole: their UTF-8, or one U+FFFD per byte. The scanner holds a run of byte ids and steps it
with the next other id (or with the flush), so C2 80 80 is ``���`` fed in one step, at any cut and
one id at a time, in both engines; every event's ``tokens`` still add up to the usage.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import native_diff
from engine_helpers import check_consistent, run, shape, tools
from parsetier.engine.detokenizer import ByteGroupScanner, TokenScanner
from parsetier.messages import SessionOptions
from parsetier.models import Model
from parsetier.token_bytes import byte_fallback_ids
from property_settings import property_settings

C2_80_80 = [965, 899, 899]
"""``<0xC2> <0x80> <0x80>`` in mistral-7b-v0.3: a valid U+0080 then a lone 80 byte."""
TOOL_CALLS = 5


@pytest.fixture(scope="module")
def v3(registry) -> Model:
    return registry.get("mistral-7b-v0.3")


def test_byte_ids_come_from_the_decoder(registry, v3):
    """Byte ids are the ``<0xAB>`` pieces of a vocabulary whose decoder has ``ByteFallback``;
    other vocabularies have none and keep the plain scanner."""
    assert [v3.tokenizer.id_to_token(i) for i in C2_80_80] == ["<0xC2>", "<0x80>", "<0x80>"]
    assert len(v3.grammar.byte_ids) == 256 and set(C2_80_80) <= v3.grammar.byte_ids
    assert type(TokenScanner(v3.tokenizer, v3.grammar)) is ByteGroupScanner
    qwen = registry.get("qwen3")
    assert byte_fallback_ids(qwen.tokenizer) == frozenset() == qwen.grammar.byte_ids
    assert type(TokenScanner(qwen.tokenizer, qwen.grammar)) is TokenScanner


def _cases(v3: Model) -> dict[str, list[int]]:
    call = v3.tokenizer.encode('[{"name": "get_weather", "arguments": {"city": "Paris"}}]').ids
    text = v3.tokenizer.encode("naïve 日本 ok", add_special_tokens=False).ids
    return {
        "marker": [*C2_80_80, TOOL_CALLS, *call],
        "text": [*C2_80_80, *text],
        "end": [*text, *C2_80_80],
        "text and marker": [*text, *C2_80_80, *text, *C2_80_80, TOOL_CALLS, *call],
    }


def _splits(ids: list[int]) -> list[list[list[int]]]:
    cuts = [[ids[:k], ids[k:]] for k in range(1, len(ids))]
    return [[[i] for i in ids], *cuts]


@pytest.mark.parametrize("case", ["marker", "text", "end", "text and marker"])
def test_c2_80_80_at_every_cut(v3, case):
    ids = _cases(v3)[case]
    options = SessionOptions(tools=tools("get_weather"), request_id="byte-groups")
    whole = run(v3, [ids], options)
    check_consistent(whole)
    content = whole.final.message.content
    assert "\ufffd\ufffd\ufffd" in content and "\x80" not in content, content
    for groups in _splits(ids):
        streamed = run(v3, groups, options)
        check_consistent(streamed)
        assert shape(streamed.final.message) == shape(whole.final.message), groups
        assert streamed.final.usage == whole.final.usage == whole.final.usage.__class__(len(ids), 0)
        assert sum(e.tokens for e in streamed.events) == len(ids), groups
        native_diff.compare(v3, options, groups)


def _scan(model: Model, groups: list[list[int]]) -> str:
    """Session's way through the scanner: markers one at a time, plain ids in runs; then flush."""
    scanner = TokenScanner(model.tokenizer, model.grammar)
    markers = model.grammar.marker_ids
    out: list[str] = []
    for group in groups:
        plain: list[int] = []
        for tid in [*group, None]:
            if tid is None or tid in markers:
                if plain:
                    out.append(scanner.piece(plain[0]) if len(plain) == 1 else scanner.run(plain))
                    plain = []
                if tid is not None:
                    out.append(scanner.piece(tid))
            else:
                plain.append(tid)
    out.append(scanner.flush())
    return "".join(out)


SEEDED = property_settings(60)


@SEEDED
@given(st.data())
def test_random_byte_runs_are_split_invariant(v3, data):
    """Random runs of byte tokens (valid and broken UTF-8) among text and markers, cut at random:
    the same text as one step, in the reference scanner, and the same session in both engines."""
    byte = sorted(v3.grammar.byte_ids)
    text = v3.tokenizer.encode("Hi 日本 ok", add_special_tokens=False).ids
    part = st.one_of(
        st.lists(st.sampled_from(byte), min_size=1, max_size=6),
        st.lists(st.sampled_from(byte[0xC0:]), min_size=1, max_size=2).map(
            lambda lead: [*lead, *([byte[0x80]] * 2)]
        ),
        st.sampled_from([[t] for t in text]),
        st.just([TOOL_CALLS]),
    )
    ids = [i for p in data.draw(st.lists(part, min_size=1, max_size=8)) for i in p]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(ids) - 1)), max_size=5))))
    groups = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)], strict=True) if ids[a:b]]
    whole = _scan(v3, [ids])
    assert _scan(v3, groups) == whole, groups
    assert _scan(v3, [[i] for i in ids]) == whole
    native_diff.compare(v3, SessionOptions(request_id="byte-groups"), groups)
