"""Models served from their Hugging Face ``response_template`` (issue 38): validated as
``transformers`` validates it, compiled into the grammar both engines run, and proven against
``transformers``' own ``parse_response`` on a corpus of outputs, with each difference a policy
(docs/formats.md, *Response templates*).

The templates are the ones ``transformers`` ships as per-model-type fallbacks (Qwen2 / Qwen3,
Qwen3.5, Gemma 4), put into tokenizer directories built from packaged real tokenizers (Gemma 4's
vocabulary is on no package index: its directory holds the test marker tokenizer).
"""

from __future__ import annotations

import copy
import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer
from transformers.utils.chat_parsing.response_templates import load_response_template

import native_diff
from parsetier.engine.session import Session, parse
from parsetier.formats.response_template import TemplateError, template_grammar, validate
from parsetier.messages import SessionOptions, Tool
from parsetier.models import RESPONSE_TEMPLATE, ModelRegistry
from response_templates import (
    FALLBACKS,
    FAMILIES,
    TEMPLATES,
    accumulated_view,
    encode,
    m,
    parsetier_view,
    transformers_view,
    write_dir,
)
from testkit.format_renderers import Parts

# --- validation: the same templates refused, with the place named -------------------------------

_BASE = FALLBACKS["qwen2"]


def _with(path: str, value: Any) -> dict[str, Any]:
    """The Qwen template with one key set (``fields.tool_calls.open``), or deleted (value ...)."""
    out = copy.deepcopy(_BASE)
    keys = path.split(".")
    node = out
    for key in keys[:-1]:
        node = node[key]
    if value is ...:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return out


INVALID = [
    ("not a table", ["x"], "response_template"),
    ("version", _with("version", 2), "response_template.version"),
    ("unknown top key", _with("extra", 1), "response_template"),
    ("defaults", _with("defaults", []), "response_template.defaults"),
    ("no fields", _with("fields", {}), "response_template.fields"),
    ("field not a table", _with("fields.content", "text"), "fields.content"),
    ("unknown field key", _with("fields.content.colour", "red"), "fields.content"),
    ("unknown parser", _with("fields.content.content", "yaml"), "fields.content.content"),
    ("literal and pattern", _with("fields.tool_calls.open", "<tool_call>"), "fields.tool_calls"),
    ("empty list", _with("fields.reasoning_content.open", []), "fields.reasoning_content.open"),
    ("list of non-strings", _with("fields.reasoning_content.open", ["<think>", 1]), "reasoning_content.open"),
    ("empty literal", _with("fields.reasoning_content.close", ""), "fields.reasoning_content.close"),
    ("bad literal type", _with("fields.reasoning_content.close", 3), "fields.reasoning_content.close"),
    ("bad regex", _with("fields.tool_calls.open_pattern", "(<tool_call>"), "tool_calls.open_pattern"),
    ("join not a string", _with("fields.tool_calls.join", 1), "fields.tool_calls.join"),
    ("join without repeats", _with("fields.content.join", "\n"), "fields.content.join"),
    ("transform_each type", _with("fields.tool_calls.transform_each", "yes"), "tool_calls.transform_each"),
    ("transform_each alone", _with("fields.content.transform_each", True), "content.transform_each"),
    ("placeholder in text", _with("fields.tool_calls.transform", {"function": "f: {content}"}), "transform"),
    (
        "named group unread",
        _with("fields.content.close_pattern", "(?P<end><\\|im_end\\|>)"),
        "fields.content",
    ),
    ("two implicit fields", _with("fields.reasoning_content.open", ...), "response_template.fields"),
    ("no start anchor", _with("start_anchor", ...), "response_template"),
]


@pytest.mark.parametrize(("case", "template", "where"), INVALID, ids=[c[0] for c in INVALID])
def test_templates_transformers_refuses_are_refused_naming_the_key(
    case: str, template: Any, where: str
) -> None:
    with pytest.raises(ValueError):
        load_response_template(template)
    with pytest.raises(TemplateError) as err:
        validate(template, "models/x/tokenizer_config.json")
    message = str(err.value)
    assert message.startswith("models/x/tokenizer_config.json: response_template"), message
    assert where in message, (case, message)


@pytest.mark.parametrize("key", sorted(TEMPLATES))
def test_transformers_own_templates_are_valid_and_compile(key: str) -> None:
    load_response_template(TEMPLATES[key])
    grammar = template_grammar(validate(TEMPLATES[key], key), key)
    assert grammar.has_reasoning and grammar.has_tool_calls


