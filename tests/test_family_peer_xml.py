"""Nemotron 3, Step-3.5 / 3.7, MiMo, Ling 3 and Hunyuan Hy3: the XML-style families peers serve,
each on its marker tokenizer (no vocabulary of theirs is on PyPI; ``marker_tokenizers`` says which
ids are real). The round trips through their templates are in ``test_roundtrip.py``; these pin the
behaviours where the families differ from the formats they reuse, and where peers disagree
(docs/formats/qwen3-xml.md, glm.md, hunyuan.md). Every test asserts split invariance.
"""

from __future__ import annotations

import json
from pathlib import Path

import llguidance
import pytest

import marker_tokenizers
from engine_helpers import run_text, tools
from family_support import enc, plain, prompted, split_check
from parsetier.constraints.build import ConstraintRequest, derive
from parsetier.constraints.ir import to_lark, to_structural_tag
from parsetier.engine.grammar import GrammarError
from parsetier.formats import FormatRegistry
from parsetier.messages import SessionOptions
from parsetier.models import ModelRegistry
from testkit.format_renderers import coder_call, hy3_block, hy3_call, hy3_marker, ling3_call

REGISTRY = marker_tokenizers.registry()
NEMOTRON = REGISTRY.get("nemotron-3")
STEP = REGISTRY.get("step-3.5")
MIMO = REGISTRY.get("mimo")
LING = REGISTRY.get("ling-3")
HY3 = REGISTRY.get("hy3")

TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}},
    run={"command": {"type": "string"}, "timeout": {"type": "integer"}, "dry": {"type": "boolean"}},
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)
WEATHER = ("get_weather", '{"city": "Paris", "days": 2}')


# ------------------------------------------------------------------------------------ Nemotron 3
def test_nemotron_thinking_off_is_content_without_swapping() -> None:
    """vLLM swaps reasoning into content when thinking is off (its parser starts in reasoning);
    here the prompt's pre-closed ``<think></think>`` (or the switch) starts the output in the answer."""
    answer = enc(NEMOTRON, "The answer is 42.")
    off = prompted(NEMOTRON, "<|im_start|>assistant\n<think></think>", tools=TOOLS)
    assert split_check(NEMOTRON, answer, off) == ("The answer is 42.", "", ())
    switch_off = SessionOptions(tools=TOOLS, thinking=False)
    assert split_check(NEMOTRON, answer, switch_off) == ("The answer is 42.", "", ())
    on = prompted(NEMOTRON, "<|im_start|>assistant\n<think>\n", tools=TOOLS)
    text = "Look it up.\n</think>\n" + coder_call("get_weather", {"city": "Paris", "days": "2"})
    assert split_check(NEMOTRON, enc(NEMOTRON, text), on) == ("", "Look it up.", (WEATHER,))


def test_nemotron_thinking_is_on_by_default() -> None:
    assert split_check(NEMOTRON, enc(NEMOTRON, "Still thinking"), OPTS) == ("", "Still thinking", ())


# ----------------------------------------------------------------------------------- Step-3.5
def test_step_ignores_the_thinking_switch() -> None:
    """The template always opens ``<think>\\n`` and has no switch: a request that turns thinking
    off (and sends no prompt) still starts inside the reasoning."""
    text = "Line one.\nLine two.\n</think>\nThe answer."
    for options in (OPTS, SessionOptions(tools=TOOLS, thinking=False), prompted(STEP, "<think>\n")):
        assert split_check(STEP, enc(STEP, text), options) == ("The answer.", "Line one.\nLine two.", ())


def test_step_calls_follow_the_answer_directly() -> None:
    text = (
        "Need both.\n</think>\nOn it."
        + coder_call("get_weather", {"city": "Paris", "days": "2"})
        + coder_call("get_time", {})
    )
    want = ("On it.", "Need both.", (WEATHER, ("get_time", "{}")))
    assert split_check(STEP, enc(STEP, text), OPTS) == want


def test_step_python_literal_values_follow_the_schema() -> None:
    """Non-strings go through Jinja's ``string`` filter: ``True``, ``None``."""
    text = "t\n</think>\n" + coder_call("run", {"command": "True", "timeout": "30", "dry": "True"})
    args = '{"command": "True", "timeout": 30, "dry": true}'
    assert split_check(STEP, enc(STEP, text), OPTS) == ("", "t", (("run", args),))


