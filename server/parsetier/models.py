"""Models: a name bound to a real tokenizer and a format grammar, plus the registry that serves them.

A preset is data (``ModelSpec``); loading it reads the tokenizer and binds the grammar's token-id
terminals to that vocabulary once, so every session of the model shares the compiled result. A
registry owns its formats (``FormatRegistry``): the built-ins plus the user's format files. A model
may instead bring its own format: the ``response_template`` of its tokenizer directory's
``tokenizer_config.json`` (or of its config entry), compiled into a grammar of the same kind
(``parsetier.formats.response_template``).
"""

from __future__ import annotations

import json
import threading
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import tokenizers

from parsetier.engine.grammar import BoundGrammar, Grammar, GrammarError
from parsetier.eos import eos_token_ids
from parsetier.formats import FormatRegistry
from parsetier.formats.response_template import Template, TemplateError, template_grammar, validate
from parsetier.status import Code, StatusError
from parsetier.token_bytes import TokenBytes
from parsetier.tokenizers import (
    SOURCES,
    TokenizerUnavailable,
    load_tokenizer,
    tokenizer_available,
    tokenizer_config,
    tokenizer_folder,
)

FORMAT_FILE = "format_file"
"""A model whose grammar is a format file (a built-in, or one the config lists)."""
RESPONSE_TEMPLATE = "response_template"
"""A model whose grammar is compiled from its ``response_template``; also its ``format`` name."""


class UnknownModel(StatusError, KeyError):
    """No model of that name is configured."""

    code = Code.NOT_FOUND

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown model"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What a model is made of: a format grammar and a tokenizer source, plus request defaults."""

    name: str
    format: str
    tokenizer: str | None
    """A key of ``parsetier.tokenizers.SOURCES`` or a path to a tokenizer directory; None for a
    preset whose vocabulary no package ships, until the user configures one."""
    description: str = ""
    thinking: bool | None = None
    """The chat template's default thinking switch, used when a request leaves it unset."""
    serves: tuple[str, ...] = ()
    """Hugging Face repos whose output this preset parses (informational, shown by ListModels)."""
    eos_token_ids: tuple[int, ...] = ()
    """Stop ids besides those the tokenizer's directory names (``eos``): for vocabularies shipped
    without a generation_config.json / tokenizer_config.json."""
    response_template: Template | None = field(default=None, compare=False, hash=False)
    """The model's own output description, validated; when set it is the model's format
    (``format`` is then ``response_template``)."""

    @property
    def format_source(self) -> str:
        """``response_template`` or ``format_file``: where the model's grammar comes from."""
        return RESPONSE_TEMPLATE if self.response_template is not None else FORMAT_FILE


class TokenizerState(Enum):
    """Where a model's tokenizer stands; only ``READY`` models can open sessions."""

    READY = "ready"
    """A real vocabulary is present: a packaged one whose package is installed, or a configured path."""
    NOT_INSTALLED = "not_installed"
    """A packaged vocabulary whose package (or a configured path) is missing."""
    NOT_CONFIGURED = "not_configured"
    """No package ships this family's vocabulary: configure the model's tokenizer directory."""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What ``ListModels`` reports for one model."""

    name: str
    format: str
    tokenizer: str
    tokenizer_available: bool
    description: str
    reasoning: bool
    tool_calls: bool
    serves: tuple[str, ...] = ()
    tokenizer_state: TokenizerState = TokenizerState.READY
    tokenizer_hint: str = ""
    """What to install or configure when the tokenizer is not ready."""
    format_source: str = FORMAT_FILE
    """``format_file`` or ``response_template`` (``ModelSpec.format_source``)."""


@dataclass(frozen=True, slots=True)
class Model:
    """A loaded model: tokenizer + bound grammar. Immutable and shared by all its sessions."""

    spec: ModelSpec
    tokenizer: tokenizers.Tokenizer = field(repr=False)
    grammar: BoundGrammar = field(repr=False)
    eos_token_ids: frozenset[int] = frozenset()
    """The ids that end the output (see ``eos``)."""
    token_bytes: TokenBytes = field(init=False, repr=False, compare=False)
    """The byte vocabulary (for logprobs), filled per id on first use."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_bytes", TokenBytes(self.tokenizer))

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def vocab_size(self) -> int:
        return self.grammar.vocab_size


def presets_of(grammar: Grammar) -> list[ModelSpec]:
    return [
        ModelSpec(
            p.name,
            grammar.name,
            p.tokenizer,
            p.description or grammar.description,
            p.thinking,
            p.serves,
            eos_token_ids=p.eos_token_ids,
        )
        for p in grammar.presets
    ]


def presets_in(formats: FormatRegistry) -> dict[str, ModelSpec]:
    """Every model preset the formats declare, by name."""
    return {s.name: s for name in formats.names() for s in presets_of(formats.get(name))}


def builtin_presets() -> dict[str, ModelSpec]:
    """Every model preset the built-in format files declare."""
    return presets_in(FormatRegistry())


