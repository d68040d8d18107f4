"""The state machine: interprets a bound grammar over streamed text and emits semantic events.

Theory of operation
-------------------
Input is text in *sentinel form*: the detokenizer's output where every added token a terminal
uses has been replaced by one private code point (see ``grammar/bind.py``). The machine is always in
one state of the grammar. In every state the lexer looks for that state's terminals only; the
text between terminals means what the state's kind says (content, reasoning, a captured name,
a parameter value, JSON arguments...). A terminal fires its transition: leave the state, run the
transition's actions, enter the next state. JSON-bearing states (``json``, ``envelope``) hand text
to their argument reader first, and only the text after the JSON value ends goes to the lexer, so
a marker written inside a JSON string is never mistaken for one.

Decisions depend only on the text seen so far, never on where deltas were split; what cannot be
decided yet (a suffix that may become a terminal, a terminal whose ``follow`` condition the text
after it does not settle yet) is held back, and nothing emitted is ever taken back. Per-call work
is proportional to the new text.

What a state's kind means is one table, ``_KINDS``: per kind, what its text does, what entering
and leaving it does (leaving with no target is the end of output). Transition actions are a table
too (``_ACTIONS``). Argument readers are reached only through ``ArgumentReader``.

Events carry text as the model wrote it: whitespace is not trimmed here (that is a delivery
choice, made in the assembler), and sentinels left in shown text become their tokens' text again
in one place, where the event is made (``_emit_text``, ``_args``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from parsetier.engine.events import (
    CONTENT,
    END,
    REASONING,
    REASONING_END,
    REASONING_START,
    TOOL_ARGUMENTS,
    TOOL_CALL_END,
    TOOL_CALL_START,
    Event,
    EventKind,
)
from parsetier.engine.grammar import SENTINEL_RE, BoundGrammar, State, Transition
from parsetier.engine.json_scan import COMPLETE, MALFORMED, OPEN
from parsetier.engine.readers import (
    ArgumentReader,
    ElementArgsReader,
    EnvelopeReader,
    GemmaArgsReader,
    JsonArgsReader,
    ParamWriter,
    PythonCallsReader,
    json_string_fragment,
)

_CAPTURE_LIMIT = 4096


class Machine:
    """One request's parse state. ``feed_piece`` text (sentinel form) → events; ``finish`` → last events."""

    def __init__(
        self,
        bound: BoundGrammar,
        start: str,
        tools: Mapping[str, Mapping[str, Any]] | None = None,
        echo: str = "",
    ) -> None:
        """``echo``: the pattern of the prompt terminal that chose ``start`` (``<think>`` when the
        prompt ends inside reasoning). The same marker written again as the output's first
        non-whitespace text is that block's opener repeated: markup, not text."""
        self._bound = bound
        self._states: Mapping[str, State] = bound.grammar.states
        self._tools = tools or {}
        self._trim_values = bound.grammar.value_trim == "newline"
        self._format_ids = bound.grammar.tool_call_id == "format"
        self._tsets = bound.terminal_sets
        self._run_states = bound.run_states
        self._state = self._states[start]
        self._kind = _KINDS[self._state.kind]
        self._scan = self._tsets[start].scan
        """The state's terminal scanner, looked up when the state changes, not per piece of text."""
        self._in_reasoning = self._state.kind == "reasoning"
        self._hold = ""
        self._events: list[Event] = []
        self._tokens = 0
        self.reasoning_tokens = 0
        # capture
        self._capture: list[str] = []
        self._capture_len = 0
        # tool calls
        self._index = -1
        self._call_open = False
        self._params: ParamWriter | None = None
        self._reader: ArgumentReader | None = None
        self._args_emitted = False
        self._args_closed = False
        """The arguments' JSON is whole (an elements reader closed it when its state was left)."""
        self._opening = ""
        self._current_tool = ""
        self._ending = False
        """Set by ``finish``: nothing more will follow, so ``follow`` checks can decide on "end"."""
        self._echo = echo
        self._cut = False
        """Set by ``finish``: the output was cut (``length``/``abort``), not ended by the model."""
        self._stretch: _Stretch | None = None
        """The current block's text since it began (or since its last call ended) while no call is
        open: what a passthrough shows (see ``_Stretch``). None outside blocks and inside calls."""
        self.markup: list[tuple[str, str]] | None = None
        """Set to a list to have the text the machine consumes as markup recorded there, as (why,
        text): the conservation property's other half (tests/test_conservation.py). ``why`` is
        ``terminal``, ``space``, ``skip`` (a ``markup`` state's text), ``capture`` (read by a rule
        or made a call), ``lead`` (the text before a JSON value: a code fence), ``gap``
        (text between top-level elements), ``cut`` (markup cut short at the end of the output),
        ``key`` (a parameter key the model stopped in inside an open call)."""
        self._inner: _Stretch | None = None
        """Loose text inside a call since its last marker (shown at once, ``_skip_text``)."""
        self._block_called = False
        """A call began in the current block: its markers are markup, only its loose text is shown."""
        self._raw: list[str] = []
        """The call ledger: the text of the current block (sentinel form) since it began or its last
        call ended that was not shown before the call: its markup and a call's arguments as the
        model wrote them, and, in place, the text shown as content while the call is open (a word
        Gemma's notation has no place for). A call's ``TOOL_CALL_END`` carries it (``_call_end``):
        the call's text, which the assembler shows as content when ``complete_tool_calls`` finds
        the call invalid, instead of the content it held back while the call was open."""
        self._span: tuple[str, int] = ("", 0)
        """While a reader feeds: the text it reads and where its part not yet in the ledger starts."""
        if self._state.kind not in _TEXT_KINDS:
            self._stretch = _Stretch()
        self._kind.enter(self, self._state, "", None)

    # ------------------------------------------------------------------ public
    def feed_piece(self, text: str, tokens: int = 0) -> list[Event]:
        """Consume ``text`` (sentinel form) produced by ``tokens`` output tokens."""
        if self._in_reasoning:
            self.reasoning_tokens += tokens
        self._tokens += tokens
        if text:
            self._run(text)
        return self._take()

    @property
    def takes_runs(self) -> bool:
        """Whether the next plain text (no marker token in it) may come as one piece for many
        tokens and still be counted exactly: it cannot move the output into or out of reasoning
        (``BoundGrammar.run_states``), and no marker is held back waiting for text to settle it."""
        return self._state.name in self._run_states and (
            not self._hold or SENTINEL_RE.search(self._hold) is None
        )

    def finish(self, cut: bool = False) -> list[Event]:
        """End of output (``cut``: by ``length``/``abort``, not by the model): settle held-back
        text, take the state's ``end`` transition when the model stopped by itself, and close the
        JSON of a call whose arguments the engine writes (XML-style), so it is always valid."""
        self._ending = True
        self._cut = cut
        ending = getattr(self._reader, "end_of_output", None)
        if ending is not None:  # a reader waiting on what follows (Gemma's quote) decides now
            ending()
        if self._hold:
            held, self._hold = self._hold, ""
            self._run(held)  # a terminal waiting on what follows it is decided now
            if self._hold and self._state.kind not in ("skip", "capture"):
                self._kind.text(self, self._hold)
            else:
                self._mark("cut", self._hold)
            self._hold = ""  # in a skip or capture state: a marker cut short, markup
        self._unread()
        state = self._state
        if state.end is not None and not cut:
            self._fire(state.end, "", state)
        self._kind.leave(self, None, "")
        stretch = self._stretch
        if stretch is None and self._state.kind == "capture":  # a key cut inside an open call
            self._mark("cut" if cut else "key", "".join(self._capture))
            self._raw.append("".join(self._capture))
        if stretch is not None and self._state.kind not in _TEXT_KINDS:
            # The output ends inside a block no call is open in. When the model stopped by itself,
            # markup it never finished (a name no [ARGS] follows) is its text: shown, with the
            # block's text before it. A capture the output was cut in is not: a name cut short is
            # not known to be one; only the block's loose text is shown then.
            captured = self._restore("".join(self._capture)) if self._state.kind == "capture" else ""
            if not captured.strip() or cut:
                self._mark("cut", captured)
                captured = ""
            if captured or stretch.loose:
                whole = not cut and not self._block_called
                self._emit_text(CONTENT, (stretch.text() if whole else stretch.loose_text()) + captured)
            self._stretch = _Stretch()
        if self._call_open:
            if not cut:  # the model stopped: its call ends there, whole or broken
                self._call_end()
            elif self._args_closed:
                pass
            elif self._params is not None:
                self._params.close()
            elif not self._args_emitted:
                self._args("{}")
        self._emit(END, index=self._index)
        return self._take()

    # ------------------------------------------------------------------ core loop
    def _run(self, text: str) -> None:
        buf = self._hold + text if self._hold else text
        self._hold = ""
        if self._echo:
            settled = self._settle_echo(buf)
            if settled is None:
                self._hold = buf
                return
            buf = settled
        pos, n = 0, len(buf)
        while pos < n:
            state = self._state
            reader = self._reader
            if reader is not None and reader.status == OPEN:
                self._span = (buf, pos)
                pos = reader.read_from(buf, pos)
                self._span_to(pos)
                if reader.status == MALFORMED:
                    self._unread()
                    if self._call_open and not isinstance(reader, ElementArgsReader):
                        self._call_end()  # the call ends where its arguments break
                if reader.status == COMPLETE and state.done is not None:
                    self._fire(state.done, "", self._state)
                    continue
                if reader.status == OPEN:
                    if pos < n:  # an undecided tail (a tag still being written): wait for more
                        self._hold = buf[pos:]
                    return
                continue
            match, hold = self._scan(buf, pos)
            if state.text_next is not None:
                limit = match.start() if match is not None else hold
                first = _first_non_space(buf, pos, limit)
                if first < limit:
                    if first > pos:  # the whitespace before is this state's, however it was split
                        self._kind.text(self, buf[pos:first])
                    pos = first
                    self._fire(Transition(state.text_next), "", state)
                    continue
            if match is None:
                if hold > pos:
                    self._kind.text(self, buf[pos:hold])
                self._hold = buf[hold:]
                return
            start, end, pattern = match.start(), match.end(), match.group()
            if start > pos:
                self._kind.text(self, buf[pos:start])
            transition = state.on[self._bound.terminal_of_pattern[pattern]]
            if transition.follow:
                verdict = self._followed(transition, buf, end)
                if verdict is None:  # cannot tell yet: wait, from the terminal on
                    self._hold = buf[start:]
                    return
                if not verdict:  # not structural here: its text is the state's own text
                    if state.text_next is not None:  # …and text moves a text_next state on
                        pos = start
                        self._fire(Transition(state.text_next), "", state)
                        continue
                    self._kind.text(self, buf[start:end])
                    pos = end
                    continue
            if transition.turn_close:
                verdict = self._ends_turn(transition, pattern, buf, end)
                if verdict is None:  # cannot tell yet: wait, from the terminal on
                    self._hold = buf[start:]
                    return
                if not verdict:  # a call described, not made: the state's own text
                    self._kind.text(self, buf[start:end])
                    pos = end
                    continue
            pos = end
            if transition.keep:
                pos = start
                self._fire(transition, "", state)
            else:
                self._fire(transition, pattern, state)

    def _settle_echo(self, buf: str) -> str | None:
        """The start of the output, while the prompt's opener may be repeated: the text to parse
        (the repeat removed), or None while the text so far cannot tell."""
        echo = self._echo
        body = buf.lstrip()
        if body.startswith(echo):
            self._echo = ""
            lead = buf[: len(buf) - len(body)]
            if lead:  # whitespace before the repeat is the state's own text
                self._kind.text(self, lead)
            self._mark("terminal", echo)
            return body[len(echo) :]
        if echo.startswith(body) and not self._ending:
            return None
        self._echo = ""
        return buf

    def _followed(self, transition: Transition, buf: str, at: int) -> bool | None:
        """Whether what follows ``buf[at:]`` makes a ``follow`` terminal structural: True, False,
        or None while the text so far cannot tell (only whitespace, or a prefix of a terminal)."""
        pattern = self._bound.follow_patterns[transition.follow]
        if pattern is not None:
            m = pattern.match(buf, at, partial=True)
            if m is None:
                return False
            if not m.partial:
                return True
        elif buf[at:].strip():
            return False
        if not self._ending:
            return None
        # At the end, a follow terminal cut short (``<tool_call>\n<funct``) still counts: markup
        # inside a call block is never content.
        return "end" in transition.follow

    def _ends_turn(self, transition: Transition, opener: str, buf: str, at: int) -> bool | None:
        """Whether the calls an ``ends_turn`` terminal (``opener``, ending at ``buf[at]``) opens end
        the model's turn: True, False, or None while the text so far cannot tell. After each
        ``turn_close`` closer only whitespace, the opener again, or the end of the output may
        follow; a ``turn_unless`` terminal (the reasoning's closer) before that says no."""
        patterns = self._bound.patterns
        close = patterns[transition.turn_close]
        unless = [patterns[name] for name in transition.turn_unless]
        pos = at
        while True:
            found = buf.find(close, pos)
            for p in unless:
                u = buf.find(p, pos)
                if u != -1 and (found == -1 or u < found):
                    return False
            if found == -1:
                return True if self._ending else None
            rest = _first_non_space(buf, found + len(close), len(buf))
            if rest == len(buf):
                return True if self._ending else None
            if buf.startswith(opener, rest):
                pos = rest + len(opener)
                continue
            if opener.startswith(buf[rest:]) and not self._ending:
                return None
            return False

    def _unread(self) -> None:
        """What a reader held and will never write (a key cut off by a marker or by the end of
        the output): the model's text."""
        unread = getattr(self._reader, "unread", None)
        if unread is None:
            return
        if self._ending and self._cut:  # a key cut short by the output's cut: markup
            self._mark("cut", unread())
        else:  # shown (the reader read it up to here; shown, it goes back into the ledger in place)
            held = unread()
            self._unledger(len(held))
            self._loose(self._restore(held))

    def _stop_followed(self, pattern: str, buf: str, at: int) -> bool | None:
        """``_followed`` for a reader's stop (the state's terminal of that pattern)."""
        transition = self._state.on[self._bound.terminal_of_pattern[pattern]]
        return self._followed(transition, buf, at) if transition.follow else True

    # ------------------------------------------------------------------ transitions
    def _fire(self, transition: Transition, pattern: str, state: State) -> None:
        nxt, actions = transition.next, transition.actions
        groups: dict[str, str] = {}
        captured = ""
        matched = True
        if state.kind == "capture":
            if nxt == state.name:  # a terminal that belongs to the captured text (Harmony headers)
                self._capture.append(pattern)
                return
            captured = self._restore("".join(self._capture))
            matched = False
            for rule in state.rules:
                m = rule.pattern.search(captured)
                if m:
                    groups = {k: v for k, v in m.groupdict().items() if v is not None}
                    if state.unescape == "xml":
                        groups = {k: _xml_unescape(v) for k, v in groups.items()}
                    nxt = rule.next or nxt
                    actions = rule.actions
                    matched = True
                    break
        target = self._states[nxt]
        if state.kind in _TEXT_KINDS:
            if target.kind not in _TEXT_KINDS:  # a block begins: a new ledger
                self._raw = [pattern]
        else:  # the capture, unless it is shown (below), and the terminal are the call's text
            if captured and (
                matched or self._stretch is None or captured.isspace() or "call_begin" in actions
            ):
                self._raw.append(captured)
            self._raw.append(pattern)
        # A terminal that leads a state back to itself starts it afresh (a second envelope after
        # Llama's repeated <|python_tag|> gets a reader of its own); a capture appends it instead.
        moves = target is not state or bool(pattern)
        if moves:
            self._kind.leave(self, target, pattern)
        for action in actions:
            _ACTIONS[action](self, groups, captured)
        if pattern:
            self._inner = None
            self._mark("terminal", pattern)
        if captured and (matched or self._stretch is None or captured.isspace()):
            self._mark("capture", captured)
        if captured and self._stretch is not None and not matched and not captured.isspace():
            self._stretch.add(captured, True)  # a capture that began no call, no rule read
            captured = ""
        if state.kind in _TEXT_KINDS:
            if target.kind not in _TEXT_KINDS:  # a block begins
                self._block_called = "call_begin" in actions
                self._stretch = None if self._call_open else _Stretch(pattern)
        elif target.kind in _TEXT_KINDS:  # the block ends
            stretch = self._stretch
            if stretch is not None and stretch.loose:
                text = stretch.loose_text() if self._block_called else stretch.text() + pattern
                self._emit_text(CONTENT, text)
            self._stretch = None
            self._raw = []
        elif "call_end" in actions:
            self._stretch = _Stretch()
        elif self._stretch is not None:
            self._stretch.add(captured, False)  # a capture a rule read: markup
            self._stretch.add(pattern, False)
        if moves:
            self._state = target
            self._reader = None
            self._kind = _KINDS[target.kind]
            self._scan = self._tsets[nxt].scan
            self._in_reasoning = target.kind == "reasoning"
            self._kind.enter(self, target, pattern, state.kind)

    # ------------------------------------------------------------------ calls
    def _call_begin(self, name: str, format_id: str = "") -> None:
        if self._call_open:
            self._call_end()
        self._index += 1
        if self._stretch is not None and self._stretch.loose:  # the model's text before the call
            self._emit_text(CONTENT, self._stretch.loose_text())
        self._call_open = True
        self._stretch = None
        self._block_called = True
        self._args_emitted = False
        self._args_closed = False
        self._params = None
        call_id = format_id if self._format_ids and format_id else ""
        self._emit(TOOL_CALL_START, name, self._index, call_id)
        self._current_tool = name

    def _envelope_begin(self, name: str) -> None:
        self._call_begin(name)

    def _param_begin(self, key: str, forced: str | None) -> None:
        if not self._call_open:
            return
        if self._params is None:
            tool = self._tools.get(self._current_tool, {})
            self._params = ParamWriter(tool, self._trim_values, self._args)
        self._params.begin(key, forced)

    def _args(self, fragment: str) -> None:
        """A fragment of the arguments' JSON. A sentinel in it is inside a JSON string (outside
        one, every reader ends the value), so it becomes its token's text JSON-escaped."""
        if not self._call_open:  # arguments of no call (its name was empty): the model's text
            if fragment:
                self._loose(self._restore(fragment))
            return
        if fragment:
            self._args_emitted = True
            if not fragment.isascii() and SENTINEL_RE.search(fragment) is not None:
                table = self._bound.text_of_sentinel
                escaped = lambda m: json_string_fragment(table.get(m.group(0), ""))  # noqa: E731
                fragment = SENTINEL_RE.sub(escaped, fragment)
            self._emit(TOOL_ARGUMENTS, fragment, self._index)

    def _lead(self, text: str) -> None:
        self._mark("lead", text)

    def _gap(self, text: str) -> None:
        self._mark("gap", text)

    def _mark(self, why: str, text: str) -> None:
        markup = self.markup
        if markup is not None and text:
            if markup and markup[-1][0] == why and why != "terminal":  # one piece, however split
                markup[-1] = (why, markup[-1][1] + self._restore(text))
            else:
                markup.append((why, self._restore(text)))

    def _held_shown(self, held: str, text: str, at: int) -> None:
        """A reader's held text ``held``, read up to ``text[at]``, is the model's own text: content,
        which stays in the call's ledger where it was written (taken out here, put back as it is
        shown: ``_emit_text``)."""
        self._span_to(at)
        self._unledger(len(held))
        self._loose(self._restore(held))

    def _unledger(self, size: int) -> None:
        """Take the last ``size`` characters the ledger took back out of it."""
        raw = self._raw
        while size > 0 and raw:
            last = raw.pop()
            if len(last) > size:
                raw.append(last[:-size])
                break
            size -= len(last)

    def _loose(self, text: str) -> None:
        """Text that is no markup and belongs to no call: content, through the block's stretch."""
        if self._stretch is not None:
            self._stretch.add(text, True)
        else:
            self._emit_text(CONTENT, text)

    def _call_end(self) -> None:
        if not self._call_open:
            return
        if self._params is not None:
            self._params.close()
        elif not self._args_emitted:
            self._args("{}")
        self._params = None
        raw, self._raw = self._restore("".join(self._raw)), []
        self._emit(TOOL_CALL_END, raw, self._index)
        self._call_open = False

    def _reader_end(self, text: str, at: int) -> None:
        """A reader's call ends at ``text[at]``: the ledger takes the call's text up to there."""
        self._span_to(at)
        self._call_end()

    def _span_to(self, at: int) -> None:
        """The text a reader read since the last span, up to ``at``: the call's text."""
        text, start = self._span
        if at > start:
            self._raw.append(text[start:at])
        self._span = (text, at)

    def _shown(self, text: str, start: int, end: int) -> None:
        """A reader's ``text[start:end]`` is the model's own text: content, not in the ledger."""
        self._span_to(start)
        self._span = (text, end)
        self._loose(self._restore(text[start:end]))

    def _passthrough_if_no_call(self, closing: str) -> None:
        """A reader that never produced a call: its text was the model's, show it as content."""
        reader = self._reader
        raw = reader.unclaimed() if reader is not None else None
        if raw is not None:
            stretch = self._stretch
            opening = stretch.text() if stretch is not None else self._opening
            self._emit_text(CONTENT, opening + raw + closing)
            self._raw = []  # shown
            if stretch is not None:
                self._stretch = _Stretch()

    # ------------------------------------------------------------------ events
    def _emit_text(self, kind: EventKind, text: str) -> None:
        """A content or reasoning event. Sentinels left in shown text (a marker where the format
        does not expect one) become their token's text again: the model wrote it, so the client
        sees it."""
        if text:
            if self._call_open and kind is CONTENT:  # shown inside the call: its text, in place
                self._raw.append(text)
            self._emit(kind, self._restore(text))

    def _restore(self, text: str) -> str:
        if text.isascii() or SENTINEL_RE.search(text) is None:  # isascii is O(1): a flag
            return text
        table = self._bound.text_of_sentinel
        return SENTINEL_RE.sub(lambda m: table.get(m.group(0), ""), text)

    def _emit(self, kind: EventKind, text: str = "", index: int = -1, call_id: str = "") -> None:
        """Events of a call (and ``END``) carry the current ``tool_index``; text and reasoning
        brackets carry -1."""
        self._events.append(Event(kind, text, index, self._tokens, call_id))
        self._tokens = 0

    def _take(self) -> list[Event]:
        events, self._events = self._events, []
        return events


