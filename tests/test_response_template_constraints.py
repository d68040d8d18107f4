"""BuildConstraint for models served from a ``response_template``: the constraint is derived from
the compiled grammar as from a format file's, so it compiles in llguidance on the model's own
tokenizer in every mode (forced, required, auto, none; reasoning off, opened by the prompt, opened
by the model), accepts the calls the family writes, rejects malformed ones, and what a random walk
through it generates parses back into valid calls."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import llguidance
import pytest

from constraint_support import TOOLS
from parsetier.constraints.build import ConstraintRequest, derive
from parsetier.constraints.ir import to_lark
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions
from parsetier.models import Model, ModelRegistry
from response_templates import FAMILIES, TEMPLATES, encode, m, write_dir
from testkit.format_renderers import Parts

QUICK = ("qwen3", "gemma4")
"""Families whose llguidance walks run in the quick lane; the others' vocabularies take seconds
to build, so they run with the slow tests."""
FAMILY_PARAMS = [
    pytest.param(name, marks=() if name in QUICK else pytest.mark.slow) for name in sorted(FAMILIES)
]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    root: Path = tmp_path_factory.mktemp("constraint-dirs")
    reg = ModelRegistry({})
    for name, fam in FAMILIES.items():
        reg.add_model_dir(write_dir(root, name, fam.tokenizer, TEMPLATES[fam.template]), name)
    return reg


_LL: dict[str, llguidance.LLTokenizer] = {}


def _ll(model: Model) -> llguidance.LLTokenizer:
    if model.name not in _LL:
        _LL[model.name] = llguidance.LLTokenizer(model.tokenizer.to_str(), n_vocab=model.vocab_size)
    return _LL[model.name]


def _root(model: Model, mode: str, reasoning: str = "off", parallel: bool = True):
    name = "get_weather" if mode == "named" else None
    return derive(
        model.grammar, ConstraintRequest(TOOLS, mode, name, parallel, reasoning, model.eos_token_ids)
    )


def _accepts(model: Model, root, ids: list[int]) -> bool:
    matcher = llguidance.LLMatcher(_ll(model), to_lark(root), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(ids) and matcher.is_accepting()


def _output(family: str, model: Model, parts: Parts) -> list[int]:
    """The family's rendering of ``parts`` without its end-of-turn token (the constraint ends
    where the model would stop)."""
    text = FAMILIES[family].render(parts)
    end = text.rindex("⟦")
    return encode(model, text[:end])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_mode_compiles_in_llguidance(family: str, registry) -> None:
    model = registry.get(family)
    for mode in ("auto", "none", "required", "named"):
        for parallel in (True, False):
            for reasoning in ("off", "open", "inside", "optional"):
                lark = to_lark(_root(model, mode, reasoning, parallel))
                assert not llguidance.LLMatcher.validate_grammar(lark), (mode, reasoning, lark)


@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_calls_the_family_writes_are_accepted_and_malformed_ones_rejected(family: str, registry) -> None:
    model = registry.get(family)
    reasoning = "inside" if family in ("qwen3.5", "glm-4.7") else "off"
    think = "ok" if family in ("qwen3.5", "glm-4.7") else ""
    one = Parts(think, "", (("get_weather", {"city": "Paris", "days": 3}),))
    two = Parts(think, "", (("get_weather", {"city": "Paris"}), ("get_time", {})))
    said = Parts(think, "Sure.", (("get_weather", {"city": "Paris"}),))
    assert _accepts(model, _root(model, "required", reasoning), _output(family, model, one))
    assert _accepts(model, _root(model, "named", reasoning), _output(family, model, one))
    assert _accepts(model, _root(model, "auto", reasoning), _output(family, model, said))
    assert _accepts(model, _root(model, "auto", reasoning), _output(family, model, two))
    assert not _accepts(model, _root(model, "auto", reasoning, parallel=False), _output(family, model, two))
    assert not _accepts(model, _root(model, "none", reasoning), _output(family, model, one))
    assert not _accepts(
        model, _root(model, "required", reasoning), _output(family, model, Parts(think, "No.", ()))
    )
    other = Parts(think, "", (("send_mail", {"to": "x"}),))
    assert not _accepts(model, _root(model, "auto", reasoning), _output(family, model, other))
    wrong = Parts(think, "", (("get_weather", {"city": "Paris", "days": "soon"}),))
    assert not _accepts(model, _root(model, "required", reasoning), _output(family, model, wrong))
    named_other = Parts(think, "", (("get_time", {}),))
    assert not _accepts(model, _root(model, "named", reasoning), _output(family, model, named_other))


def _walk(model: Model, root, rng: random.Random, limit: int = 600) -> list[int] | None:
    """A random walk under the grammar's masks: the grammar's forced tokens, else a random allowed
    token among single characters and markers (late in the walk, closing characters and whole
    markers are preferred, so structures close). None when it did not end where the grammar may."""
    matcher = llguidance.LLMatcher(_ll(model), to_lark(root), log_level=0)
    tok = model.tokenizer
    markers = [tok.encode(t, add_special_tokens=False).ids for t in model.grammar.grammar.terminals.values()]
    pool = sorted(
        {tid for text, tid in tok.get_vocab(with_added_tokens=True).items() if len(text) == 1}
        | {i for seq in markers for i in seq}
    )
    eos = _ll(model).eos_token
    closing = {tok.token_to_id(c) for c in "}]\"'\n"} - {None}
    ids: list[int] = []
    for step in range(limit):
        if matcher.is_stopped() or (matcher.is_accepting() and rng.random() < 0.5):
            break
        forced = matcher.compute_ff_tokens()
        if forced:
            assert matcher.consume_tokens(forced)
            ids += forced
            continue
        if step > limit // 3:
            fits = [seq for seq in markers if seq and matcher.validate_tokens(seq) == len(seq)]
            if fits and rng.random() < 0.5:
                seq = rng.choice(fits)
                assert matcher.consume_tokens(seq)
                ids += seq
                continue
        mask = matcher.compute_bitmask()
        allowed = [t for t in pool if t < len(mask) * 8 and mask[t // 8] >> (t % 8) & 1 and t != eos]
        if not allowed:
            break
        late = [t for t in allowed if t in closing] if step > limit // 2 and rng.random() < 0.6 else []
        choice = rng.choice(late or allowed)
        if choice in model.eos_token_ids:
            break
        assert matcher.consume_token(choice), matcher.get_error()
        ids.append(choice)
    return ids if matcher.is_accepting() else None


@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_sampled_outputs_parse_into_valid_calls(family: str, registry) -> None:
    model = registry.get(family)
    rng = random.Random(family)
    prompt = tuple(encode(model, FAMILIES[family].prompt))
    reasoning = "inside" if family in ("qwen3.5", "glm-4.7") else "off"
    schemas = {t.name: t.parameters for t in TOOLS}
    walked = 0
    for _ in range(4):
        ids = _walk(model, _root(model, "required", reasoning), rng)
        if ids is None:
            continue
        message, _, _ = parse(model, SessionOptions(tools=TOOLS, prompt_token_ids=prompt), ids)
        assert message.tool_calls, model.tokenizer.decode(ids, skip_special_tokens=False)
        walked += 1
        for call in message.tool_calls:
            jsonschema.validate(json.loads(call.arguments), schemas[call.name])
    assert walked, "no walk ended where the grammar may"


def test_the_message_starts_after_the_template_anchors(registry) -> None:
    """The prompt table a response template compiles to: its start anchor and its reasoning
    markers, what BuildConstraint reports as message_start_anchors."""
    grammar = registry.get("gemma4").grammar.grammar
    anchors = {grammar.terminals[t]: grammar.states[s].kind for t, s in grammar.prompt.items()}
    assert anchors == {
        "<|turn>model\n": "content",
        "<tool_response|>": "content",
        "<|channel>thought\n": "reasoning",
        "<channel|>": "content",
    }
    assert m("x") == "⟦x⟧"