def _configure_hint(spec: ModelSpec) -> str:
    return (
        f"no package ships the vocabulary of {spec.name!r}: point the config at the model's tokenizer "
        f'directory ([[models]] name = "{spec.name}", tokenizer = "/path/to/{spec.name}"; '
        "tokenizer.json, tokenizer.model or tiktoken.model + tokenizer_config.json)"
    )


class ModelRegistry:
    """Model specs by name, over one set of formats; each model is loaded on first use and shared."""

    def __init__(
        self, specs: Mapping[str, ModelSpec] | None = None, formats: FormatRegistry | None = None
    ) -> None:
        self.formats = formats or FormatRegistry()
        if specs is None:
            specs = presets_in(self.formats)
        self._specs = dict(specs)
        self._loaded: dict[str, Model] = {}
        self._lock = threading.Lock()
        self._template_grammars: dict[str, Grammar] = {}

    @classmethod
    def from_config(cls, path: str | Path | None) -> ModelRegistry:
        """Presets, plus (or instead of) the models and format files a TOML config names.

        ```toml
        presets = true                        # keep the built-in presets (default true)
        format_files = ["my_family.toml"]     # user formats (and their [[presets]]), same schema
        override_format_files = []            # files whose format replaces a built-in of that name
        [[models]]                            # a new model
        name = "my-model"
        format = "qwen3"
        tokenizer = "/models/my-model"        # tokenizer directory (or file), or a source key
        thinking = true
        [[models]]                            # a preset's tokenizer (presets no package serves)
        name = "kimi-k2"
        tokenizer = "/models/Kimi-K2-Instruct"
        ```

        Relative paths are relative to the config file.
        """
        if path is None:
            return cls()
        path = Path(path)
        config = tomllib.loads(path.read_text(encoding="utf-8"))
        formats = FormatRegistry()
        added: list[Grammar] = [formats.add_file(path.parent / f) for f in config.get("format_files", [])]
        added += [
            formats.add_file(path.parent / f, override=True) for f in config.get("override_format_files", [])
        ]
        specs: dict[str, ModelSpec] = {}
        if config.get("presets", True):
            specs = presets_in(formats)
        for grammar in added:
            specs.update({spec.name: spec for spec in presets_of(grammar)})
        for entry in config.get("models", []):
            spec = _model_entry(entry, specs, path.parent)
            if spec.response_template is None:
                formats.get(spec.format)  # fail at start-up, not on the first request
            else:
                template_grammar(spec.response_template, spec.name)  # likewise: compile it now
            specs[spec.name] = spec
        return cls(specs, formats)

    def add_model_dir(self, directory: str | Path, name: str | None = None) -> ModelSpec:
        """Serve a Hugging Face tokenizer directory whose ``tokenizer_config.json`` carries a
        ``response_template`` (``parsetier serve --model-dir``): the directory is all the model
        needs. ``name`` defaults to the directory's name; a name already served is an error."""
        path = Path(directory).expanduser()
        name = name or path.resolve().name
        if name in self._specs:
            raise GrammarError(f"{path}: a model named {name!r} is already served; name it (NAME=DIR)")
        if not tokenizer_available(str(path)):
            raise GrammarError(
                f"{path}: no tokenizer there (tokenizer.json, tokenizer.model or tiktoken.model)"
            )
        template = directory_template(str(path))
        if template is None:
            raise GrammarError(f"{path}: its tokenizer_config.json has no response_template (give a format)")
        spec = ModelSpec(
            name, RESPONSE_TEMPLATE, str(path), "from its response_template", response_template=template
        )
        template_grammar(template, name)
        self._specs[name] = spec
        return spec

    def specs(self) -> list[ModelSpec]:
        return [self._specs[n] for n in self.names()]

    def names(self) -> list[str]:
        return sorted(self._specs)

    def loaded(self, name: str) -> Model | None:
        """The model if it is loaded already (no loading, no lock), else None."""
        return self._loaded.get(name)

    def get(self, name: str) -> Model:
        """The loaded model, loading it on first use. Raises ``UnknownModel``, or
        ``TokenizerUnavailable`` when its tokenizer is missing or not configured."""
        model = self._loaded.get(name)
        if model is not None:
            return model
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownModel(f"unknown model {name!r}; known: {', '.join(self.names())}")
        if spec.tokenizer is None:
            raise TokenizerUnavailable(_configure_hint(spec))
        with self._lock:
            model = self._loaded.get(name)
            if model is None:
                tokenizer = load_tokenizer(spec.tokenizer)
                grammar = BoundGrammar.build(self._unbound(spec, tokenizer), tokenizer)
                stop_ids = eos_token_ids(tokenizer, tokenizer_folder(spec.tokenizer), spec.eos_token_ids)
                model = Model(spec, tokenizer, grammar, stop_ids)
                self._loaded[name] = model
        return model

    def _unbound(self, spec: ModelSpec, tokenizer: tokenizers.Tokenizer | None = None) -> Grammar:
        """The model's grammar before binding: its format file's, or its template compiled (with
        the vocabulary's special tokens when ``tokenizer`` is given; see ``compile_template``)."""
        if spec.response_template is None:
            return self.formats.get(spec.format)
        if tokenizer is None:
            grammar = self._template_grammars.get(spec.name)
            if grammar is None:
                grammar = self._template_grammars[spec.name] = template_grammar(
                    spec.response_template, spec.name
                )
            return grammar
        specials = {tok.content for tok in tokenizer.get_added_tokens_decoder().values() if tok.special}
        return template_grammar(spec.response_template, spec.name, specials)

    def describe(self) -> list[ModelInfo]:
        infos = []
        for name in self.names():
            spec = self._specs[name]
            grammar = self._unbound(spec)
            state, hint = _tokenizer_state(spec)
            infos.append(
                ModelInfo(
                    name=name,
                    format=spec.format,
                    tokenizer=spec.tokenizer or "",
                    tokenizer_available=state is TokenizerState.READY,
                    description=spec.description,
                    reasoning=grammar.has_reasoning,
                    tool_calls=grammar.has_tool_calls,
                    serves=spec.serves,
                    tokenizer_state=state,
                    tokenizer_hint=hint,
                    format_source=spec.format_source,
                )
            )
        return infos


