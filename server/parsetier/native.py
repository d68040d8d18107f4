"""The native core (``parsetier._core``) behind the reference engine's interfaces.

A model's tokenizer is read once into a ``_core.Vocabulary``: every id's vocabulary entry and the
tokenizer's decoder as a list of steps, so the core can decode without ``tokenizers`` (see
``parsetier_core/engine/src/detok.rs``). A decoder the core does not know (WordPiece, a regex
``Replace``, …) leaves the model on the reference engine (``NativeUnsupported``).
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property, partial
from typing import Any

import tokenizers

from parsetier.completion import CompletionSession
from parsetier.core_module import core as _core
from parsetier.core_module import unavailable
from parsetier.engine.call_ids import call_id_seed
from parsetier.engine.describe import NativeUnsupported, describe_grammar
from parsetier.engine.detokenizer import PROBE, PROMPT_CONTEXT, LiteralMarkers
from parsetier.engine.events import Event, EventKind
from parsetier.engine.grammar import BoundGrammar
from parsetier.engine.session import (
    FINISH_REASONS,
    PROMPT_TAIL,
    InvalidInput,
    Session,
    StepOutput,
    WrongState,
    _tool_schemas,
    annotated_feed,
    start_and_echo,
)
from parsetier.logprobs import StepAnnotator
from parsetier.messages import (
    Delta,
    Final,
    Message,
    SessionOptions,
    StepLogprobs,
    Tool,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from parsetier.models import Model

_STEP_KINDS = frozenset({"ByteLevel", "ByteFallback", "Fuse", "Replace", "Strip", "Metaspace"})


def decoder_steps(spec: dict[str, Any] | None) -> list[tuple[str, str, str, int, int]] | None:
    """The tokenizer's decoder (its JSON) as the core's steps, sequences flattened; None when the
    tokenizer has no decoder. Raises ``NativeUnsupported`` for a step the core lacks."""
    if spec is None:
        return None
    steps: list[tuple[str, str, str, int, int]] = []

    def add(node: dict[str, Any]) -> None:
        kind = str(node.get("type"))
        if kind == "Sequence":
            for child in node.get("decoders") or ():
                add(child)
            return
        if kind not in _STEP_KINDS:
            raise NativeUnsupported(f"decoder {kind}")
        if kind == "Replace":
            pattern = node.get("pattern") or {}
            if "String" not in pattern:
                raise NativeUnsupported("decoder Replace with a regex pattern")
            steps.append((kind, str(pattern["String"]), str(node.get("content", "")), 0, 0))
        elif kind == "Strip":
            start, stop = int(node.get("start", 0)), int(node.get("stop", 0))
            steps.append((kind, str(node["content"]), "", start, stop))
        elif kind == "Metaspace":
            scheme = node.get("prepend_scheme")
            if scheme is None:
                raise NativeUnsupported("decoder Metaspace without prepend_scheme")
            steps.append((kind, str(node.get("replacement", "▁")), "", int(scheme != "never"), 0))
        else:
            steps.append((kind, "", "", 0, 0))

    add(spec)
    return steps


def vocabulary(tokenizer: tokenizers.Tokenizer, id_space: int) -> Any:
    """The tokenizer as the core decodes it: ``id_to_token`` of every id below ``id_space``."""
    if _core is None:
        raise NativeUnsupported("the native core is not built (make native)")
    decoder = tokenizer.decoder
    steps = decoder_steps(None if decoder is None else json.loads(decoder.__getstate__()))
    tokens: list[str | None] = [None] * id_space
    for text, tid in tokenizer.get_vocab(with_added_tokens=False).items():
        if tid < id_space:
            tokens[tid] = text
    added = tokenizer.get_added_tokens_decoder()
    for tid, tok in added.items():
        if tid < id_space:
            tokens[tid] = tok.content
    try:
        return _core.Vocabulary(tokens, steps, sorted(added), tokenizer.token_to_id(PROBE))
    except ValueError as exc:
        raise NativeUnsupported(str(exc)) from None


_lock = threading.Lock()
_vocabularies: dict[int, tuple[tokenizers.Tokenizer, Any]] = {}
_detokenizers: dict[tuple[int, int], tuple[BoundGrammar, Any]] = {}


def detokenizer(tokenizer: tokenizers.Tokenizer, grammar: BoundGrammar) -> Any:
    """The ``_core.Detokenizer`` of a tokenizer bound to a grammar, built once and shared by every
    session (the objects are kept alive with it, so the ids used as keys stay theirs)."""
    key = (id(tokenizer), id(grammar))
    found = _detokenizers.get(key)
    if found is not None:
        return found[1]
    with _lock:
        vocab = _vocabularies.get(id(tokenizer))
        if vocab is None:
            vocab = (tokenizer, vocabulary(tokenizer, grammar.vocab_size))
            _vocabularies[id(tokenizer)] = vocab
        marks = [(tid, text, sentinel) for tid, (text, sentinel) in grammar.mark_of_id.items()]
        known = None if grammar.known_ids is None else sorted(grammar.known_ids)
        made = _core.Detokenizer(vocab[1], marks, grammar.vocab_size, known)
        _detokenizers[key] = (grammar, made)
        return made


# --------------------------------------------------------------------------- sessions
ENGINES = ("native", "reference")
_engine = "native"
_grammars: dict[int, tuple[BoundGrammar, Any]] = {}
_refused: dict[str, str] = {}
"""Model name → why its sessions run on the reference engine (logged once)."""

log = logging.getLogger("parsetier.native")


def set_engine(engine: str) -> None:
    """``parsetier serve --engine``: which engine chat sessions run on (``native`` by default)."""
    global _engine
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    _engine = engine


def engine() -> str:
    return _engine


def native_grammar(grammar: BoundGrammar) -> Any:
    """The ``_core.Grammar`` of a bound grammar, described once and shared."""
    found = _grammars.get(id(grammar))
    if found is not None:
        return found[1]
    try:
        made = _core.Grammar(describe_grammar(grammar))
    except ValueError as exc:  # NativeUnsupported, or a description the core refuses
        raise NativeUnsupported(str(exc)) from None
    with _lock:
        _grammars[id(grammar)] = (grammar, made)
    return made


_MODELS = 64
_model_parts: dict[int, tuple[Model, tuple[Any, Any]]] = {}
"""``id(model)`` → (that model, its ``native_parts``): the last ``_MODELS`` models the core served,
each found with one lookup at a session's open (its detokenizer and grammar are two lookups of
their own, under keys made per call)."""


def native_parts(model: Model) -> tuple[Any, Any] | None:
    """(detokenizer, grammar) of a model the core serves; None (said once in the log, kept for
    ``fallback_reason``) when it does not."""
    found = _model_parts.get(id(model))
    if found is not None and found[0] is model:
        return found[1]
    if model.name in _refused:
        return None
    try:
        if _core is None:
            raise NativeUnsupported(unavailable)
        parts = detokenizer(model.tokenizer, model.grammar), native_grammar(model.grammar)
        with _lock:
            if len(_model_parts) >= _MODELS:
                _model_parts.pop(next(iter(_model_parts)))
            _model_parts[id(model)] = (model, parts)
        return parts
    except NativeUnsupported as exc:
        _refused[model.name] = str(exc)
        log.warning("model %s runs on the reference engine: %s", model.name, exc)
        return None


def prepared(model: Model) -> bool:
    """Whether a session of ``model`` opens without building anything: the reference engine
    serves, or the core's parts for it are built (or refused). Building them takes 0.1-0.5 s
    (a vocabulary's tables, the grammar's description), which the service does in a worker
    thread with the model's load (``prepare``), never on its event loop."""
    return (
        _engine != "native"
        or model.name in _refused
        or (id(model.grammar) in _grammars and (id(model.tokenizer), id(model.grammar)) in _detokenizers)
    )