# ---------------------------------------------------------------------------------------------- kinds
def _nothing(*_: Any) -> None:
    return None


@dataclass(frozen=True, slots=True)
class _Kind:
    """What one state kind does: with the state's text, on entering (``state``, the terminal's
    pattern, the previous kind) and on leaving (the target state, None at the end of output; the
    terminal's pattern)."""

    text: Callable[[Machine, str], None] = _nothing
    enter: Callable[[Machine, State, str, str | None], None] = _nothing
    leave: Callable[[Machine, State | None, str], None] = _nothing


def _content_text(m: Machine, text: str) -> None:
    m._emit_text(CONTENT, text)


def _reasoning_text(m: Machine, text: str) -> None:
    m._emit_text(REASONING, text)


def _reasoning_enter(m: Machine, state: State, pattern: str, previous: str | None) -> None:
    if previous != "reasoning":
        m._emit(REASONING_START)


def _reasoning_leave(m: Machine, target: State | None, pattern: str) -> None:
    if target is None or target.kind != "reasoning":
        m._emit(REASONING_END)


def _capture_text(m: Machine, text: str) -> None:
    room = _CAPTURE_LIMIT - m._capture_len
    if room > 0:  # the first 4,096 characters, however the text was split
        piece = text[:room]
        m._capture.append(piece)
        m._capture_len += len(piece)