UNSERVABLE = [
    ("a lookahead", _with("fields.tool_calls.open_pattern", "<tool_call>(?=\\n)"), "tool_calls.open_pattern"),
    ("a field with no place", _with("fields.summary", {"open": "<s>", "close": "</s>"}), "fields.summary"),
    ("json content args", _with("fields.tool_calls.content_args", {"unquoted_keys": True}), "content_args"),
    (
        "a transform of another shape",
        _with("fields.tool_calls.transform", {"call": "{content}"}),
        "transform",
    ),
    (
        "calls without an opener",
        {**_BASE, "fields": {"tool_calls": _BASE["fields"]["tool_calls"] | {"open_pattern": None}}},
        "fields.tool_calls",
    ),
]
del UNSERVABLE[-1][1]["fields"]["tool_calls"]["open_pattern"]


@pytest.mark.parametrize(("case", "template", "where"), UNSERVABLE, ids=[c[0] for c in UNSERVABLE])
def test_valid_templates_the_grammar_cannot_say_are_refused_saying_why(
    case: str, template: Any, where: str
) -> None:
    load_response_template(template)  # transformers takes it
    with pytest.raises(TemplateError) as err:
        template_grammar(validate(template, "cfg"), "x")
    assert where in str(err.value) and "parsetier cannot serve this" in str(err.value), str(err.value)


# --- models from tokenizer directories -------------------------------------------------------------


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("model-dirs")
    return {
        name: write_dir(root, name, fam.tokenizer, TEMPLATES[fam.template]) for name, fam in FAMILIES.items()
    }


@pytest.fixture(scope="module")
def registry(dirs: dict[str, Path]) -> ModelRegistry:
    reg = ModelRegistry({})
    for name, path in dirs.items():
        reg.add_model_dir(path, name)
    return reg


@cache
def _hf(path: str):
    return AutoTokenizer.from_pretrained(path)