def _tokenizer_state(spec: ModelSpec) -> tuple[TokenizerState, str]:
    if spec.tokenizer is None:
        return TokenizerState.NOT_CONFIGURED, _configure_hint(spec)
    if tokenizer_available(spec.tokenizer):
        return TokenizerState.READY, ""
    if spec.tokenizer in SOURCES:
        return TokenizerState.NOT_INSTALLED, SOURCES[spec.tokenizer].pip_install
    return TokenizerState.NOT_INSTALLED, f"no tokenizer at {spec.tokenizer!r}"


def directory_template(source: str | None) -> Template | None:
    """The validated ``response_template`` of a tokenizer source's ``tokenizer_config.json``, or
    None when it has none. A template ``transformers`` would refuse is a ``TemplateError``."""
    folder = tokenizer_folder(source)
    if folder is None:
        return None
    spec = tokenizer_config(folder).get("response_template")
    if spec is None:
        return None
    return validate(spec, str(folder / "tokenizer_config.json"))


def _entry_template(entry: Mapping[str, Any], name: str, base: Path) -> Template | None:
    """A ``[[models]]`` entry's own ``response_template``: a table, or a JSON file's path."""
    value = entry.get("response_template")
    if value is None:
        return None
    if isinstance(value, str):
        file = Path(value).expanduser()
        file = file if file.is_absolute() else base / file
        try:
            value = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TemplateError(f"config: model {name!r}: response_template {str(file)!r}: {exc}") from None
        return validate(value, str(file))
    return validate(value, f"config: model {name!r}")


def _model_entry(entry: Mapping[str, Any], specs: Mapping[str, ModelSpec], base: Path) -> ModelSpec:
    """One ``[[models]]`` table: a new model (with ``format``, or with a ``response_template``: its
    own, or its tokenizer directory's), or a preset's tokenizer and defaults (name of a preset, no
    ``format``). A ``format`` wins over a template the directory carries."""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise GrammarError("config: every [[models]] entry needs a name")
    tokenizer = entry.get("tokenizer")
    if tokenizer is not None:
        tokenizer = str(tokenizer)
        if not tokenizer_available(tokenizer) and (base / tokenizer).exists():
            tokenizer = str(base / tokenizer)
    template = _entry_template(entry, name, base)
    if "format" not in entry and (template is not None or name not in specs):
        if tokenizer is None:
            raise GrammarError(f"config: model {name!r} needs a tokenizer")
        template = template or directory_template(tokenizer)
        if template is None:
            raise GrammarError(
                f"config: model {name!r} is no preset, so it needs a format, or a tokenizer directory "
                "whose tokenizer_config.json has a response_template"
            )
        return ModelSpec(
            name=name,
            format=RESPONSE_TEMPLATE,
            tokenizer=tokenizer,
            description=str(entry.get("description", "from its response_template")),
            thinking=entry.get("thinking"),
            eos_token_ids=tuple(int(i) for i in entry.get("eos_token_ids", ())),
            response_template=template,
        )
    if "format" not in entry:
        preset = specs.get(name)
        if preset is None:
            raise GrammarError(f"config: model {name!r} is no preset, so it needs a format")
        changes: dict[str, Any] = {"tokenizer": tokenizer or preset.tokenizer}
        for key in ("description", "thinking"):
            if key in entry:
                changes[key] = entry[key]
        if "eos_token_ids" in entry:
            changes["eos_token_ids"] = tuple(int(i) for i in entry["eos_token_ids"])
        return replace(preset, **changes)
    if tokenizer is None:
        raise GrammarError(f"config: model {name!r} needs a tokenizer")
    return ModelSpec(
        name=name,
        format=str(entry["format"]),
        tokenizer=tokenizer,
        description=str(entry.get("description", "")),
        thinking=entry.get("thinking"),
        eos_token_ids=tuple(int(i) for i in entry.get("eos_token_ids", ())),
    )