# ---------------------------------------------------------------------------------------- MiMo
def test_mimo_compact_values_keep_their_whitespace() -> None:
    """MiMo writes values without wrapping newlines, so a value's own newlines are data."""
    text = coder_call("run", {"command": "\n  pwd && ls\n"}, compact=True)
    args = '{"command": "\\n  pwd && ls\\n"}'
    assert split_check(MIMO, enc(MIMO, text), SessionOptions(tools=TOOLS, thinking=False)) == (
        "",
        "",
        (("run", args),),
    )


def test_mimo_values_are_typed_by_the_schema_and_not_unescaped() -> None:
    """Where peers disagree: vLLM keeps every MiMo value a string, SGLang types them by the schema
    and also HTML-unescapes them. The template writes values raw, so they are typed by the schema
    (as every XML-style format here) and kept verbatim: ``&amp;`` stays ``&amp;``."""
    text = "<think>Run it.</think>" + coder_call(
        "run", {"command": "a &amp;&amp; b", "timeout": "30", "dry": "false"}, compact=True
    )
    args = '{"command": "a &amp;&amp; b", "timeout": 30, "dry": false}'
    assert split_check(MIMO, enc(MIMO, text), OPTS) == ("", "Run it.", (("run", args),))


# -------------------------------------------------------------------------------------- Ling 3
def test_ling_thinking_is_off_by_default() -> None:
    assert split_check(LING, enc(LING, "Hello there."), OPTS) == ("Hello there.", "", ())
    on = SessionOptions(tools=TOOLS, chat_template_kwargs={"enable_thinking": True})
    assert split_check(LING, enc(LING, "only reasoning"), on) == ("", "only reasoning", ())


def test_ling_a_call_ends_the_reasoning() -> None:
    on = SessionOptions(tools=TOOLS, thinking=True)
    text = "<think>Need the weather." + ling3_call("get_weather", ("city", "Paris"), ("days", "2"))
    assert split_check(LING, enc(LING, text), on) == ("", "Need the weather.", (WEATHER,))
    bare = ling3_call("get_time")
    assert split_check(LING, enc(LING, bare), OPTS) == ("", "", (("get_time", "{}"),))


def test_ling_marker_tokens_are_markup_even_with_thinking_off() -> None:
    """vLLM's Ling 3 parser with thinking off leaves ``<think>…</think>`` in the content; here the
    marker tokens are markup wherever they come (a look-alike written as text stays text)."""
    assert split_check(LING, enc(LING, "<think>reason</think>answer"), OPTS) == ("answer", "reason", ())
    text = "Type <think> literally."
    assert split_check(LING, plain(LING, text), OPTS) == (text, "", ())


# --------------------------------------------------------------------------------- Hunyuan Hy3
def test_hy3_suffixed_marker_tokens_bind_by_id() -> None:
    text = (
        "Two lookups."
        + hy3_marker("</think>")
        + "On it."
        + hy3_block(hy3_call("get_weather", ("city", "Paris"), ("days", "2")), hy3_call("get_time"))
    )
    ids = [*enc(HY3, text), *enc(HY3, "<｜hy_eos:opensource｜>")]  # the stop never reaches the output
    assert len(enc(HY3, hy3_marker("<tool_calls>"))) == 1
    low_effort = prompted(HY3, hy3_marker("<think>"), tools=TOOLS)
    want = ("On it.", "Two lookups.", (WEATHER, ("get_time", "{}")))
    assert split_check(HY3, ids, low_effort) == want
    no_think = prompted(HY3, hy3_marker("<think>") + hy3_marker("</think>"), tools=TOOLS)
    assert split_check(HY3, enc(HY3, "Hi."), no_think) == ("Hi.", "", ())


def test_hy3_reasoning_effort_is_its_thinking_switch() -> None:
    """Without prompt ids, the template's own switch says where the output starts."""
    text = "Work it out." + hy3_marker("</think>") + "It is 4."
    for effort in ("low", "high"):
        options = SessionOptions(tools=TOOLS, chat_template_kwargs={"reasoning_effort": effort})
        assert split_check(HY3, enc(HY3, text), options) == ("It is 4.", "Work it out.", ())
    no_think = SessionOptions(tools=TOOLS, chat_template_kwargs={"reasoning_effort": "no_think"})
    assert split_check(HY3, enc(HY3, "It is 4."), no_think) == ("It is 4.", "", ())