WORDS = [
    "Paris",
    "naïve",
    "日本語",
    "🚀",
    "x",
    "42",
    "a b",
    "{",
    "}",
    '"q"',
    "\\",
    "it's",
    "line\nbreak",
    "tab\t",
]
TOOLS = (
    Tool(
        "get_weather",
        {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
    ),
    Tool(
        "set_flags",
        {"type": "object", "properties": {"on": {"type": "boolean"}, "ratio": {"type": "number"}}},
    ),
    Tool("store", {"type": "object", "properties": {"items": {"type": "array"}, "meta": {"type": "object"}}}),
)
OPENAI_TOOLS = [{"type": "function", "function": {"name": t.name, "parameters": t.parameters}} for t in TOOLS]


def _words(rng: random.Random, n: int, family: str) -> str:
    words = [w for w in WORDS if family != "gemma4" or w not in ("{", "}")]
    return " ".join(rng.choice(words) for _ in range(n)).strip() or "ok"


def _value(rng: random.Random, kind: str, family: str) -> Any:
    if kind == "string":
        return _words(rng, rng.randint(1, 4), family).replace("\n", " ")
    if kind == "integer":
        return rng.randint(-5, 500)
    if kind == "number":
        return rng.choice([0.5, 2.25, -1.5])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [rng.randint(0, 9) for _ in range(rng.randint(1, 3))]
    return {"k": rng.randint(0, 9)}


def corpus(family: str, n: int, seed: int = 38) -> list[Parts]:
    """Outputs both parsers must read alike: a reasoning block (the Qwen3.5 prompt opens one),
    an answer, then zero to three calls with arguments of every type."""
    rng = random.Random(f"{family}/{seed}")
    out = []
    for _ in range(n):
        calls = []
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            tool = rng.choice(TOOLS)
            props = tool.parameters["properties"]
            calls.append((tool.name, {k: _value(rng, v["type"], family) for k, v in props.items()}))
        reasoning = (
            _words(rng, rng.randint(1, 8), family) if family == "qwen3.5" or rng.random() < 0.7 else ""
        )
        out.append(
            Parts(
                reasoning, _words(rng, rng.randint(0, 8), family) if rng.random() < 0.8 else "", tuple(calls)
            )
        )
    return out


def _transformers(
    registry: ModelRegistry, dirs: dict[str, Path], family: str, prompt: list[int], ids: list[int]
):
    hf = _hf(str(dirs[family]))
    return hf.parse_response(ids, prefix=prompt, tools=OPENAI_TOOLS)


SHIPPED = ("qwen3", "qwen3.5", "gemma4")
"""Families of the templates transformers ships; the corpus of the templates written here runs
with the slow tests (their vocabularies take seconds to load)."""


@pytest.mark.parametrize(
    "family", [pytest.param(f, marks=() if f in SHIPPED else pytest.mark.slow) for f in sorted(FAMILIES)]
)
def test_parsetier_and_transformers_agree_on_the_corpus(family: str, registry, dirs) -> None:
    """Final message and accumulated deltas equal ``parse_response``'s message, at random
    splits, and both engines give the same deltas step by step."""
    model = registry.get(family)
    fam = FAMILIES[family]
    prompt = encode(model, fam.prompt)
    rng = random.Random(family)
    compared = 0
    for parts in corpus(family, 25):
        ids = encode(model, fam.render(parts))
        want = transformers_view(_transformers(registry, dirs, family, prompt, ids))
        options = SessionOptions(tools=TOOLS, prompt_token_ids=tuple(prompt), request_id="rt")
        message, _final, _deltas = parse(model, options, ids)
        assert parsetier_view(message) == want, (
            parts,
            model.tokenizer.decode(ids, skip_special_tokens=False),
        )
        groups = native_diff.random_groups(rng, ids)
        session = Session(model, options)
        streamed = [d for g in groups for d in session.feed(g).deltas] + session.finish("stop").deltas
        assert accumulated_view(streamed) == want
        compared += native_diff.compare(model, options, groups)
    assert compared, "the native core serves the template's grammar"


# --- look-alikes: parsetier reads markers by id ------------------------------------------------------

LOOKALIKES = {
    "qwen3": ["</tool_call>", "<tool_call>", "</think>", "<|im_end|>"],
    "qwen3.5": ["<tool_call>", "</tool_call>", "</think>", "<|im_end|>"],
    "gemma4": ['<|"|>', "<tool_call|>", "<|tool_call>", "<channel|>"],
    "glm-4.7": ["</tool_call>", "<arg_value>", "</arg_value>", "</think>"],
    "deepseek-v3.1": ["<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁calls▁end｜>", "</think>"],
}
DEFUSED = {"qwen3", "qwen3.5"}
"""Directories whose chat template names the markers as control tokens, which ``transformers``
then matches only by id, as parsetier does."""


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_marker_lookalikes_in_arguments_stay_text(family: str, registry, dirs) -> None:
    """A marker's text written with ordinary tokens, inside a string argument, the reasoning and
    the answer, is text: parsetier matches markers by id. ``transformers`` (token ids, control
    tokens defused) agrees wherever the spelled marker is one of the chat template's control
    tokens (``DEFUSED``); the Gemma 4 and GLM directories have no chat template, so there
    ``transformers`` matches the spelling (Gemma 4's spelled ``<|"|>`` ends its string)."""
    model = registry.get(family)
    fam = FAMILIES[family]
    prompt = encode(model, fam.prompt)
    for look in LOOKALIKES[family]:
        parts = Parts(
            f"think {look} more", f"say {look} now", (("get_weather", {"city": f"a {look} b", "days": 2}),)
        )
        ids = encode(model, fam.render(parts))
        options = SessionOptions(tools=TOOLS, prompt_token_ids=tuple(prompt), request_id="rt")
        message, _, _ = parse(model, options, ids)
        reasoning = parts.reasoning if fam.reasoning else ""
        assert parsetier_view(message) == (parts.content, reasoning, list(parts.calls)), look
        try:
            theirs = transformers_view(_transformers(registry, dirs, family, prompt, ids))
        except ValueError:
            theirs = None  # the region ended at the look-alike and its JSON no longer parses
        if family in DEFUSED:
            assert theirs == parsetier_view(message), look
        elif look == '<|"|>':
            assert theirs != parsetier_view(message), "transformers reads the spelled quote as a delimiter"


def test_a_marker_token_inside_a_json_string_is_string_content(registry, dirs) -> None:
    """The model emitted ``</tool_call>`` as its token inside an argument string: parsetier's JSON
    scanner reads first, so it is string content; ``transformers`` ends the region there and its
    JSON parser fails (policy: string context wins, docs/engine.md)."""
    model = registry.get("qwen3")
    prompt = encode(model, FAMILIES["qwen3"].prompt)
    args = f'{{"city": "a {m("</tool_call>")} b"}}'
    text = f'{m("<tool_call>")}\n{{"name": "get_weather", "arguments": {args}}}\n{m("</tool_call>")}'
    ids = encode(model, text)
    message, _, _ = parse(model, SessionOptions(tools=TOOLS, prompt_token_ids=tuple(prompt)), ids)
    assert parsetier_view(message)[2] == [("get_weather", {"city": "a </tool_call> b"})]
    with pytest.raises(ValueError):
        _transformers(registry, dirs, "qwen3", prompt, ids)


# --- where the two differ: parsetier's policies -------------------------------------------------------


def test_content_around_calls_is_kept_whole(registry, dirs) -> None:
    """``transformers`` keeps a non-repeating field's last region: the answer after a call replaces
    the one before it. parsetier delivers every piece of the answer (nothing is lost)."""
    model = registry.get("qwen3")
    prompt = encode(model, FAMILIES["qwen3"].prompt)
    call = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    ids = encode(model, f"Before.\n{m('<tool_call>')}\n{call}\n{m('</tool_call>')}\nAfter.{m('<|im_end|>')}")
    message, _, _ = parse(model, SessionOptions(tools=TOOLS, prompt_token_ids=tuple(prompt)), ids)
    theirs = transformers_view(_transformers(registry, dirs, "qwen3", prompt, ids))
    assert theirs[0] == "After."
    assert message.content == "Before.\n\nAfter."


def test_xml_values_lose_one_newline_not_all_whitespace(registry, dirs) -> None:
    """``xml-inline``'s ``\\s*(?P<value>.*?)\\s*`` strips every space around a value; the template
    writes one newline each side, and parsetier takes exactly those (as the Qwen3.5 format file
    does): a value's own edge spaces are the model's."""
    model = registry.get("qwen3.5")
    prompt = encode(model, FAMILIES["qwen3.5"].prompt)
    param = "<parameter=city>\n  Paris \n</parameter>"
    call = f"{m('<tool_call>')}\n<function=get_weather>\n{param}\n</function>\n{m('</tool_call>')}"
    ids = encode(model, f"r\n{m('</think>')}\n\n{call}")
    message, _, _ = parse(model, SessionOptions(tools=TOOLS, prompt_token_ids=tuple(prompt)), ids)
    theirs = transformers_view(_transformers(registry, dirs, "qwen3.5", prompt, ids))
    assert theirs[2] == [("get_weather", {"city": "Paris"})]
    assert parsetier_view(message)[2] == [("get_weather", {"city": "  Paris "})]


# --- serving: the registry, the config, ListModels ---------------------------------------------------


def test_a_directory_with_a_template_is_a_model(registry, dirs) -> None:
    infos = {i.name: i for i in registry.describe()}
    assert {n: (i.format, i.format_source, i.tokenizer_available) for n, i in infos.items()} == {
        n: (RESPONSE_TEMPLATE, RESPONSE_TEMPLATE, True) for n in FAMILIES
    }
    model = registry.get("qwen3")
    im_end = model.tokenizer.token_to_id("<|im_end|>")
    assert im_end in model.grammar.dropped_ids, "a special token closing the answer is dropped, not a marker"
    assert model.tokenizer.token_to_id("<tool_call>") in model.grammar.sentinel_of_id


def test_config_entries_read_the_directory_and_a_format_overrides(dirs, tmp_path: Path) -> None:
    template = tmp_path / "template.json"
    template.write_text(json.dumps(FALLBACKS["qwen2"]), encoding="utf-8")
    bare = write_dir(tmp_path, "bare", "qwen3", None)
    config = tmp_path / "models.toml"
    config.write_text(
        "presets = false\n"
        f'[[models]]\nname = "from-dir"\ntokenizer = "{dirs["qwen3"]}"\n'
        f'[[models]]\nname = "overridden"\ntokenizer = "{dirs["qwen3"]}"\nformat = "qwen3"\n'
        f'[[models]]\nname = "from-file"\ntokenizer = "{bare}"\nresponse_template = "template.json"\n',
        encoding="utf-8",
    )
    reg = ModelRegistry.from_config(config)
    sources = {i.name: (i.format, i.format_source) for i in reg.describe()}
    assert sources == {
        "from-dir": ("response_template", "response_template"),
        "overridden": ("qwen3", "format_file"),
        "from-file": ("response_template", "response_template"),
    }
    config.write_text(f'[[models]]\nname = "nothing"\ntokenizer = "{bare}"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="needs a format, or a tokenizer directory"):
        ModelRegistry.from_config(config)


def test_model_dir_flag_errors_name_the_flag(dirs, tmp_path: Path, capsys) -> None:
    from parsetier import cli

    bare = write_dir(tmp_path, "bare", "qwen3", None)
    for value, says in [(str(bare), "has no response_template"), (str(tmp_path / "none"), "no tokenizer")]:
        with pytest.raises(SystemExit) as exit_:
            cli.main(["serve", "--model-dir", value, "--preload", "none", "--port", "0"])
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("parsetier serve: --model-dir: ") and says in line, line


PYTHONIC = {
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close": "</tool_call>",
            "content": "python-call-list",  # a list per region: the field's value is the list
            "transform_each": True,
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}},
        },
        "content": {"close": "<|im_end|>"},
    },
}
"""A template of pythonic calls (``[f(a=1), g()]``), on the Qwen3 vocabulary."""


