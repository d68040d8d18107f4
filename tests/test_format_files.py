"""Formats are data: validation errors name the problem, and a user format file given in a
config becomes a working model without any Python."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from parsetier import formats
from parsetier.engine.grammar import GrammarError, grammar_from_dict
from parsetier.messages import SessionOptions, Tool
from parsetier.models import ModelRegistry, UnknownModel
from parsetier.session import parse

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
            {"name": "x", "initial": "a", "states": {"a": {"kind": "content", "rules": [{"match": "("}]}}},
            "rule 0",
        ),
    ],
)
def test_grammar_errors_name_the_problem(data: dict, message: str) -> None:
    with pytest.raises(GrammarError, match=message):
        grammar_from_dict(data, source="test.toml")


def test_every_builtin_format_loads_and_names_its_file() -> None:
    names = formats.names()
    assert {"qwen3", "qwen3_coder"} <= set(names)
    for name in names:
        assert formats.get(name).name == name