def prepare(model: Model) -> Model:
    """``model`` with the parts its native sessions need built (see ``prepared``)."""
    if _engine == "native":
        native_parts(model)
    return model


def fallback_reason(model_name: str) -> str | None:
    """Why a model's sessions run on the reference engine, once a session found out."""
    return _refused.get(model_name)


def open_session(
    model: Model, options: SessionOptions, shared: SessionOptions | None = None
) -> Session | CompletionSession | NativeSession:
    """The session a request asks for: a completion when it sets completion options (reference
    engine), else a chat session on the selected engine, the reference one for a model whose
    grammar or tokenizer the core does not serve. ``shared``: ``options`` with the per-session
    fields at their defaults, one value shared by the opens that set the same options
    (``convert.opening_of``): a native session then derives what depends on those options
    once per model (``_opening_parts``)."""
    if options.completion is not None:
        return CompletionSession(model, options)
    if _engine == "native":
        parts = native_parts(model)
        if parts is not None:
            return native_session(model, options, parts, shared)
    return Session(model, options)


def native_session(
    model: Model, options: SessionOptions, parts: tuple[Any, Any], shared: SessionOptions | None = None
) -> NativeSession:
    """``NativeSession(model, options, parts, shared)``, a ``_StepSession`` when it returns no token
    ids. The class is chosen here rather than by a ``__new__``: a Python ``__new__`` is a call of
    its own at every open. (``NativeSession`` made directly serves the same, with ``feed`` in
    its dict.)"""
    cls = NativeSession if options.return_token_ids else _StepSession
    return cls(model, options, parts, shared)