def _capture_enter(m: Machine, state: State, pattern: str, previous: str | None) -> None:
    m._capture = []
    m._capture_len = 0


def _value_text(m: Machine, text: str) -> None:
    m._raw.append(text)
    if m._params is not None:
        m._params.value(text)


def _reader_text(m: Machine, text: str) -> None:
    """Text of a reader's state that the reader did not take (after a call's JSON value: the
    model's, as any text a call block does not expect)."""
    reader = m._reader
    if isinstance(reader, JsonArgsReader | GemmaArgsReader):
        _free_text(m, text)
    elif reader is not None:
        shown = reader.rest(text)
        if not shown and text.isspace():  # whitespace a reader took or holds back
            m._mark("space", text)
        m._emit_text(CONTENT, shown)


def _json_enter(m: Machine, state: State, pattern: str, previous: str | None) -> None:
    if state.dialect == "gemma":
        m._reader = GemmaArgsReader(m._args, m._bound.patterns.get("quote", ""), m._held_shown)
    else:
        m._reader = JsonArgsReader(m._args, m._lead, m._shown)


def _skip_enter(m: Machine, state: State, pattern: str, previous: str | None) -> None:
    m._opening = pattern  # a wrapper's opener (LFM2's <|tool_call_start|>), for a passthrough after it


