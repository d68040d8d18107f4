"""The session: one request's live parser, detokenizer → scanner → lexer → machine → assembler.

Sans-IO: plain calls in, plain values out; the gRPC servicer, tests, benchmarks and batch jobs all
drive it the same way::

    session = Session(model, SessionOptions(tools=...))
    out = session.feed([151667, 198, ...])      # one decode step's ids, or several steps' at once
    last = session.finish("stop", matched_stop=151645)
    last.final.message, last.final.finish_reason, last.final.usage

However the ids are split across ``feed`` calls, the concatenated deltas and the final message
are the same (``parse`` is the one-call form). Work per call is proportional to its ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import tokenizers

from parsetier.engine.assembler import Assembler
from parsetier.engine.call_ids import call_id_seed, id_maker
from parsetier.engine.detokenizer import LiteralMarkers, TokenScanner
from parsetier.engine.events import Event
from parsetier.engine.grammar import BoundGrammar, Grammar
from parsetier.engine.machine import Machine
from parsetier.logprobs import LogprobError, StepAnnotator
from parsetier.messages import Delta, Final, FinishReason, Message, SessionOptions, StepLogprobs, Usage
from parsetier.status import Code, StatusError
from parsetier.token_bytes import TokenBytes

FINISH_REASONS = ("stop", "length", "abort")


class _Spec(Protocol):
    @property
    def thinking(self) -> bool | None:
        """The chat template's default thinking switch (a request may leave it unset)."""
        ...


