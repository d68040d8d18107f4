"""A native session's open (``NativeSession.__init__``) computes in the core what the reference
session computes in Python — the prompt's digest (the call-id seed), the prompt tail's text (the
start state), the prompt ids' check, the tools — and must give exactly the same: the same seed,
the same start state and echo, the same refusal of a bad prompt, and tools shared only by the
sessions opened with that very tuple."""

from __future__ import annotations

import hashlib
import random
from functools import partial

import pytest

from parsetier import native
from parsetier.engine.call_ids import prompt_digest
from parsetier.engine.session import InvalidInput, Session, start_and_echo
from parsetier.messages import SessionOptions, Tool


@pytest.fixture(scope="module")
def registry():
    import marker_tokenizers

    return marker_tokenizers.registry()


def _rule(ids) -> str:
    return hashlib.blake2b(",".join(map(str, ids)).encode("ascii"), digest_size=16).hexdigest()


def test_prompt_digest_is_the_rule():
    """The core writes the decimal text the rule hashes; ids it cannot hold (or that are not
    plain ints, whose ``str`` is not their decimal) are hashed by the rule itself."""
    rng = random.Random(21)
    cases = [(), (0,), (151644, 77091, 198), (2**32 - 1, 0, 10, 99, 100)]
    cases += [tuple(rng.randrange(200_000) for _ in range(rng.randrange(1, 3000))) for _ in range(20)]
    cases += [[5, 6, 7], (True, 5), (2**40,), (-1, 3)]
    for ids in cases:
        assert prompt_digest(ids) == _rule(ids), ids


def test_start_state_from_the_cores_prompt_text(registry):
    """``start_and_echo`` with the core's prompt text gives the reference's start state and echo
    for every preset the core serves, on prompts that end in each of its prompt terminals and on
    random prompt tails."""
    rng = random.Random(2026)
    checked = 0
    for name in registry.names():
        model = registry.get(name)
        parts = native.native_parts(model)
        if parts is None:
            continue
        tok, grammar = model.tokenizer, model.grammar
        prompts = [
            tuple(rng.randrange(grammar.vocab_size) for _ in range(rng.randrange(1, 300))) for _ in range(3)
        ]
        for terminal in grammar.grammar.prompt:
            pattern = grammar.patterns[terminal]
            prompts.append(tuple(tok.encode("Hello there" + pattern + "\n", add_special_tokens=False).ids))
        for prompt in prompts:
            options = SessionOptions(prompt_token_ids=prompt)
            want = start_and_echo(grammar, options, model.spec.thinking, tok)
            got = start_and_echo(
                grammar, options, model.spec.thinking, tok, partial(native._prompt_text, parts[0])
            )
            assert got == want, (name, prompt)
            checked += 1
    assert checked > 50


@pytest.mark.parametrize("bad", [[1, -1], [1, 10**9], [1, 2**40], [1, 2.0], (3, "4")])
def test_a_bad_prompt_is_refused_as_the_reference_refuses_it(registry, bad):
    model = registry.get("qwen3")
    options = SessionOptions(prompt_token_ids=tuple(bad))
    with pytest.raises(Exception) as want:
        Session(model, options)
    with pytest.raises(type(want.value)) as got:
        native.NativeSession(model, options, native.native_parts(model))
    assert str(got.value) == str(want.value)
    if isinstance(want.value, InvalidInput):
        assert "prompt_token_ids" in str(got.value)


def test_sessions_share_the_native_tools_of_one_tuple(registry):
    """The core's copy of a session's tools is made once per tools tuple (the service hands every
    request with the same ``tools_json`` the same tuple); an equal but distinct tuple gets its
    own, and each session parses with its own tools."""
    model = registry.get("qwen3")
    parts = native.native_parts(model)
    tools = (Tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}}),)
    schemas = {t.name: t.parameters for t in tools}
    made = native.native_tools(tools, schemas)
    assert native.native_tools(tools, schemas) is made and len(made) == 1
    again = tuple(Tool(t.name, dict(t.parameters)) for t in tools)
    assert native.native_tools(again, {t.name: t.parameters for t in again}) is not made
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    for given in (tools, again, ()):
        options = SessionOptions(tools=given, request_id="req-1")
        ref, nat = Session(model, options), native.NativeSession(model, options, parts)
        assert nat.feed(ids).deltas == ref.feed(ids).deltas
        assert nat.finish().final == ref.finish().final


def test_a_core_of_other_sources_counts_as_none(monkeypatch) -> None:
    """A core whose boundary version is not the Python's (built from older sources) is refused
    as a whole, with the reason the log gives, instead of failing mid-request."""
    from parsetier import _core, core_module

    assert core_module._load() == (_core, "")
    monkeypatch.setattr(_core, "BOUNDARY", core_module.BOUNDARY - 1)
    core, why = core_module._load()
    assert core is None and "make native" in why