def _envelope_enter(m: Machine, state: State, pattern: str, previous: str | None) -> None:
    if pattern or previous != "skip":  # entered on text after a wrapper: the wrapper's opener
        m._opening = pattern
    if state.dialect in ("python", "python_json"):
        m._reader = PythonCallsReader(
            m._envelope_begin, m._args, m._reader_end, json_literals=state.dialect == "python_json"
        )
    else:
        m._reader = EnvelopeReader(
            state.allow_list, m._envelope_begin, m._args, m._reader_end, keyed=state.dialect == "keyed"
        )


def _envelope_leave(m: Machine, target: State | None, pattern: str) -> None:
    if target is None and m._cut and (m._reader is None or m._reader.status == OPEN):
        # the output was cut in an envelope still taking shape: a call cut before its name
        m._mark("cut", (m._reader.unclaimed() if m._reader is not None else None) or "")
        return
    m._passthrough_if_no_call(pattern)


def _elements_enter(m: Machine, state: State, pattern: str, previous: str | None) -> None:
    patterns = m._bound.patterns
    stops = tuple(patterns[t] for t in state.on)
    tool = m._tools.get(m._current_tool, {}) if m._call_open else {}
    m._reader = ElementArgsReader(patterns["tag"], state.item, stops, tool, m._args, m._stop_followed, m._gap)