_OPENINGS = 64
_openings: dict[tuple[int, int], tuple[Model, SessionOptions, Any, Any, str, str]] = {}
"""(``id(model)``, ``id(shared options)``) → (that model, those options, their
``_core.SessionOpener``, ``_core.Tools``, start state, echo): the last ``_OPENINGS`` pairs
sessions were opened with (the objects are kept with their values, so the ids stay theirs)."""


def _opener(parts: tuple[Any, Any], tools: Any, start: str, echo: str, options: SessionOptions) -> Any:
    """The ``_core.SessionOpener`` of a model's native ``parts`` with ``options``' parser options
    (``describe_config``'s fields, passed as arguments: no JSON written or read), its native
    ``tools``, start state and echo; ``opener.session(prompt tail, call-id seed)`` makes each
    session. One place builds them, whether kept per shared options or made for one session."""
    return _core.SessionOpener(
        *parts,
        tools,
        start,
        options.events,
        include_reasoning=options.include_reasoning,
        tool_choice=options.tool_choice,
        parallel_tool_calls=options.parallel_tool_calls,
        complete_tool_calls=options.complete_tool_calls,
        echo=echo,
    )


def _opening_parts(
    model: Model, options: SessionOptions, shared: SessionOptions, parts: tuple[Any, Any]
) -> tuple[Any, Any, str, str]:
    """The ``_core.SessionOpener``, native tools, start state and echo of a session whose options
    are ``shared`` but for the per-session fields (request id, prompt, choice): derived once per
    model and ``shared``. The start state depends on the prompt when the format reads it
    (``start_and_echo``): such a session with prompt ids derives its own, and has no opener
    (None: an opener of its own is made for it, ``_opener``)."""
    key = (id(model), id(shared))
    found = _openings.get(key)
    if found is None or found[0] is not model or found[1] is not shared:
        schemas = _tool_schemas(shared)
        start, echo = start_and_echo(model.grammar, shared, model.spec.thinking, model.tokenizer)
        tools = native_tools(shared.tools, schemas)
        found = (model, shared, _opener(parts, tools, start, echo, shared), tools, start, echo)
        with _lock:
            if len(_openings) >= _OPENINGS:
                _openings.pop(next(iter(_openings)))
            _openings[key] = found
    if options.prompt_token_ids and model.grammar.grammar.prompt:
        start, echo = start_and_echo(
            model.grammar, options, model.spec.thinking, model.tokenizer, partial(_prompt_text, parts[0])
        )
        return None, found[3], start, echo
    return found[2], found[3], found[4], found[5]


_TOOL_SETS = 32
_tool_sets: dict[int, tuple[tuple[Tool, ...], Any]] = {}
"""``id(options.tools)`` → (that tuple, its ``_core.Tools``): the last ``_TOOL_SETS`` tool tuples
sessions were opened with. The service hands every request with the same ``tools_json`` the same
tuple (``convert._cached_tools``), so a deployment's sessions share one native copy of their
schemas instead of writing and reading them as JSON at every open (~35 µs of a ~50 µs open for
peer-bench's two tools). Like that cache, it relies on nothing changing a schema once a session
was opened with it."""


def native_tools(tools: tuple[Tool, ...], schemas: dict[str, dict[str, Any]]) -> Any:
    """The ``_core.Tools`` of a session's tools (``schemas``: ``_tool_schemas`` of them)."""
    found = _tool_sets.get(id(tools))
    if found is not None and found[0] is tools:
        return found[1]
    made = _core.Tools(json.dumps([[name, schema] for name, schema in schemas.items()], ensure_ascii=False))
    with _lock:
        if len(_tool_sets) >= _TOOL_SETS:
            _tool_sets.pop(next(iter(_tool_sets)))
        _tool_sets[id(tools)] = (tools, made)
    return made


