"""Events → OpenAI-style deltas, and the assembled final message.

The assembler applies the request's choices that are about *delivery*, not parsing: whether
reasoning is shown, ``tool_choice`` none (calls are dropped) and ``parallel_tool_calls`` false
(only the first call is kept), tool call ids and indices (0, 1, 2… over the calls delivered), and
``complete_tool_calls`` (a call is delivered in one delta when it ends, only if its arguments are
a JSON object). The final message is exactly the concatenation of the deltas.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from parsetier.engine.events import Event, EventKind
from parsetier.engine.machine import new_call_id
from parsetier.messages import Delta, Message, SessionOptions, ToolCall, ToolCallDelta


class _Call:
    __slots__ = ("arguments", "delivered_index", "id", "name")

    def __init__(self, call_id: str, name: str, delivered_index: int) -> None:
        self.id = call_id
        self.name = name
        self.arguments: list[str] = []
        self.delivered_index = delivered_index


class Assembler:
    def __init__(self, options: SessionOptions, make_id: Callable[[], str] = new_call_id) -> None:
        self._show_reasoning = options.include_reasoning
        self._calls_enabled = options.tool_choice != "none"
        self._max_calls = 1 if not options.parallel_tool_calls else None
        self._buffer_calls = options.complete_tool_calls
        self._make_id = make_id
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._delivered: list[_Call] = []
        self._open: dict[int, _Call] = {}
        """engine tool index → call being received (only calls that will be delivered)."""

    def add(self, events: Iterable[Event]) -> list[Delta]:
        out: list[Delta] = []
        for ev in events:
            kind = ev.kind
            if kind is EventKind.CONTENT:
                self._content.append(ev.text)
                _push(out, Delta(content=ev.text))
            elif kind is EventKind.REASONING:
                if self._show_reasoning:
                    self._reasoning.append(ev.text)
                    _push(out, Delta(reasoning=ev.text))
            elif kind is EventKind.TOOL_CALL_START:
                self._start(ev, out)
            elif kind is EventKind.TOOL_ARGUMENTS:
                call = self._open.get(ev.tool_index)
                if call is not None:
                    call.arguments.append(ev.text)
                    if not self._buffer_calls:
                        _push(out, Delta(tool_calls=(ToolCallDelta(call.delivered_index, ev.text),)))
            elif kind is EventKind.TOOL_CALL_END:
                self._end(ev, out)
        return out

    def _start(self, ev: Event, out: list[Delta]) -> None:
        if not self._calls_enabled:
            return
        planned = len(self._delivered) + (len(self._open) if self._buffer_calls else 0)
        if self._max_calls is not None and planned >= self._max_calls:
            return
        call = _Call(ev.call_id or self._make_id(), ev.text, len(self._delivered))
        self._open[ev.tool_index] = call
        if not self._buffer_calls:
            self._delivered.append(call)
            _push(out, Delta(tool_calls=(ToolCallDelta(call.delivered_index, "", call.id, call.name),)))

    def _end(self, ev: Event, out: list[Delta]) -> None:
        call = self._open.pop(ev.tool_index, None)
        if call is None or not self._buffer_calls:
            return
        arguments = "".join(call.arguments)
        try:
            valid = isinstance(json.loads(arguments), dict)
        except ValueError:
            valid = False
        if not valid:
            return
        call.delivered_index = len(self._delivered)
        self._delivered.append(call)
        _push(out, Delta(tool_calls=(ToolCallDelta(call.delivered_index, arguments, call.id, call.name),)))

    @property
    def tool_call_count(self) -> int:
        return len(self._delivered)

    def message(self) -> Message:
        calls = tuple(ToolCall(c.id, c.name, "".join(c.arguments)) for c in self._delivered)
        return Message("".join(self._content), "".join(self._reasoning), calls)


def _push(out: list[Delta], delta: Delta) -> None:
    """Append, merging with the previous delta when both carry only the same kind of text or
    fragments of the same call, so one feed yields few, ordered deltas."""
    if out:
        last = out[-1]
        if delta.content and last.content and not last.tool_calls and not last.reasoning:
            out[-1] = Delta(content=last.content + delta.content)
            return
        if delta.reasoning and last.reasoning and not last.tool_calls and not last.content:
            out[-1] = Delta(reasoning=last.reasoning + delta.reasoning)
            return
        if delta.tool_calls and last.tool_calls and not last.content and not last.reasoning:
            prev, new = last.tool_calls[-1], delta.tool_calls[0]
            if prev.index == new.index and new.id is None:
                merged = ToolCallDelta(prev.index, prev.arguments + new.arguments, prev.id, prev.name)
                out[-1] = Delta(tool_calls=(*last.tool_calls[:-1], merged))
                return
    out.append(delta)
