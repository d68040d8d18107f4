"""Events → OpenAI-style deltas, and the assembled final message.

The assembler applies the request's choices that are about *delivery*, not parsing: whether
reasoning is shown, ``tool_choice`` none (calls are dropped) and ``parallel_tool_calls`` false
(only the first call is kept), tool call ids (derived from the request, see ``call_ids``) and
indices (0, 1, 2… over the calls delivered), and ``complete_tool_calls`` (a call is delivered in
one delta when it ends, only if its arguments are a JSON object; otherwise its text as the model
wrote it, which ``TOOL_CALL_END`` carries, is content; content shown while such a call is open
waits for it, since that text holds it in place), and the whitespace policy
(``EdgeTrim``: events carry text untrimmed). The final message is exactly the concatenation of the
deltas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from parsetier.engine import json_bounds
from parsetier.engine.call_ids import id_maker
from parsetier.engine.events import (
    CONTENT,
    END,
    REASONING,
    REASONING_START,
    TOOL_ARGUMENTS,
    TOOL_CALL_END,
    TOOL_CALL_START,
    Event,
)
from parsetier.messages import (
    Delta,
    Message,
    SessionOptions,
    ToolCall,
    ToolCallDelta,
    arguments_delta,
    text_delta,
)


class _Call:
    __slots__ = ("arguments", "delivered_index", "id", "name")

    def __init__(self, call_id: str, name: str, delivered_index: int) -> None:
        self.id = call_id
        self.name = name
        self.arguments: list[str] = []
        self.delivered_index = delivered_index


class Assembler:
    def __init__(self, options: SessionOptions, make_id: Callable[[int], str] | None = None) -> None:
        self._show_reasoning = options.include_reasoning
        self._calls_enabled = options.tool_choice != "none"
        self._max_calls = 1 if not options.parallel_tool_calls else None
        self._buffer_calls = options.complete_tool_calls
        self._make_id = make_id or id_maker(options)
        """call index (the engine's, among the calls the model wrote) → id; see ``call_ids``."""
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._delivered: list[_Call] = []
        self._ids: set[str] = set()
        """Ids given to calls so far: a model-written id never names two calls (see ``_start``)."""
        self._open: dict[int, _Call] = {}
        """engine tool index → call being received (only calls that will be delivered)."""
        self._held: list[str] = []
        """``complete_tool_calls``: content shown while a call it holds is open (a word Gemma's
        notation has no place for). The call's text has it in place: shown with the call when it
        is delivered, or as part of its text when it is not (then in the order the model wrote it)."""
        self._content_edges = EdgeTrim()  # one for the whole message's content
        self._reasoning_edges = EdgeTrim()  # a new one for every reasoning block

    def add(self, events: Sequence[Event]) -> list[Delta]:
        if len(events) == 1:  # one token's event, the commonest feed: no runs to merge
            ev = events[0]
            kind = ev.kind
            if kind is CONTENT:
                if self._buffer_calls and self._open:
                    self._held.append(ev.text)
                    return []
                text, edges = ev.text, self._content_edges
                if not (edges.passing and text and not text[-1].isspace()):
                    text = edges.push(text)  # (else ``push`` would return the text as it is)
                    if not text:
                        return []
                self._content.append(text)
                return [text_delta("", text)]
            if kind is REASONING:
                text, edges = ev.text, self._reasoning_edges
                if not (edges.passing and text and not text[-1].isspace()):
                    text = edges.push(text)
                if not text or not self._show_reasoning:
                    return []
                self._reasoning.append(text)
                return [text_delta(text, "")]
            if kind is TOOL_ARGUMENTS and not self._buffer_calls:
                call = self._open.get(ev.tool_index)
                if call is None:
                    return []
                call.arguments.append(ev.text)
                return [arguments_delta(call.delivered_index, ev.text)]
        out = _DeltaRuns()
        for ev in events:
            kind = ev.kind
            if kind is CONTENT:
                if self._buffer_calls and self._open:
                    self._held.append(ev.text)
                else:
                    self._show(ev.text, out)
            elif kind is REASONING:
                text = self._reasoning_edges.push(ev.text)
                if text and self._show_reasoning:
                    self._reasoning.append(text)
                    out.text("reasoning", text)
            elif kind is REASONING_START:
                self._reasoning_edges = EdgeTrim()
            elif kind is TOOL_CALL_START:
                self._start(ev, out)
            elif kind is TOOL_ARGUMENTS:
                call = self._open.get(ev.tool_index)
                if call is not None:
                    call.arguments.append(ev.text)
                    if not self._buffer_calls:
                        out.arguments(call.delivered_index, ev.text)
            elif kind is TOOL_CALL_END:
                self._end(ev, out)
            elif kind is END:  # a call the output cut off never ends: what it held is shown
                held, self._held = self._held, []
                for text in held:
                    self._show(text, out)
        return out.deltas()

    def _show(self, text: str, out: _DeltaRuns) -> None:
        text = self._content_edges.push(text)
        if text:
            self._content.append(text)
            out.text("content", text)

    def _start(self, ev: Event, out: _DeltaRuns) -> None:
        if not self._calls_enabled:
            return
        planned = len(self._delivered) + (len(self._open) if self._buffer_calls else 0)
        if self._max_calls is not None and planned >= self._max_calls:
            return
        # The model's own id (Kimi's functions.name:0) when it wrote one no earlier call has;
        # a repeated or missing one gets the derived id, so ids stay unique and split-invariant.
        call_id = ev.call_id if ev.call_id and ev.call_id not in self._ids else self._make_id(ev.tool_index)
        self._ids.add(call_id)
        call = _Call(call_id, ev.text, len(self._delivered))
        self._open[ev.tool_index] = call
        if not self._buffer_calls:
            self._delivered.append(call)
            out.call(call.delivered_index, call.id, call.name, "")

    def _end(self, ev: Event, out: _DeltaRuns) -> None:
        call = self._open.pop(ev.tool_index, None)
        if call is None or not self._buffer_calls:
            return
        held, self._held = self._held, []
        arguments = "".join(call.arguments)
        try:
            # One level more than a value may nest: the arguments object around the values.
            valid = isinstance(json_bounds.loads(arguments, json_bounds.MAX_DEPTH + 1), dict)
        except ValueError:
            valid = False
        if not valid:  # not delivered: the call's text as the model wrote it is content
            self._show(ev.text, out)
            return
        for text in held:
            self._show(text, out)
        call.delivered_index = len(self._delivered)
        self._delivered.append(call)
        out.call(call.delivered_index, call.id, call.name, arguments)

    @property
    def tool_call_count(self) -> int:
        return len(self._delivered)

    def message(self) -> Message:
        calls = tuple(ToolCall(c.id, c.name, "".join(c.arguments)) for c in self._delivered)
        return Message("".join(self._content), "".join(self._reasoning), calls)


class EdgeTrim:
    """The whitespace policy for one text stream: leading whitespace is dropped until the first
    visible character; trailing whitespace is held until more text proves it inner (then it is
    emitted verbatim) or the stream ends (then it is never sent). Holding is the only way to trim
    the end of a stream without ever retracting what was sent."""

    __slots__ = ("_held", "_started", "passing")

    def __init__(self) -> None:
        self._started = False
        self._held = ""
        self.passing = False
        """Started, with nothing held: ``push`` would return a text that ends in a visible
        character unchanged, so the per-token path may skip the call."""

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
            self.passing = False
            return ""
        out = self._held + body
        self._held = text[len(body) :]
        self.passing = not self._held
        return out


class _DeltaRuns:
    """One feed's deltas, merged into runs: consecutive pieces of the same text kind, or of the
    same call's arguments, become one delta, so a feed yields few, ordered deltas.

    Pieces are collected in a list and joined once per run; concatenating them one by one made a
    feed's cost grow with the square of its size (one message of 256k ids took seconds)."""

    __slots__ = ("_done", "_head", "_kind", "_pieces")

    def __init__(self) -> None:
        self._done: list[Delta] = []
        self._kind: str | int | None = None
        """The open run: "content", "reasoning", a call's delivered index, or None."""
        self._head: tuple[int, str | None, str | None] = (0, None, None)
        """The open call run's index, and the id and name it carries when the call starts."""
        self._pieces: list[str] = []

    def text(self, kind: str, text: str) -> None:
        if not text:
            return  # an empty piece never starts or splits a run
        if self._kind != kind:
            if self._kind is not None:
                self._close()
            self._kind = kind
        self._pieces.append(text)

    def arguments(self, index: int, text: str) -> None:
        """A fragment of an open call's arguments: joins the run of that call's fragments."""
        if self._kind != index:
            if self._kind is not None:
                self._close()
            self._kind, self._head = index, (index, None, None)
        self._pieces.append(text)

    def call(self, index: int, call_id: str, name: str, arguments: str) -> None:
        """A call's first delta (id and name): always starts a run of its own."""
        self._close()
        self._kind, self._head = index, (index, call_id, name)
        self._pieces.append(arguments)

    def _close(self) -> None:
        kind = self._kind
        if kind is None:
            return
        text = "".join(self._pieces)
        if kind == "content":
            self._done.append(Delta("", text))
        elif kind == "reasoning":
            self._done.append(Delta(text))
        else:
            index, call_id, name = self._head
            self._done.append(Delta("", "", (ToolCallDelta(index, text, call_id, name),)))
        self._kind, self._pieces = None, []

    def deltas(self) -> list[Delta]:
        if self._kind is not None:
            self._close()
        return self._done