def _elements_leave(m: Machine, target: State | None, pattern: str) -> None:
    reader = m._reader
    if isinstance(reader, ElementArgsReader) and m._call_open:
        reader.close()
        m._args_closed = True


def _skip_text(m: Machine, text: str) -> None:
    """Whitespace between markers is markup, and so is all the text of a state the format marks
    ``markup`` (an id the model numbers its call with, a message to another recipient). Any
    other text is the model's: inside a call it is content at once; elsewhere in a block it
    waits in the block's stretch, shown when a call begins or the block ends (``_Stretch``)."""
    _free_text(m, text, m._state.markup)


def _free_text(m: Machine, text: str, markup: bool = False) -> None:
    """Text no state takes as its own: markup when the state says so or it is whitespace, else
    the model's loose text (``_skip_text``)."""
    loose = not (markup or text.isspace())
    if not loose:
        m._mark("skip" if markup else "space", text)
    if markup:  # (whitespace is not the call's text: whether it is shown depends on what follows)
        m._raw.append(text)
    stretch = m._stretch
    if stretch is not None:
        stretch.add(text, loose)
        return
    inner = m._inner
    if inner is None:
        if not loose:
            return
        inner = m._inner = _Stretch()
    inner.add(text, loose)
    m._emit_text(CONTENT, inner.take_loose())