class SessionModel(Protocol):
    """What a session reads of its model. ``models.Model`` is one; the engine knows no registry,
    as the native crate's session knows none."""

    @property
    def name(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def tokenizer(self) -> tokenizers.Tokenizer: ...
    @property
    def grammar(self) -> BoundGrammar: ...
    @property
    def token_bytes(self) -> TokenBytes: ...
    @property
    def spec(self) -> _Spec: ...


class SessionError(StatusError):
    """Base of errors a caller caused; the message is meant for the caller."""

    code = Code.INVALID_ARGUMENT


class InvalidInput(SessionError):
    """Bad data: token id outside the vocabulary, unknown tool in tool_choice, malformed options."""


class WrongState(SessionError):
    """A call out of order: feed after finish, finish twice."""

    code = Code.FAILED_PRECONDITION


@dataclass(slots=True)
class StepOutput:
    deltas: list[Delta] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    final: Final | None = None


PROMPT_TAIL = 256
"""Prompt ids searched for multi-token prompt terminals (a generation prompt is short)."""


def start_state(
    grammar: BoundGrammar,
    options: SessionOptions,
    thinking_default: bool | None,
    tokenizer: tokenizers.Tokenizer,
) -> str:
    """Where the output begins: the prompt decides when it says (the last reasoning marker in it),
    else the request's thinking switch, else the format's initial state."""
    return start_and_echo(grammar, options, thinking_default, tokenizer)[0]


def start_and_echo(
    grammar: BoundGrammar,
    options: SessionOptions,
    thinking_default: bool | None,
    tokenizer: tokenizers.Tokenizer,
    prompt_text: Callable[[Sequence[int]], str] | None = None,
) -> tuple[str, str]:
    """``start_state``, and the pattern of the prompt terminal that decided it ("" when the prompt
    did not): the machine reads that marker repeated at the very start of the output as markup
    (a prompt ending ``<think>\n`` and a model that writes ``<think>`` again). ``prompt_text``:
    the prompt tail's text in sentinel form, as a fresh ``TokenScanner`` gives it (the native
    session passes its core's scanner, the same text at a fraction of the cost)."""
    g = grammar.grammar
    if options.prompt_token_ids and g.prompt:
        found = _prompt_text_state(grammar, tokenizer, options.prompt_token_ids, prompt_text)
        if found is not None:
            return found
    return _switch_state(g, options, thinking_default), ""


def _switch_state(g: Grammar, options: SessionOptions, thinking_default: bool | None) -> str:
    thinking = options.thinking if options.thinking is not None else kwargs_thinking(options)
    if thinking is None:
        thinking = thinking_default
    if thinking is False and g.thinking_off:
        return g.thinking_off
    if thinking is True and g.thinking_on:
        return g.thinking_on
    return g.initial


def _prompt_text_state(
    grammar: BoundGrammar,
    tokenizer: tokenizers.Tokenizer,
    prompt_ids: Sequence[int],
    prompt_text: Callable[[Sequence[int]], str] | None = None,
) -> tuple[str, str] | None:
    """The prompt's tail is detokenized into sentinel form, like output, and the prompt terminal
    that ends last in it decides: a marker token (``<think>``) and a marker spanning several
    tokens (Kimi K3's ``<|open|>response<|sep|>``) are found the same way."""
    if prompt_text is not None:
        text = prompt_text(prompt_ids[-PROMPT_TAIL:])
    else:
        scanner = TokenScanner(tokenizer, grammar)
        text = "".join(scanner.piece(tid) for tid in prompt_ids[-PROMPT_TAIL:])
    best: tuple[int, int, str, str] | None = None
    for terminal, state in grammar.grammar.prompt.items():
        pattern = grammar.patterns[terminal]
        at = text.rfind(pattern)
        if at >= 0 and (best is None or (at + len(pattern), len(pattern)) > best[:2]):
            best = (at + len(pattern), len(pattern), state, pattern)
    return (best[2], best[3]) if best else None


def kwargs_thinking(options: SessionOptions) -> bool | None:
    """The thinking switch the chat template was given: ``enable_thinking`` / ``thinking`` (a
    boolean), MiniMax-M3's ``thinking_mode`` (``enabled`` / ``disabled``; ``adaptive`` leaves
    it to the model, so the format's initial state decides), or Hunyuan Hy3's
    ``reasoning_effort`` (``no_think`` pre-closes the reasoning, ``low`` / ``high`` open it)."""
    for key in ("enable_thinking", "thinking"):
        value = options.chat_template_kwargs.get(key)
        if value is not None:
            return str(value).strip().lower() in ("true", "1", "yes", "on")
    mode = str(options.chat_template_kwargs.get("thinking_mode", "")).strip().lower()
    if mode:
        return {"enabled": True, "disabled": False}.get(mode)
    effort = str(options.chat_template_kwargs.get("reasoning_effort", "")).strip().lower()
    return {"no_think": False, "low": True, "high": True}.get(effort)


def _tool_schemas(options: SessionOptions) -> dict[str, dict[str, Any]]:
    names = [t.name for t in options.tools]
    if len(set(names)) != len(names):
        raise InvalidInput("tools: function names must be unique")
    choice = options.tool_choice
    if choice not in ("auto", "none", "required") and choice not in names:
        raise InvalidInput(f"tool_choice names {choice!r}, which is not among the tools")
    return {t.name: t.parameters for t in options.tools}


class Session:
    """One request. Not thread-safe: one caller drives it, as one gRPC stream does."""

    def __init__(self, model: SessionModel, options: SessionOptions | None = None) -> None:
        options = options or SessionOptions()
        self.model = model
        self.options = options
        self._vocab = model.vocab_size
        self._known_ids = model.grammar.known_ids
        self._check_ids(options.prompt_token_ids, "prompt_token_ids")
        schemas = _tool_schemas(options)
        grammar = model.grammar
        self._scanner = TokenScanner(model.tokenizer, grammar, options.prompt_token_ids)
        self._literals: LiteralMarkers | None = None
        """Made by the first text step: most sessions are fed ids only, and it costs more to build
        (a terminal set over every marker text) than the rest of a session."""
        start, echo = start_and_echo(grammar, options, model.spec.thinking, model.tokenizer)
        self._machine = Machine(grammar, start, schemas, echo)
        self.call_id_seed = call_id_seed(options)
        """What the session's tool call ids derive from (random bits when the request gave neither
        a request id nor prompt ids: see ``parsetier.engine.call_ids``)."""
        self._assembler = Assembler(options, id_maker(options, self.call_id_seed))
        # Everything that reads the whole prompt (call ids derive from it) has done so: keep only
        # the tail, so a long prompt costs memory while the session opens, not while it lives.
        if len(options.prompt_token_ids) > PROMPT_TAIL:  # (``replace`` costs ~10 µs an open)
            self.options = replace(options, prompt_token_ids=options.prompt_token_ids[-PROMPT_TAIL:])
        self._annotator = StepAnnotator(
            model.token_bytes,
            self._check_ids,
            show_reasoning=options.include_reasoning,
            return_token_ids=options.return_token_ids,
            collect=options.collect_in_final,
        )
        self._token_text = grammar.token_text
        self._markers = grammar.marker_ids
        self._tokens = 0
        self._ids_seen = False
        self._finished = False
        self._parse_only = not options.return_token_ids
        """No logprobs or ids to put on the deltas unless a step brings logprobs."""

    # ------------------------------------------------------------------ input
    def feed(self, token_ids: Sequence[int], logprobs: StepLogprobs | None = None) -> StepOutput:
        """One token-id delta (any number of ids, from one or several decode steps). With
        ``logprobs`` (one step's), they are resolved onto the last delta this call produced."""
        if self._finished:
            self._check_open()
        self._check_ids(token_ids, "token_ids")
        if logprobs is None and self._parse_only:
            return self._feed(token_ids)
        return annotated_feed(self, self._machine, token_ids, logprobs)

    def _feed(self, token_ids: Sequence[int]) -> StepOutput:
        """The parse of checked ids: one piece per marker, runs of plain ids at once."""
        n = len(token_ids)
        if n == 1:  # the commonest delta: fed with nothing around it
            self._ids_seen = True
            self._tokens += 1
            events = self._machine.feed_piece(self._scanner.piece(token_ids[0]), 1)
            return StepOutput(self._assembler.add(events) if events else [], events)
        if not n:
            return StepOutput()
        self._ids_seen = True
        self._tokens += n
        ids = token_ids if isinstance(token_ids, list) else list(token_ids)
        markers = self._markers
        if markers.isdisjoint(ids):
            return self._output(self._plain(ids))
        events: list[Event] = []
        piece, feed_piece = self._scanner.piece, self._machine.feed_piece
        start = 0
        for i, tid in enumerate(ids):
            if tid in markers:
                if i > start:
                    events += self._plain(ids[start:i])
                events += feed_piece(piece(tid), 1)
                start = i + 1
        if start < n:
            events += self._plain(ids[start:])
        return self._output(events)

    def _plain(self, ids: list[int]) -> list[Event]:
        """A run of plain ids (no marker among them): one piece of text for the machine when it can
        count the run exactly (``Machine.takes_runs``), else one piece per id, as markers get."""
        machine = self._machine
        if len(ids) > 1 and machine.takes_runs:
            return machine.feed_piece(self._scanner.run(ids), len(ids))
        piece, feed_piece = self._scanner.piece, machine.feed_piece
        events: list[Event] = []
        for tid in ids:
            events += feed_piece(piece(tid), 1)
        return events

    def feed_text(self, text: str, tokens: int = 0) -> StepOutput:
        """Already-detokenized text (``tokens`` of output, for usage). Marker texts count as
        markers only while no ids were fed."""
        self._check_open()
        if tokens < 0:
            raise InvalidInput("tokens must not be negative")
        self._tokens += tokens
        if not self._ids_seen:
            if self._literals is None:
                self._literals = LiteralMarkers(self.model.grammar)
            text = self._literals.convert(text)
        return self._output(self._machine.feed_piece(text, tokens))

    def finish(self, reason: str = "stop", matched_stop: int | str | None = None) -> StepOutput:
        """End of output: flush what was held back; return the last deltas and the final result."""
        self._check_open()
        if reason not in FINISH_REASONS:
            raise InvalidInput(f"finish_reason must be one of {', '.join(FINISH_REASONS)}, not {reason!r}")
        self._finished = True
        events = self._machine.feed_piece(self._literals.flush() if self._literals is not None else "", 0)
        if self._ids_seen:
            events += self._machine.feed_piece(self._scanner.flush(), 0)
        if self.options.include_stop_text and matched_stop is not None and reason == "stop":
            if isinstance(matched_stop, int):
                stop_text = self._token_text.get(matched_stop, "")
            else:
                stop_text = matched_stop
            if stop_text:
                events += self._machine.feed_piece(stop_text, 0)
        events += self._machine.finish(cut=reason != "stop")
        out = self._output(events)
        self._annotator.finish(out.deltas)  # tokens of a character the end cut
        finish_reason: FinishReason = reason  # type: ignore[assignment]
        named = self.options.tool_choice not in ("auto", "none", "required")  # a forced function
        if reason == "stop" and self._assembler.tool_call_count and not named:
            finish_reason = "tool_calls"
        out.final = Final(
            finish_reason,
            Usage(self._tokens, self._machine.reasoning_tokens),
            self._assembler.message(),
            *self._annotator.collected(),
        )
        return out

    # ------------------------------------------------------------------ helpers
    @property
    def finished(self) -> bool:
        return self._finished

    def _output(self, events: list[Event]) -> StepOutput:
        if not events:  # half a marker, held text: nothing for the assembler to look at
            return StepOutput([], events)
        return StepOutput(self._assembler.add(events), events)

    def _check_open(self) -> None:
        if self._finished:
            raise WrongState("the session has finished; no more input is accepted")

    def _check_ids(self, ids: Sequence[int], what: str) -> None:
        """Every id must be one the tokenizer knows; a bad delta is refused whole, before any of
        it is parsed. Range checks run in C; sparse vocabularies (marker tokenizers) also check
        membership."""
        vocab, known = self._vocab, self._known_ids
        if len(ids) == 1:  # the commonest delta: one comparison, no min/max over a sequence
            if 0 <= ids[0] < vocab and (known is None or ids[0] in known):
                return
        elif not ids:
            return
        if min(ids) < 0 or max(ids) >= vocab or (known is not None and not known.issuperset(ids)):
            bad = next(t for t in ids if not 0 <= t < vocab or (known is not None and t not in known))
            raise InvalidInput(f"{what}: token id {bad} is not in the vocabulary of {self.model.name!r}")


def annotated_feed(
    session: Any, counter: Any, token_ids: Sequence[int], logprobs: StepLogprobs | None
) -> StepOutput:
    """A feed whose deltas carry logprobs, for either engine's session (its ``_feed``,
    ``_annotator`` and ``options``; ``counter`` has the session's ``reasoning_tokens``). With
    reasoning hidden, which ids were reasoning decides whose logprobs are dropped, so the ids go
    in one at a time (the same output; a step is a few ids), each counted as
    ``Usage.reasoning_tokens`` counts it."""
    k = checked_logprobs(session._annotator, token_ids, logprobs)
    if logprobs is None or session.options.include_reasoning:
        out = session._feed(token_ids)
        session._annotator.annotate(out.deltas, token_ids, logprobs, k, None)
        return out
    out, reasoning = StepOutput(), []
    for tid in token_ids:
        before = counter.reasoning_tokens
        one = session._feed((tid,))
        out.deltas += one.deltas
        out.events += one.events
        reasoning.append(counter.reasoning_tokens > before)
    session._annotator.annotate(out.deltas, token_ids, logprobs, k, reasoning)
    return out


def checked_logprobs(annotator: StepAnnotator, ids: Sequence[int], logprobs: StepLogprobs | None) -> int:
    """Alternatives per id of a valid step's logprobs; bad ones are ``InvalidInput``."""
    try:
        return annotator.check(ids, logprobs)
    except LogprobError as exc:
        raise InvalidInput(str(exc)) from None


def parse(
    model: SessionModel, options: SessionOptions, token_ids: Sequence[int], finish_reason: str = "stop"
) -> tuple[Message, Final, list[Delta]]:
    """Non-streaming parse: the whole output in one step. Same result as any streamed split."""
    session = Session(model, options)
    first = session.feed(token_ids)
    last = session.finish(finish_reason)
    assert last.final is not None
    return last.final.message, last.final, first.deltas + last.deltas
