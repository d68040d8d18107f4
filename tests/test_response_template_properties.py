"""Models served from a response template keep the engine's promises: conservation (every word the
model wrote is delivered or in markup the grammar consumed), split invariance (random groups give
one feed's message), and the native core equal to the reference at every step. The outputs are
``test_conservation``'s random soup of the template's own markers (whole, cut short, stray and
repeated), words, whitespace and JSON / pythonic fragments, finished by ``stop`` or ``length``."""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, seed
from hypothesis import strategies as st

import native_diff
from parsetier.messages import SessionOptions
from parsetier.models import Model, ModelRegistry
from property_settings import property_settings
from response_templates import FAMILIES, TEMPLATES, encode, write_dir
from test_conservation import _groups, _lost, outputs

pytestmark = pytest.mark.slow  # 30 random outputs per template, conservation and the native differential

EXAMPLES = 30
_ROOT: list[Path] = []


@cache
def _model(family: str) -> Model:
    import tempfile

    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="parsetier-rt-")))
    fam = FAMILIES[family]
    registry = ModelRegistry({})
    registry.add_model_dir(write_dir(_ROOT[0], family, fam.tokenizer, TEMPLATES[fam.template]), family)
    return registry.get(family)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@seed(38)
@property_settings(EXAMPLES)
@given(data=st.data())
def test_conserved_split_invariant_and_equal_on_both_engines(family: str, data: st.DataObject) -> None:
    model = _model(family)
    text = data.draw(outputs(model), label="output")
    reason = data.draw(st.sampled_from(["stop", "length"]), label="finish")
    with_prompt = data.draw(st.booleans(), label="prompt")
    prompt = tuple(encode(model, FAMILIES[family].prompt)) if with_prompt else ()
    options = SessionOptions(prompt_token_ids=prompt, request_id="rt-properties")
    rng = random.Random(len(text))
    lost = _lost(model, text, options, reason, rng)
    assert not lost, (text, lost)
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    assert native_diff.compare(model, options, _groups(rng, ids), reason), "the core serves the template"