def test_python_call_lists_read_as_transformers_reads_them(tmp_path: Path) -> None:
    registry = ModelRegistry({})
    registry.add_model_dir(write_dir(tmp_path, "pythonic", "qwen3", PYTHONIC), "pythonic")
    model = registry.get("pythonic")
    assert model.grammar.grammar.states["tool_calls"].dialect == "python"
    hf = _hf(str(tmp_path / "pythonic"))
    prompt = encode(model, FAMILIES["qwen3"].prompt)
    for calls in [
        "[get_weather(city='Paris', days=3)]",
        "[get_weather(city=\"a 'b'\"), set_flags(on=True, ratio=0.5)]",
        "[store(items=[1, 2], meta={'k': None})]",
    ]:
        ids = encode(model, f"Sure.{m('<tool_call>')}{calls}{m('</tool_call>')}{m('<|im_end|>')}")
        message, _, _ = parse(model, SessionOptions(tools=TOOLS, prompt_token_ids=tuple(prompt)), ids)
        want = transformers_view(hf.parse_response(ids, prefix=prompt, tools=OPENAI_TOOLS))
        assert parsetier_view(message) == want, calls
        assert native_diff.compare(model, SessionOptions(prompt_token_ids=tuple(prompt)), [[i] for i in ids])


ANSWER_ONLY = {
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close": "</think>"},
        "content": {"open": "<answer>", "close": "</answer>"},
    },
}
"""No implicit field: text outside the two regions has no place (the template drops it)."""


