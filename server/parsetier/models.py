"""Models: a name bound to a real tokenizer and a format grammar, plus the registry that serves them.

A preset is data (``ModelSpec``); loading it reads the tokenizer and binds the grammar's token-id
terminals to that vocabulary once, so every session of the model shares the compiled result.
"""

from __future__ import annotations

import threading
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import tokenizers

from parsetier import formats
from parsetier.engine.grammar import BoundGrammar, Grammar
from parsetier.eos import eos_token_ids
from parsetier.token_bytes import TokenBytes
from parsetier.tokenizer_sources import load_tokenizer, tokenizer_available, tokenizer_folder


class UnknownModel(KeyError):
    """No model of that name is configured."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown model"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What a model is made of: a format grammar and a tokenizer source, plus request defaults."""

    name: str
    format: str
    tokenizer: str
    """A key of ``tokenizer_sources.SOURCES`` or a path to a tokenizer.json (or its directory)."""
    description: str = ""
    thinking: bool | None = None
    """The chat template's default thinking switch, used when a request leaves it unset."""
    serves: tuple[str, ...] = ()
    """Hugging Face repos whose output this preset parses (informational, shown by ListModels)."""
    eos_token_ids: tuple[int, ...] = ()
    """Stop ids besides those the tokenizer's directory names (``eos``): for vocabularies shipped
    without a generation_config.json / tokenizer_config.json."""


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


def builtin_presets() -> dict[str, ModelSpec]:
    """Every model preset declared by the built-in format files (``[[presets]]`` tables)."""
    return {spec.name: spec for name in formats.names() for spec in presets_of(formats.get(name))}


def presets_of(grammar: Grammar) -> list[ModelSpec]:
    return [
        ModelSpec(
            name=str(p["name"]),
            format=grammar.name,
            tokenizer=str(p["tokenizer"]),
            description=str(p.get("description", grammar.description)),
            thinking=p.get("thinking"),
            serves=tuple(p.get("serves", ())),
        )
        for p in grammar.presets
    ]


class ModelRegistry:
    """Model specs by name; each model is loaded on first use and then shared."""

    def __init__(self, specs: dict[str, ModelSpec] | None = None) -> None:
        self._specs = dict(builtin_presets() if specs is None else specs)
        self._loaded: dict[str, Model] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, path: str | Path | None) -> ModelRegistry:
        """Presets, plus (or instead of) the models and format files a TOML config names.

        ```toml
        presets = true                     # keep the built-in presets (default true)
        format_files = ["my_family.toml"]  # user formats (and their [[presets]]), same schema as built-ins
        [[models]]
        name = "my-model"
        format = "qwen3"
        tokenizer = "/models/my-model"     # directory with tokenizer.json, or a source key
        thinking = true
        ```
        """
        if path is None:
            return cls()
        path = Path(path)
        config = tomllib.loads(path.read_text(encoding="utf-8"))
        specs = builtin_presets() if config.get("presets", True) else {}
        for file in config.get("format_files", []):
            grammar = formats.register_file(path.parent / file)
            specs.update({spec.name: spec for spec in presets_of(grammar)})
        for entry in config.get("models", []):
            tokenizer = str(entry["tokenizer"])
            if not tokenizer_available(tokenizer) and (path.parent / tokenizer).exists():
                tokenizer = str(path.parent / tokenizer)
            spec = ModelSpec(
                name=entry["name"],
                format=entry["format"],
                tokenizer=tokenizer,
                description=entry.get("description", ""),
                thinking=entry.get("thinking"),
                eos_token_ids=tuple(int(i) for i in entry.get("eos_token_ids", ())),
            )
            formats.get(spec.format)  # fail at start-up, not on the first request
            specs[spec.name] = spec
        return cls(specs)

    def specs(self) -> list[ModelSpec]:
        return [self._specs[n] for n in self.names()]

    def names(self) -> list[str]:
        return sorted(self._specs)

    def get(self, name: str) -> Model:
        """The loaded model, loading it on first use. Raises ``UnknownModel``."""
        model = self._loaded.get(name)
        if model is not None:
            return model
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownModel(f"unknown model {name!r}; known: {', '.join(self.names())}")
        with self._lock:
            model = self._loaded.get(name)
            if model is None:
                tokenizer = load_tokenizer(spec.tokenizer)
                grammar = formats.get(spec.format).bind(tokenizer)
                stop_ids = eos_token_ids(tokenizer, tokenizer_folder(spec.tokenizer), spec.eos_token_ids)
                model = Model(spec, tokenizer, grammar, stop_ids)
                self._loaded[name] = model
        return model

    def describe(self) -> list[ModelInfo]:
        infos = []
        for name in self.names():
            spec = self._specs[name]
            grammar = formats.get(spec.format)
            infos.append(
                ModelInfo(
                    name=name,
                    format=spec.format,
                    tokenizer=spec.tokenizer,
                    tokenizer_available=tokenizer_available(spec.tokenizer),
                    description=spec.description,
                    reasoning=grammar.has_reasoning,
                    tool_calls=grammar.has_tool_calls,
                    serves=spec.serves,
                )
            )
        return infos
