"""The native detokenizer (``_core.Scanner``, engine/src/detok.rs) against the reference
``TokenScanner`` (tokenizers' ``DecodeStream``) on every packaged vocabulary and every preset's
markers: random id sequences mixing plain ids, lone bytes of multi-byte characters (the invalid
byte runs that make ``DecodeStream`` hold, replace and restart), added tokens and markers, fed one
id at a time and in runs exactly as ``Session`` feeds them. Every call's text must be identical.
"""

from __future__ import annotations

import itertools
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsetier.engine.detokenizer import TokenScanner
from parsetier.models import Model
from parsetier.native import decoder_steps, detokenizer
from parsetier.token_bytes import TokenBytes
from property_settings import property_settings

EXAMPLES = int(os.environ.get("PARSETIER_DETOK_EXAMPLES", "60"))
SEEDED = property_settings(EXAMPLES)
SAMPLE_TEXT = 'Hello, world! naïve café 日本語のテキスト 🙂👍🏽 Ωμέγα\n\t  {"a": [1, 2]} ﷽ 𝔘𝔫𝔦'


def _presets(registry) -> list[str]:
    """One preset per (tokenizer, format) pair: every vocabulary and every preset's markers."""
    seen: dict[tuple[str, str], str] = {}
    for spec in registry.specs():
        seen.setdefault((str(spec.tokenizer), spec.format), spec.name)
    return sorted(seen.values())


_POOLS: dict[str, dict[str, list[int]]] = {}


def _pools(model: Model) -> dict[str, list[int]]:
    if model.name not in _POOLS:
        _POOLS[model.name] = _make_pools(model)
    return _POOLS[model.name]


def _make_pools(model: Model) -> dict[str, list[int]]:
    """Ids by kind: plain ids, lone bytes (which only a neighbour completes or breaks), added
    tokens and markers, ids of real multilingual text."""
    tok = model.tokenizer
    grammar = model.grammar
    known = grammar.known_ids
    ids = sorted(known) if known is not None else range(grammar.vocab_size)
    token_bytes = TokenBytes(tok)
    lone = []
    step = max(1, len(ids) // 20_000)
    for i in list(ids)[::step]:
        data = token_bytes[i]
        if (len(data) == 1 and data[0] >= 0x80) or (data and data[-1] >= 0xC0):
            lone.append(i)
    added = sorted(tok.get_added_tokens_decoder())
    text = [i for i in tok.encode(SAMPLE_TEXT, add_special_tokens=False).ids]
    return {
        "any": list(ids),
        "lone": lone or list(ids)[:1],
        "added": added or list(ids)[:1],
        "marks": sorted(grammar.mark_of_id) or added or list(ids)[:1],
        "text": text,
    }


def _ids(pools: dict[str, list[int]], size: int) -> st.SearchStrategy[list[int]]:
    one = st.one_of(
        st.sampled_from(pools["any"]),
        st.sampled_from(pools["lone"]),
        st.sampled_from(pools["lone"]),
        st.sampled_from(pools["added"]),
        st.sampled_from(pools["marks"]),
        st.sampled_from(pools["text"]),
    )
    runs = st.lists(pools_text_run(pools), max_size=3).map(lambda rs: [i for r in rs for i in r])
    return st.lists(st.one_of(one.map(lambda i: [i]), runs), max_size=size).map(
        lambda parts: [i for p in parts for i in p]
    )


def pools_text_run(pools: dict[str, list[int]]) -> st.SearchStrategy[list[int]]:
    text = pools["text"]
    return st.integers(0, max(0, len(text) - 1)).flatmap(
        lambda a: st.integers(a, len(text)).map(lambda b: text[a:b])
    )


@pytest.fixture(scope="module")
def models(registry) -> dict[str, Model]:
    return {name: registry.get(name) for name in _presets(registry)}


def test_every_packaged_decoder_is_native(models):
    """Every packaged vocabulary's decoder is one the core decodes (none falls back)."""
    for model in models.values():
        decoder_steps(json.loads(model.tokenizer.decoder.__getstate__()))
        detokenizer(model.tokenizer, model.grammar)


def _compare(model: Model, prompt: list[int], ids: list[int], cuts: list[int]) -> None:
    ref = TokenScanner(model.tokenizer, model.grammar, prompt)
    nat = detokenizer(model.tokenizer, model.grammar).scanner(prompt)
    markers = model.grammar.marker_ids
    # Per id.
    for i, tid in enumerate(ids):
        assert nat.piece(tid) == ref.piece(tid), (model.name, prompt, ids, i)
    assert nat.flush() == ref.flush(), (model.name, prompt, ids)
    # In runs: markers one at a time, plain ids in the runs a random split makes.
    ref = TokenScanner(model.tokenizer, model.grammar, prompt)
    nat = detokenizer(model.tokenizer, model.grammar).scanner(prompt)
    bounds = sorted({0, len(ids), *(c % (len(ids) + 1) for c in cuts)})
    for a, b in itertools.pairwise(bounds):
        run: list[int] = []
        for tid in [*ids[a:b], None]:
            if tid is None or tid in markers:
                if run:
                    assert nat.run(run) == ref.run(run), (model.name, prompt, ids, run)
                    run = []
                if tid is not None:
                    assert nat.piece(tid) == ref.piece(tid), (model.name, prompt, ids, tid)
            else:
                run.append(tid)
    assert nat.flush() == ref.flush(), (model.name, prompt, ids, bounds)


@pytest.mark.parametrize("preset", ["qwen3", "mistral-7b-v0.3", "gpt-oss", "deepseek-v3.1", "llama3"])
def test_text_decodes_as_the_tokenizer_does(models, registry, preset):
    model = registry.get(preset)
    ids = model.tokenizer.encode(SAMPLE_TEXT, add_special_tokens=False).ids
    nat = detokenizer(model.tokenizer, model.grammar)
    scanner = nat.scanner()
    text = "".join(scanner.pieces(ids)) + scanner.flush()
    assert text == model.tokenizer.decode(ids, skip_special_tokens=False)


def test_native_detokenizer_equals_decode_stream(models):
    """Every preset, random ids, random prompts and splits (seeded)."""
    names = sorted(models)

    @SEEDED
    @given(st.data())
    def check(data):
        model = models[data.draw(st.sampled_from(names))]
        pools = _pools(model)
        prompt = data.draw(_ids(pools, 6))
        ids = data.draw(_ids(pools, 24))
        cuts = data.draw(st.lists(st.integers(0, 64), max_size=6))
        _compare(model, prompt, ids, cuts)

    check()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lone", "added", "marks"])
def test_every_preset_hostile_runs(models, kind):
    """Each preset on its own: long runs dominated by lone bytes, added tokens or markers."""
    for model in models.values():
        _hostile(model, kind)


def _hostile(model: Model, kind: str) -> None:
    pools = _pools(model)
    hostile = st.one_of(st.sampled_from(pools[kind]), st.sampled_from(pools["text"] or pools["any"]))

    @property_settings(max(5, EXAMPLES // 6))
    @given(
        st.lists(hostile, max_size=40),
        st.lists(st.sampled_from(pools["any"]), max_size=10),
        st.lists(st.integers(0, 64), max_size=6),
    )
    def check(ids, prompt, cuts):
        _compare(model, prompt, ids, cuts)

    check()