class _Stretch:
    """A block's text while no call is open in it, in sentinel form: markers, whitespace and the
    model's own loose text (not markup: text a skip state does not expect, a capture no rule
    read). Nothing of it is lost: when a call begins, its loose text is content; when the block
    ends without a call, and it held loose text, all of it is content, markers included (the
    model wrote something the format does not describe: it is shown as written).

    Whitespace between two pieces of loose text with no marker between them is loose too, however
    the text was split; other whitespace is markup."""

    __slots__ = ("_gap", "_shown", "loose", "pieces")

    def __init__(self, first: str = "") -> None:
        self.pieces: list[list[Any]] = [[first, False]] if first else []
        self.loose = False
        self._gap: list[list[Any]] | None = None
        """Whitespace pieces since the last loose text, no marker between: loose if more follows."""
        self._shown = 0
        """Pieces before this one were handed out by ``take_loose``."""

    def add(self, text: str, loose: bool) -> None:
        if not text:
            return
        if not loose:
            piece = [text, False]
            self.pieces.append(piece)
            if self._gap is not None and text.isspace():
                self._gap.append(piece)
            else:
                self._gap = None
            return
        body = text.strip()
        lead = text[: text.index(body[0])] if body else text
        trail = text[len(lead) + len(body) :]
        inner = self._gap is not None
        for piece in self._gap or ():
            piece[1] = True
        if lead:
            self.pieces.append([lead, inner])
        self.pieces.append([body, True])
        self.loose = True
        self._gap = []
        if trail:
            piece = [trail, False]
            self.pieces.append(piece)
            self._gap.append(piece)

    def text(self) -> str:
        return "".join(t for t, _ in self.pieces)

    def loose_text(self) -> str:
        return "".join(t for t, loose in self.pieces if loose)

    def take_loose(self) -> str:
        """The loose text not handed out before (whitespace still undecided stays)."""
        upto = len(self.pieces) - len(self._gap or ())
        out = "".join(t for t, loose in self.pieces[self._shown : upto] if loose)
        self._shown = upto
        return out


