"""Conservation, on every format file in both delivery modes: every character the model wrote ends
up in the reasoning, the content, a tool name or a tool call's arguments, or in markup the format
consumed (docs/engine.md, "Conservation"; the recovery policy is docs/service.md, "Malformed model
output").

The outputs are random (hypothesis, seeded): the format's own markers, stray and repeated, among
words, whitespace, JSON that is valid, broken or cut short, call envelopes with missing keys,
pythonic calls, and unclosed blocks anywhere, in and around reasoning and call blocks; finished by
``stop`` or cut by ``length``; fed in random groups. Every *word* (a random token of letters and
digits that no format uses as markup, so no escaping or typing changes it) must come out: in the
delivered message, or in the markup the machine recorded (``Machine.markup``, recorded only where
the format data says text is markup: terminals, whitespace between markers, the text of a state
marked ``markup``, a capture a rule read or a call came of, a JSON value's lead-in, a marker cut
short at the end). Words the documented exceptions take are allowed out of the message only for
those reasons: ``cut`` only when the output was cut, and in ``complete_tool_calls`` mode the words of
the last call when the output was cut (a call the output cut off is not delivered). A call that
``complete_tool_calls`` does not deliver because its arguments are no JSON object is content, as the
model wrote it (its ``TOOL_CALL_END`` carries its text): no exception. Both modes are also checked
split-invariant: one feed of the whole output gives the same message as the random groups.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, seed
from hypothesis import strategies as st

import marker_tokenizers
from parsetier.engine.session import Session
from parsetier.messages import Final, SessionOptions
from parsetier.models import Model
from property_settings import property_settings

pytestmark = pytest.mark.slow  # 50 random outputs per format file, both delivery modes

EXAMPLES = 50
"""Per format file (29); each example runs both delivery modes."""


_FORMAT_DIR = Path(__file__).parents[1] / "server/parsetier/formats"


@functools.cache
def _model(fmt: str) -> Model:
    """The format file's first preset (marker tokenizers stand in for families whose vocabulary
    is on no package index)."""
    presets = tomllib.loads((_FORMAT_DIR / f"{fmt}.toml").read_text())["presets"]
    model = marker_tokenizers.registry().get(presets[0]["name"])
    assert model.grammar.grammar.name == fmt
    return model


FORMATS = sorted(p.stem for p in _FORMAT_DIR.glob("*.toml"))

_WORD = re.compile(r"\bw[a-z]{3}[0-9]\b")

_TEMPLATES = (
    '{"name": "W", "arguments": {"W": "W W"}}',
    '{"name": "W", "parameters": {"W": 1}}',
    '[{"name": "W", "arguments": {}}]',
    '{"arguments": {"W": "W"}, "name": "W"}',
    '{"name": "W", "arguments": W}',
    '{"name": W}',
    '{"W": "W"}',
    '{"W": [1, "W", {"W": null}]}',
    '{"name": "W", "arguments": {"W": 1 W}}',  # breaks after the call started
    '{"W": W W}',
    '{"name": "W", "arguments": "{W"}',
    "W(W=@W)",
    "W(W=W)",  # a bare name as a value: no literal, the list breaks after the call began
    "[W(W=[1, W]), W(W!)]",
    "W(W='W', W=2)",
    "[W(W=1), W()]",
    '"W"',
    "W",
)


def _word(rng: random.Random) -> str:
    return "w" + "".join(rng.choice("bcdfghjkmnpqrstvxz") for _ in range(3)) + rng.choice("0123456789")


@st.composite
def outputs(draw: st.DrawFn, model: Model) -> str:
    """A random output of the format: its terminals (whole, or cut short), words, whitespace, and
    JSON / pythonic fragments holding words, whole or cut anywhere."""
    terminals = sorted(set(model.grammar.grammar.terminals.values()))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    pieces = []
    for _ in range(draw(st.integers(1, 24))):
        kind = rng.random()
        if kind < 0.4:
            text = rng.choice(terminals)
            pieces.append(text if rng.random() < 0.9 else text[: rng.randrange(1, len(text) + 1)])
        elif kind < 0.65:
            pieces.append(_word(rng))
        elif kind < 0.8:
            pieces.append(rng.choice([" ", "\n", "\n\n", " \t"]))
        else:
            template = rng.choice(_TEMPLATES)
            text = re.sub("W", lambda _: _word(rng), template)
            pieces.append(text if rng.random() < 0.7 else text[: rng.randrange(1, len(text) + 1)])
    return "".join(pieces)


def _groups(rng: random.Random, ids: list[int]) -> list[list[int]]:
    groups, pos = [], 0
    while pos < len(ids):
        n = rng.randint(1, 6)
        groups.append(ids[pos : pos + n])
        pos += n
    return groups


def _run(
    model: Model, groups: list[list[int]], options: SessionOptions, reason: str
) -> tuple[Final, list[tuple[str, str]]]:
    """The session's final result, and the markup its machine recorded."""
    session = Session(model, options)
    markup: list[tuple[str, str]] = []
    session._machine.markup = markup  # the test's view into the engine: what it consumed
    for ids in groups:
        session.feed(ids)
    final = session.finish(reason).final
    assert final is not None
    return final, markup