def test_hy3_calls_without_arguments_inline_or_without_separator() -> None:
    m = hy3_marker
    opened, closed = m("<tool_calls>") + m("<tool_call>"), m("</tool_call>") + m("</tool_calls>")
    inline = f"{opened}get_time{m('<tool_sep>')}{closed}"
    no_sep = f"{opened}get_time{closed}"
    for text in (inline, no_sep):
        assert split_check(HY3, enc(HY3, text), OPTS) == ("", "", (("get_time", "{}"),))


def test_hy3_markers_inside_a_value_are_text() -> None:
    m = hy3_marker
    value = f"see {m('</arg_value>')} and {m('</tool_call>')} inside"
    text = hy3_block(hy3_call("get_weather", ("city", value)))
    args = '{"city": "see </arg_value:opensource> and </tool_call:opensource> inside"}'
    assert split_check(HY3, enc(HY3, text), OPTS) == ("", "", (("get_weather", args),))


def test_hy3_bare_marker_vocabulary(tmp_path: Path) -> None:
    """Hy3-preview's vocabulary spells the markers bare: the same format reads it."""
    bare = ["<think>", "</think>", "<tool_calls>", "</tool_calls>", "<tool_call>", "</tool_call>"]
    bare += ["<tool_sep>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
    (tmp_path / "hy3").mkdir()
    marker_tokenizers.build_marker_tokenizer(bare).save(str(tmp_path / "hy3" / "tokenizer.json"))
    config = tmp_path / "parsetier.toml"
    config.write_text(f'[[models]]\nname = "hy3"\ntokenizer = "{tmp_path / "hy3"}"\n', encoding="utf-8")
    model = ModelRegistry.from_config(config).get("hy3")
    same = str
    text = hy3_block(hy3_call("get_weather", ("city", "Paris"), ("days", "2"), m=same), m=same)
    assert split_check(model, enc(model, text), OPTS) == ("", "", (WEATHER,))


def test_hy3_text_steps_with_suffixed_markers() -> None:
    """A stack that detokenizes itself sends text: the suffixed marker texts are matched literally."""
    text = "Hi." + hy3_block(hy3_call("get_weather", ("city", "Paris"), ("days", "2")))
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
    message = run_text(HY3, pieces, OPTS).final.message
    assert (message.content, [(c.name, c.arguments) for c in message.tool_calls]) == ("Hi.", [WEATHER])


def test_hy3_constraint_writes_the_vocabulary_s_marker_tokens() -> None:
    """A derived constraint names the markers by the vocabulary's own (suffixed) tokens, so what a
    constrained engine generates parses back into the call."""
    root = derive(HY3.grammar, ConstraintRequest(TOOLS, "required", None, True, "off"))
    assert "<tool_calls:opensource>" in json.dumps(to_structural_tag(root), ensure_ascii=False)
    tokenizer = llguidance.LLTokenizer(HY3.tokenizer.to_str(), n_vocab=HY3.vocab_size)

    def matcher() -> llguidance.LLMatcher:
        m = llguidance.LLMatcher(tokenizer, to_lark(root), log_level=0)
        assert not m.is_error(), m.get_error()
        return m

    block = hy3_block(hy3_call("get_weather", ("city", "Paris"), ("days", "2")))
    accepted = matcher()
    assert accepted.consume_tokens(enc(HY3, block)) and accepted.is_accepting(), accepted.get_error()
    assert not matcher().consume_tokens(plain(HY3, block))  # the same text without the marker tokens


# ---------------------------------------------------------------------------- format-file keys
def test_extends_and_token_suffix_are_checked(tmp_path: Path) -> None:
    registry = FormatRegistry()
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nextends = "no_such_format"\n', encoding="utf-8")
    with pytest.raises(GrammarError, match="extends names no built-in format"):
        registry.add_file(bad)
    bad.write_text('name = "bad"\nextends = "step3p5"\n', encoding="utf-8")
    with pytest.raises(GrammarError, match="which extends another format"):
        registry.add_file(bad)
    bad.write_text('name = "bad"\nextends = "hy3"\ntoken_suffix = "(["\n', encoding="utf-8")
    with pytest.raises(GrammarError, match="token_suffix"):
        registry.add_file(bad)
    mine = tmp_path / "my_coder.toml"
    mine.write_text('name = "my_coder"\nextends = "qwen3_coder"\nvalue_trim = "none"\n', encoding="utf-8")
    grammar = registry.add_file(mine)
    base = registry.get("qwen3_coder")
    assert grammar.states == base.states and grammar.value_trim == "none" and grammar.presets == ()