def _prompt_text(detok: Any, prompt_ids: Sequence[int]) -> str:
    """The prompt tail's text in sentinel form from the core's scanner (``start_and_echo``)."""
    return str(detok.scanner().text(prompt_ids))


def _check_prompt(session: NativeSession, detok: Any, prompt_ids: Sequence[int]) -> None:
    """``Session._check_ids`` of the prompt, its ids compared in the core (a long prompt's ids
    are thousands of Python comparisons); anything the core does not accept goes to that check,
    which refuses it with its usual message."""
    try:
        bad = detok.first_invalid(prompt_ids)
    except (TypeError, OverflowError):
        bad = 0
    if bad is not None:
        Session._check_ids(session, prompt_ids, "prompt_token_ids")  # type: ignore[arg-type]


_EVENT_ORDER = (
    "content",
    "reasoning_start",
    "reasoning",
    "reasoning_end",
    "tool_call_start",
    "tool_arguments",
    "tool_call_end",
    "end",
)
"""``EventKind`` values in the core's order (``events.rs``): the core builds ``Event`` values."""
if _core is not None:
    _core.bind_events(Event, [EventKind(v) for v in _EVENT_ORDER])
    _core.bind_values(
        StepOutput,
        [StepOutput.__dict__[f] for f in ("deltas", "events", "final")],
        Delta,
        [Delta.__dict__[f] for f in ("reasoning", "content", "tool_calls", "logprobs", "token_ids")],
        ToolCallDelta,
        [ToolCallDelta.__dict__[f] for f in ("index", "arguments", "id", "name")],
    )