def _delivered(message) -> str:
    parts = [message.reasoning, message.content]
    for call in message.tool_calls:
        parts += [call.name, call.arguments]
    return "\n".join(parts)


def _lost(model: Model, text: str, options: SessionOptions, reason: str, rng: random.Random) -> list[str]:
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    text = model.tokenizer.decode(ids, skip_special_tokens=False)  # (a SentencePiece space may go)
    groups = _groups(rng, ids)
    streaming = _run(model, groups, options, reason)
    complete_options = dataclasses.replace(options, complete_tool_calls=True)
    complete = _run(model, groups, complete_options, reason)
    lost = []
    for (final, markup), opts in ((streaming, options), (complete, complete_options)):
        is_complete = opts.complete_tool_calls
        whole = _run(model, [ids], opts, reason)[0]
        if whole.message != final.message:
            mode = "complete" if is_complete else "streaming"
            lost.append(f"{mode}: split-variant {final.message} {whole.message}")
        seen = _delivered(final.message) + "\n" + "\n".join(t for _, t in markup)
        if is_complete and reason == "length" and streaming[0].message.tool_calls:
            cut_off = streaming[0].message.tool_calls[-1]  # the call the output cut off, if it was
            seen += "\n" + cut_off.name + cut_off.arguments
        cuts = "\n".join(t for why, t in markup if why == "cut")
        for word in _WORD.findall(text):
            if word not in seen:
                lost.append(f"{'complete' if is_complete else 'streaming'}: {word}")
            elif reason == "stop" and word in cuts and word not in _delivered(final.message):
                lost.append(f"{'complete' if is_complete else 'streaming'}: {word} cut at a stop")
    return lost


@pytest.mark.parametrize("fmt", FORMATS)
@seed(22)
@property_settings(EXAMPLES)
@given(data=st.data())
def test_every_word_the_model_wrote_is_delivered_or_markup(fmt: str, data: st.DataObject) -> None:
    model = _model(fmt)
    text = data.draw(outputs(model), label="output")
    thinking = data.draw(st.sampled_from([None, True, False]), label="thinking")
    reason = data.draw(st.sampled_from(["stop", "length"]), label="finish")
    options = SessionOptions(thinking=thinking, request_id="conservation")
    lost = _lost(model, text, options, reason, random.Random(len(text)))
    assert not lost, (text, lost)


_GEMMA_CALLS = (
    "<|tool_call>call:W{W:W W{W:1}}<tool_call|>",  # a bare word before `{`: shown at once
    "<|tool_call>call:W{W:W{W:1}<tool_call|>",  # …in a call that never closes
    "<|tool_call>call:W{W:W [1,W]<tool_call|>",
    "<|tool_call>call:W{W:1,W W<tool_call|>",  # a key the closer cuts off
    '<|tool_call>call:W{W:<|"|>W W<|"|>,W:W{W:<|"|>W<|"|>}',
    "<|tool_call>call:W{W:W",
)


@st.composite
def broken_gemma_calls(draw: st.DrawFn) -> str:
    """Gemma 4 outputs of calls whole and broken (bare words where the notation has no place for
    them, unclosed objects and arrays, keys cut off by a marker), cut anywhere, among words."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    pieces = []
    for _ in range(draw(st.integers(1, 6))):
        kind = rng.random()
        if kind < 0.6:
            text = re.sub("W", lambda _: _word(rng), rng.choice(_GEMMA_CALLS))
            pieces.append(text if rng.random() < 0.7 else text[: rng.randrange(1, len(text) + 1)])
        elif kind < 0.8:
            pieces.append(_word(rng))
        else:
            pieces.append(rng.choice([" ", "\n", "<tool_call|>", "<|tool_call>", "{", "}"]))
    return "".join(pieces)


@seed(22)
@property_settings(100)
@given(data=st.data())
def test_a_broken_gemma_call_shows_each_word_once(data: st.DataObject) -> None:
    """Gemma 4's reader shows a bare word as content (it has no place in the notation); an invalid
    call's text (``complete_tool_calls``) holds it in place and must not show it again: every word
    the model wrote once is delivered at most once, the content's words in the order the model
    wrote them, and conservation holds."""
    model = _model("gemma4")
    text = data.draw(broken_gemma_calls(), label="output")
    reason = data.draw(st.sampled_from(["stop", "length"]), label="finish")
    options = SessionOptions(request_id="conservation")
    assert not _lost(model, text, options, reason, random.Random(len(text))), text
    ids = model.tokenizer.encode(text, add_special_tokens=False).ids
    once = [w for w in _WORD.findall(text) if text.count(w) == 1]
    for complete in (False, True):
        opts = dataclasses.replace(options, complete_tool_calls=complete)
        delivered = _delivered(_run(model, _groups(random.Random(len(ids)), ids), opts, reason)[0].message)
        assert not [w for w in once if delivered.count(w) > 1], (complete, text, delivered)
        content = _run(model, [ids], opts, reason)[0].message.content
        shown = [w for w in _WORD.findall(content) if w in once]
        assert shown == sorted(shown, key=text.index), (complete, text, content)