_TEXT_KINDS = frozenset({"content", "reasoning"})
"""Kinds whose text is shown as such: a block is the output between leaving them and coming back."""

_KINDS: Mapping[str, _Kind] = {
    "content": _Kind(text=_content_text),
    "reasoning": _Kind(text=_reasoning_text, enter=_reasoning_enter, leave=_reasoning_leave),
    "skip": _Kind(text=_skip_text, enter=_skip_enter),  # separators, wrappers: markup unless loose
    "capture": _Kind(text=_capture_text, enter=_capture_enter),
    "value": _Kind(text=_value_text),
    "json": _Kind(text=_reader_text, enter=_json_enter),
    "envelope": _Kind(text=_reader_text, enter=_envelope_enter, leave=_envelope_leave),
    "elements": _Kind(text=_reader_text, enter=_elements_enter, leave=_elements_leave),
}
"""Every state kind of ``grammar.schema.STATE_KINDS``, and what it does."""


# ---------------------------------------------------------------------------------------------- actions
def _do_call_begin(m: Machine, groups: Mapping[str, str], captured: str) -> None:
    m._call_begin(groups.get("name", captured).strip(), groups.get("id", captured.strip()))


def _do_call_end(m: Machine, groups: Mapping[str, str], captured: str) -> None:
    m._call_end()