def test_text_outside_every_region_is_dropped_when_no_field_takes_it(tmp_path: Path) -> None:
    registry = ModelRegistry({})
    registry.add_model_dir(write_dir(tmp_path, "answer-only", "qwen3", ANSWER_ONLY), "answer-only")
    model = registry.get("answer-only")
    assert model.grammar.grammar.states[model.grammar.grammar.initial].markup
    hf = _hf(str(tmp_path / "answer-only"))
    prompt = encode(model, FAMILIES["qwen3"].prompt)
    ids = encode(
        model, f"{m('<think>')}\nhm\n{m('</think>')}\nnoise <answer>Paris.</answer> tail{m('<|im_end|>')}"
    )
    message, _, _ = parse(model, SessionOptions(prompt_token_ids=tuple(prompt)), ids)
    assert (
        parsetier_view(message)
        == transformers_view(hf.parse_response(ids, prefix=prompt))
        == ("Paris.", "hm", [])
    )


def test_a_wrapper_closer_after_each_call_is_refused_saying_why() -> None:
    """MiniMax-M2's invokes share one wrapper: ``</invoke>`` would both end the wrapper's last call
    and go on to the next invoke (docs/formats.md: a format file says it)."""
    tool_calls = {
        "open_pattern": r'\s*(?:<minimax:tool_call>)?\s*<invoke name="(?P<name>[^"]+)">',
        "close_pattern": r"</invoke>\s*(?:</minimax:tool_call>)?",
        "repeats": True,
        "content": "xml-inline",
        "content_args": {"tag_pattern": r'<parameter name="(?P<key>[^"]+)">(?P<value>.*?)</parameter>'},
        "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
    }
    template = {"start_anchor": "]~b]ai\n", "fields": {"tool_calls": tool_calls, "content": {}}}
    load_response_template(template)
    with pytest.raises(TemplateError, match="parsetier cannot serve this: the marker '</invoke>' would lead"):
        template_grammar(validate(template, "cfg"), "x")