class NativeSession:
    """``Session`` on the native core: the same contract (``feed`` / ``feed_text`` / ``finish`` →
    ``StepOutput``; ``InvalidInput`` / ``WrongState``), byte-identical output. Python keeps the
    checks, the session's options, logprob attribution (``StepAnnotator`` over the deltas) and
    the text steps' literal markers; the core runs ids → pieces → machine → assembler.

    A session that returns no token ids is made a ``_StepSession``, whose ``feed`` is a slot
    (``native_session``)."""

    def __init__(
        self,
        model: Model,
        options: SessionOptions | None,
        parts: tuple[Any, Any],
        shared: SessionOptions | None = None,
    ) -> None:
        options = options or SessionOptions()
        self.model = model
        self.options = options
        self._vocab = model.vocab_size
        self._known_ids = model.grammar.known_ids
        detok = parts[0]
        if options.prompt_token_ids:  # (an empty prompt has nothing to check)
            _check_prompt(self, detok, options.prompt_token_ids)
        opener = None
        if shared is not None:  # ``options`` but for the per-session fields (``open_session``)
            opener, tools, start, echo = _opening_parts(model, options, shared, parts)
        else:
            tools = native_tools(options.tools, _tool_schemas(options))
            # The prompt terminal that chose the start state may be repeated by the model (markup).
            start, echo = start_and_echo(
                model.grammar, options, model.spec.thinking, model.tokenizer, partial(_prompt_text, detok)
            )
        self.call_id_seed = call_id_seed(options)
        """What the session's call ids derive from, drawn once (``Session.call_id_seed``)."""
        prompt_tail = options.prompt_token_ids[-PROMPT_CONTEXT:]
        if opener is None:  # no shared options, or a start state that depends on the prompt
            opener = _opener(parts, tools, start, echo, options)
        self._core = opener.session(prompt_tail, self.call_id_seed)
        if len(options.prompt_token_ids) > PROMPT_TAIL:
            self.options = replace(options, prompt_token_ids=options.prompt_token_ids[-PROMPT_TAIL:])
        self._literals: LiteralMarkers | None = None
        self._finished = False
        self._parse_only = not options.return_token_ids
        if self._parse_only:
            # The per-token path is one native call with no Python frame: ``feed`` is the core's
            # ``step``, which hands whatever it does not take (logprobs, a bad id, an empty step,
            # a finished session) to ``_checked_feed`` of the session this weak reference reaches
            # (no cycle, and one small object per session where a ``WeakMethod`` was five).
            self._core.fallback = weakref.ref(self)
            self.feed = self._core.step  # type: ignore[method-assign]

    _check_ids = Session._check_ids

    @cached_property
    def _annotator(self) -> StepAnnotator:
        """Logprobs and token ids on the deltas, made by the first step that needs it (a session
        that returns neither never holds one)."""
        options = self.options
        return StepAnnotator(
            self.model.token_bytes,
            self._check_ids,
            show_reasoning=options.include_reasoning,
            return_token_ids=options.return_token_ids,
            collect=options.collect_in_final,
        )

    @property
    def finished(self) -> bool:
        return self._finished

    def wire_core(self) -> Any:
        """The core session, for a native wire renderer (``dialects.renderer``) to read its steps."""
        return self._core

    def _checked_feed(self, token_ids: Sequence[int], logprobs: StepLogprobs | None = None) -> StepOutput:
        if self._finished:
            raise WrongState("the session has finished; no more input is accepted")
        self._check_ids(token_ids, "token_ids")
        if logprobs is None and self._parse_only:
            return self._feed(token_ids)
        return annotated_feed(self, self._core, token_ids, logprobs)

    feed = _checked_feed
    """``Session.feed``; a session that returns no token ids has the core's ``step`` instead."""

    def _feed(self, token_ids: Sequence[int]) -> StepOutput:
        if not token_ids:
            return StepOutput()
        return self._core.feed(list(token_ids))

    def feed_text(self, text: str, tokens: int = 0) -> StepOutput:
        if self._finished:
            raise WrongState("the session has finished; no more input is accepted")
        if tokens < 0:
            raise InvalidInput("tokens must not be negative")
        if not self._core.ids_seen:
            if self._literals is None:
                self._literals = LiteralMarkers(self.model.grammar)
            text = self._literals.convert(text)
        return self._core.feed_text(text, tokens)

    def finish(self, reason: str = "stop", matched_stop: int | str | None = None) -> StepOutput:
        if self._finished:
            raise WrongState("the session has finished; no more input is accepted")
        if reason not in FINISH_REASONS:
            raise InvalidInput(f"finish_reason must be one of {', '.join(FINISH_REASONS)}, not {reason!r}")
        self._finished = True
        held = self._literals.flush() if self._literals is not None else ""
        stop_text = None
        if self.options.include_stop_text and matched_stop is not None and reason == "stop":
            if isinstance(matched_stop, int):
                stop_text = self.model.grammar.token_text.get(matched_stop, "")
            else:
                stop_text = matched_stop
        out, last = self._core.finish(reason, held, stop_text or None)
        if "_annotator" in self.__dict__:
            self._annotator.finish(out.deltas)  # tokens of a character the end cut
        finish_reason, completion, reasoning_tokens, content, reasoning, calls = last
        out.final = Final(
            finish_reason,
            Usage(completion, reasoning_tokens),
            Message(content, reasoning, tuple(ToolCall(*c) for c in calls)),
            *(self._annotator.collected() if "_annotator" in self.__dict__ else ((), ())),
        )
        return out

    def finish_reply(self, ledger: Any, reason: str, key: str | None) -> tuple[bytes, str] | None:
        """``finish(reason)`` (no matched stop) and its reply written by the core for the
        protocol that keeps ``ledger`` (``_core.finish_reply``): the reply's bytes and the final
        result's finish reason. None, nothing done, when the final result needs Python (text a
        text step still holds, logprobs or ids collected for it) or the core leaves it (the
        ledger is not bound to this session: ``rules.core_steps``)."""
        if _finish_reply is None or self._finished or self._literals is not None:
            return None
        if "_annotator" in self.__dict__ and self._annotator.holds():
            return None
        done = _finish_reply(ledger, reason, key)
        if done is not None:
            self._finished = True
        return done


class _StepSession(NativeSession):
    """A ``NativeSession`` that returns no token ids: its ``feed`` (the core's ``step``) is held
    in a slot, not the instance's dict. Reading it is then the slot descriptor's load; an
    instance attribute that shadows a class's method is a dict lookup on every call in CPython
    3.11 (``session.feed(ids)`` is not specialized then), about 3% of a one-id step."""

    __slots__ = ("feed",)


_finish_reply = None if _core is None else _core.finish_reply
"""``_core.finish_reply`` (None: no core, or one built before it)."""
