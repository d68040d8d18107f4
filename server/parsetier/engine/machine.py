"""The state machine: interprets a bound grammar over streamed text and emits semantic events.

Theory of operation
-------------------
Input is text in *sentinel form*: the detokenizer's output where every added token a terminal
uses has been replaced by one private code point (see ``grammar.py``). The machine is always in
one state of the grammar. In every state the lexer looks for that state's terminals only; the
text between terminals means what the state's kind says (content, reasoning, a captured name,
a parameter value, JSON arguments...). A terminal fires its transition: leave the state, run the
transition's actions, enter the next state. JSON-bearing states (``json``, ``envelope``) hand text
to their argument reader first, and only the text after the JSON value ends goes to the lexer, so
a marker written inside a JSON string is never mistaken for one.

Decisions depend only on the text seen so far, never on where deltas were split; what cannot be
decided yet (a suffix that may become a terminal, trailing whitespace, a terminal whose ``follow``
condition the text after it does not settle yet) is held back, and nothing
emitted is ever taken back. Per-call work is proportional to the new text.

Whitespace policy: content and reasoning are trimmed at their edges: leading whitespace at the
start of the message's content and of each reasoning block is dropped, and trailing whitespace is
held back until more text of the same kind proves it inner (it is then emitted verbatim) or the
block ends (it is dropped).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from parsetier.engine.arguments import (
    EnvelopeReader,
    GemmaArgsReader,
    JsonArgsReader,
    ParamWriter,
    PythonCallsReader,
)
from parsetier.engine.events import Event, EventKind
from parsetier.engine.grammar import SENTINEL_RE, BoundGrammar, State, Transition
from parsetier.engine.json_scan import COMPLETE, OPEN

_READERS = ("json", "envelope")
_ReaderT = JsonArgsReader | EnvelopeReader | GemmaArgsReader | PythonCallsReader
_ENVELOPES = (EnvelopeReader, PythonCallsReader)
_CAPTURE_LIMIT = 4096

class Machine:
    """One request's parse state. ``feed`` text (sentinel form) → events; ``finish`` → last events."""

    def __init__(
        self,
        bound: BoundGrammar,
        start: str,
        tools: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._bound = bound
        self._states: Mapping[str, State] = bound.grammar.states
        self._tools = tools or {}
        self._trim_values = bound.grammar.value_trim == "newline"
        self._format_ids = bound.grammar.tool_call_id == "format"
        self._tsets = bound.terminal_sets
        self._state = self._states[start]
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
        self._reader: _ReaderT | None = None
        self._args_emitted = False
        self._opening = ""
        # whitespace policy
        self._content_edges = EdgeTrim()  # one for the whole message's content
        self._reasoning_edges = EdgeTrim()  # reset for every reasoning block
        self._current_tool = ""
        self._ending = False
        """Set by ``finish``: nothing more will follow, so ``follow`` checks can decide on "end"."""
        self._enter(self._state, "", None)

    # ------------------------------------------------------------------ public
    def feed(self, text: str, tokens: int = 0) -> list[Event]:
        """Consume ``text`` (sentinel form) produced by ``tokens`` output tokens."""
        self._tokens += tokens
        if self._state.kind == "reasoning":
            self.reasoning_tokens += tokens
        if text:
            self._run(text)
        return self._take()

    def finish(self, cut: bool = False) -> list[Event]:
        """End of output (``cut``: by ``length``/``abort``, not by the model): settle held-back
        text, take the state's ``end`` transition when the model stopped by itself, and close the
        JSON of a call whose arguments the engine writes (XML-style), so it is always valid."""
        self._ending = True
        if self._hold:
            held, self._hold = self._hold, ""
            self._run(held)  # a terminal waiting on what follows it is decided now
            if self._hold:
                held, self._hold = self._hold, ""
                self._text(held)
        state = self._state
        if state.end is not None and not cut:
            self._fire(state.end, "", state)
            state = self._state
        if state.kind == "reasoning":
            self._leave_reasoning()
        elif state.kind == "envelope" and self._reader is not None and self._reader.status != OPEN:
            self._passthrough_if_no_call("")
        # An envelope still taking shape is a call cut before its name: markup, never content.
        # An unfinished capture (name, header) is not shown.
        if self._call_open and (self._params is not None or not self._args_emitted):
            if not cut:
                self._call_end()
            elif self._params is not None:
                self._params.close()
            else:
                self._args("{}")
        self._content_edges.end()
        self._emit(EventKind.END)
        return self._take()

    # ------------------------------------------------------------------ core loop
    def _run(self, text: str) -> None:
        buf = self._hold + text if self._hold else text
        self._hold = ""
        pos, n = 0, len(buf)
        while pos < n:
            state = self._state
            reader = self._reader
            if reader is not None and state.kind in _READERS and reader.status == OPEN:
                pos = reader.feed(buf, pos)
                if reader.status == COMPLETE and state.done is not None:
                    self._fire(state.done, "", self._state)
                    continue
                if reader.status == OPEN:
                    return
                continue
            match, hold = self._tsets[state.name].scan(buf, pos)
            if state.text_next is not None:
                limit = match.start if match is not None else hold
                first = _first_non_space(buf, pos, limit)
                if first < limit:
                    pos = first
                    self._fire(Transition(state.text_next), "", state)
                    continue
            if match is None:
                if hold > pos:
                    self._text(buf[pos:hold])
                self._hold = buf[hold:]
                return
            if match.start > pos:
                self._text(buf[pos : match.start])
            transition = state.on[self._bound.terminal_of_pattern[match.pattern]]
            if transition.follow:
                verdict = self._followed(transition, buf, match.end)
                if verdict is None:  # cannot tell yet: wait, from the terminal on
                    self._hold = buf[match.start :]
                    return
                if not verdict:  # not structural here: its text is the state's own text
                    if state.text_next is not None:  # …and text moves a text_next state on
                        pos = match.start
                        self._fire(Transition(state.text_next), "", state)
                        continue
                    self._text(buf[match.start : match.end])
                    pos = match.end
                    continue
            pos = match.end
            if transition.keep:
                pos = match.start
                self._fire(transition, "", state)
            else:
                self._fire(transition, match.pattern, state)

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

    def _text(self, text: str) -> None:
        kind = self._state.kind
        if kind == "content":
            self._visible(EventKind.CONTENT, text)
        elif kind == "reasoning":
            self._visible(EventKind.REASONING, text)
        elif kind == "capture":
            if self._capture_len < _CAPTURE_LIMIT:
                self._capture.append(text)
                self._capture_len += len(text)
        elif kind == "value":
            if self._params is not None:
                self._params.value(self._restore(text))
        elif kind == "envelope" and isinstance(self._reader, _ENVELOPES):
            if self._reader.calls == 0:
                self._reader.raw.append(text)
            elif text.strip():
                # Words after the call's JSON inside the block are the model's: no lost text.
                self._visible(EventKind.CONTENT, text)
        # skip, finished json: dropped (code fences, separators)

    # ------------------------------------------------------------------ transitions
    def _fire(self, transition: Transition, pattern: str, state: State) -> None:
        nxt, actions = transition.next, transition.actions
        groups: dict[str, str] = {}
        captured = ""
        if state.kind == "capture":
            if nxt == state.name:  # a terminal that belongs to the captured text (Harmony headers)
                self._capture.append(pattern)
                return
            captured = self._restore("".join(self._capture))
            for rule in state.rules:
                m = rule.pattern.search(captured)
                if m:
                    groups = {k: v for k, v in m.groupdict().items() if v is not None}
                    if state.unescape == "xml":
                        groups = {k: _xml_unescape(v) for k, v in groups.items()}
                    nxt = rule.next or nxt
                    actions = rule.actions
                    break
        target = self._states[nxt]
        if target is not state:
            self._leave(state, target, pattern)
        for action in actions:
            if action == "call_begin":
                self._call_begin(groups.get("name", captured).strip(), groups.get("id", captured.strip()))
            elif action == "call_end":
                self._call_end()
            elif action == "param_begin":
                self._param_begin(groups.get("key", captured).strip(), _forced_type(groups))
            elif action == "param_end" and self._params is not None:
                self._params.end()
        if target is not state:
            self._state = target
            self._enter(target, pattern, state.kind)

    def _leave(self, state: State, target: State, pattern: str) -> None:
        if state.kind == "reasoning" and target.kind != "reasoning":
            self._leave_reasoning()
        elif state.kind == "envelope":
            self._passthrough_if_no_call(pattern)

    def _enter(self, state: State, pattern: str, previous_kind: str | None) -> None:
        kind = state.kind
        if kind == "capture":
            self._capture = []
            self._capture_len = 0
        elif kind == "reasoning" and previous_kind != "reasoning":
            self._reasoning_edges = EdgeTrim()
            self._emit(EventKind.REASONING_START)
        elif kind == "json":
            if state.dialect == "gemma":
                self._reader = GemmaArgsReader(self._args, self._bound.patterns.get("quote", ""))
            else:
                self._reader = JsonArgsReader(self._args)
        elif kind == "envelope":
            self._opening = pattern
            if state.dialect == "python":
                self._reader = PythonCallsReader(self._envelope_begin, self._args, self._call_end)
            else:
                allow = state.allow_list
                self._reader = EnvelopeReader(allow, self._envelope_begin, self._args, self._call_end)
        if kind not in _READERS:
            self._reader = None

    # ------------------------------------------------------------------ calls
    def _call_begin(self, name: str, format_id: str = "") -> None:
        if self._call_open:
            self._call_end()
        self._index += 1
        self._call_open = True
        self._args_emitted = False
        self._params = None
        call_id = format_id if self._format_ids and format_id else ""
        self._emit(EventKind.TOOL_CALL_START, name, call_id=call_id)
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
        if self._call_open and fragment:
            self._args_emitted = True
            self._emit(EventKind.TOOL_ARGUMENTS, self._restore(fragment))

    def _call_end(self) -> None:
        if not self._call_open:
            return
        if self._params is not None:
            self._params.close()
        elif not self._args_emitted:
            self._args("{}")
        self._params = None
        self._emit(EventKind.TOOL_CALL_END)
        self._call_open = False

    def _passthrough_if_no_call(self, closing: str) -> None:
        """An envelope that never produced a call: its text was the model's, show it as content."""
        reader = self._reader
        if isinstance(reader, _ENVELOPES) and reader.calls == 0:
            raw = self._opening + "".join(reader.raw) + closing
            reader.raw = []
            reader.calls = -1  # passed through once
            if raw:
                self._visible(EventKind.CONTENT, raw)

    # ------------------------------------------------------------------ text events
    def _visible(self, kind: EventKind, text: str) -> None:
        edges = self._content_edges if kind is EventKind.CONTENT else self._reasoning_edges
        out = edges.push(self._restore(text))
        if out:
            self._emit(kind, out)

    def _leave_reasoning(self) -> None:
        self._reasoning_edges.end()
        self._emit(EventKind.REASONING_END)

    def _restore(self, text: str) -> str:
        """Sentinels left in text that is shown (a marker where the format does not expect one)
        become their token's text again: the model wrote it, so the client sees it."""
        if SENTINEL_RE.search(text) is None:
            return text
        table = self._bound.text_of_sentinel
        return SENTINEL_RE.sub(lambda m: table.get(m.group(0), ""), text)

    def _emit(self, kind: EventKind, text: str = "", call_id: str = "") -> None:
        index = self._index if kind not in (EventKind.CONTENT, EventKind.REASONING) else -1
        if kind in (EventKind.REASONING_START, EventKind.REASONING_END):
            index = -1
        self._events.append(Event(kind, text, index, self._tokens, call_id))
        self._tokens = 0

    def _take(self) -> list[Event]:
        events, self._events = self._events, []
        return events


class EdgeTrim:
    """The whitespace policy for one text stream: leading whitespace is dropped until the first
    visible character; trailing whitespace is held until more text proves it inner (then it is
    emitted verbatim) or the stream ends (then it is dropped). Holding is the only way to trim
    the end of a stream without ever retracting what was sent."""

    __slots__ = ("_held", "_started")

    def __init__(self) -> None:
        self._started = False
        self._held = ""

    def push(self, text: str) -> str:
        """Take ``text``; return what can be emitted now."""
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._held += text
            return ""
        out = self._held + body
        self._held = text[len(body) :]
        return out

    def end(self) -> None:
        """The stream ended: held whitespace was trailing."""
        self._held = ""


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