def _do_param_begin(m: Machine, groups: Mapping[str, str], captured: str) -> None:
    m._param_begin(groups.get("key", captured).strip(), _forced_type(groups))


def _do_param_end(m: Machine, groups: Mapping[str, str], captured: str) -> None:
    if m._params is not None:
        m._params.end()


_ACTIONS: Mapping[str, Callable[[Machine, Mapping[str, str], str], None]] = {
    "call_begin": _do_call_begin,
    "call_end": _do_call_end,
    "param_begin": _do_param_begin,
    "param_end": _do_param_end,
}
"""Every action of ``grammar.schema.ACTIONS``: what it does, given a capture rule's groups and the captured
text."""


def _first_non_space(text: str, start: int, end: int) -> int:
    for i in range(start, end):
        if not text[i].isspace():
            return i
    return end


def _forced_type(groups: Mapping[str, str]) -> str | None:
    """A format can state a value's type in the markup itself: DSML's ``string="true|false"``,
    Kimi K3's ``type="number"``. ``string`` streams as text; ``json`` is parsed as JSON."""
    if "string" in groups:
        return "string" if groups["string"] == "true" else "json"
    if "type" in groups:
        return "string" if groups["type"] in ("string", "str") else "json"
    return None


_XML_REF = re.compile(r"&(?:(amp|lt|gt|quot|apos)|#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6}));")
_XML_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def _xml_unescape(text: str) -> str:
    """XML's five named entities and numeric character references; anything else stays as written
    (not ``html.unescape``, whose hundreds of HTML entities would rewrite text like ``&copy``)."""

    def one(m: re.Match[str]) -> str:
        named, dec, hexa = m.groups()
        if named:
            return _XML_NAMED[named]
        code = int(dec) if dec else int(hexa, 16)
        return chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else m.group(0)

    return _XML_REF.sub(one, text)
