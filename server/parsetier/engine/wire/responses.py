"""OpenAI Responses: ``response.created`` … ``response.completed`` events, or one ``response`` body.

The output is a list of items in the order the model wrote them: reasoning is a ``reasoning``
item whose ``reasoning_text`` part streams as ``response.reasoning_text.delta``; content a
``message`` item whose ``output_text`` part streams as ``response.output_text.delta`` (with the
tokens' logprobs); each call a ``function_call`` item (``call_id`` ``call_…``) whose arguments
stream as ``response.function_call_arguments.delta``. A change of kind closes the open item with
its ``…done`` events. Item ids (``rs_``, ``msg_``, ``fc_``) derive from the response id and the
item's position. A length cut ends with ``response.incomplete`` (``max_output_tokens``), an abort
with status ``cancelled`` in ``response.completed``; everything else ``response.completed``.
Logprobs of tokens outside output text (reasoning, markup, calls) have no place in this API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parsetier.engine.call_ids import api_call_id, item_id
from parsetier.engine.wire.request import WireRequest
from parsetier.engine.wire.wire_json import chat_logprob, dumps, framed_numbered, logprob, sse_event, string
from parsetier.messages import Delta, Final, TokenLogprob

CALL_PREFIX = "call_"
_DELTA_EVENTS = {
    "reasoning": "response.reasoning_text.delta",
    "message": "response.output_text.delta",
    "function_call": "response.function_call_arguments.delta",
}
_DELTA_HEADS = {
    name: f'event: {name}\ndata: {{"type":"{name}","sequence_number":'
    for name in (
        "response.reasoning_text.delta",
        "response.output_text.delta",
        "response.function_call_arguments.delta",
    )
}
_ITEM_PREFIX = {"reasoning": "rs_", "message": "msg_", "function_call": "fc_"}


def delta_logprob(entry: TokenLogprob) -> dict[str, Any]:
    """An ``output_text.delta`` event's logprob entry (no bytes, as the API sends them)."""
    tops = [{"token": top.token, "logprob": logprob(top.logprob)} for top in entry.top_logprobs]
    return {"token": entry.token, "logprob": logprob(entry.logprob), "top_logprobs": tops}


class _Item:
    __slots__ = ("call_id", "head", "id", "index", "kind", "logprobs", "name", "parts", "tail_end", "where")

    def __init__(self, kind: str, item_id_: str, index: int, call_id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = item_id_
        self.index = index
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        self.logprobs: list[TokenLogprob] = []
        content = "" if kind == "function_call" else '"content_index":0,'
        self.where = f',"item_id":{string(item_id_)},"output_index":{index},{content}"delta":'
        self.head = _DELTA_HEADS[_DELTA_EVENTS[kind]]
        """Its delta event up to the ``sequence_number``'s value."""
        self.tail_end = (',"logprobs":[]' if kind == "message" else "") + "}\n\n"
        """What follows a delta event's text, to the event's end, when it carries no logprobs."""
        """A delta event's fields from ``item_id`` up to its ``delta``'s value."""

    def part(self) -> dict[str, Any]:
        text = "".join(self.parts)
        if self.kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        logprobs = [chat_logprob(e) for e in self.logprobs]
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}

    def body(self, status: str) -> dict[str, Any]:
        if self.kind == "reasoning":
            return {
                "id": self.id,
                "type": "reasoning",
                "summary": [],
                "content": [self.part()],
                "status": status,
            }
        if self.kind == "message":
            item = {"id": self.id, "type": "message", "role": "assistant", "status": status}
            return item | {"content": [self.part()]}
        item = {"id": self.id, "type": "function_call", "call_id": self.call_id, "name": self.name}
        return item | {"arguments": "".join(self.parts), "status": status}

    def added(self) -> dict[str, Any]:
        """The item as ``response.output_item.added`` shows it: nothing in it yet."""
        if self.kind == "function_call":
            return {"id": self.id, "type": "function_call", "call_id": self.call_id, "name": self.name} | {
                "arguments": "",
                "status": "in_progress",
            }
        if self.kind == "message":
            return {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
        return {"id": self.id, "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}


class ResponsesRenderer:
    __slots__ = ("_items", "_open", "_pending", "_sequence", "_started", "_stream", "request")

    def __init__(self, request: WireRequest) -> None:
        self.request = request
        self._items: list[_Item] = []
        self._open: _Item | None = None
        self._started = False
        self._sequence = 0
        self._stream = request.stream
        self._pending: list[TokenLogprob] = []
        """Logprobs of tokens whose text is not out yet: they go with the next output text."""

    @property
    def sequence(self) -> int:
        """The ``sequence_number`` the next event would carry (an error event goes on from it)."""
        return self._sequence

    # ---------------------------------------------------------------- events
    def _event(self, name: str, fields: dict[str, Any], out: list[str]) -> None:
        """One event. Its ``sequence_number`` advances by 1; a text delta's (``_delta``) by the
        length of its text: numbers then increase (with gaps) and do not depend on how the text
        was split into deltas, so a resumed session, whose history replays in other pieces, goes
        on with the numbers the broken stream would have sent."""
        fields = {"type": name, "sequence_number": self._sequence} | fields
        self._sequence += 1
        out.append(sse_event(name, dumps(fields)))

    def _delta(self, name: str, item: _Item, text: str, tail: str, out: list[str]) -> None:
        """A text delta event of ``item`` (the per-token path: a template, the bytes ``_event``
        would write for the same fields)."""
        sequence = self._sequence
        self._sequence = sequence + (len(text) or 1)
        out.append(_DELTA_HEADS[name] + str(sequence) + item.where + string(text) + tail + "}\n\n")

    def _response(
        self, status: str, final: Final | None, error: dict[str, str] | None = None
    ) -> dict[str, Any]:
        request = self.request
        body: dict[str, Any] = {
            "id": request.response_id,
            "object": "response",
            "created_at": request.created,
        }
        body |= {"model": request.model, "status": status, "error": error, "incomplete_details": None}
        body |= {"instructions": None, "metadata": {}, "parallel_tool_calls": True, "tool_choice": "auto"}
        body |= {"tools": [], "temperature": None, "top_p": None, "output": [], "usage": None}
        if error is not None:  # failed: the items so far, the last cut short; usage unknown
            last = len(self._items) - 1
            body["output"] = [
                item.body("incomplete" if n == last else "completed") for n, item in enumerate(self._items)
            ]
        if final is not None:
            last = len(self._items) - 1
            item_status = "incomplete" if status == "incomplete" else "completed"
            body["output"] = [
                item.body(item_status if n == last else "completed") for n, item in enumerate(self._items)
            ]
            if status == "incomplete":
                body["incomplete_details"] = {"reason": "max_output_tokens"}
            usage = final.usage
            body["usage"] = {
                "input_tokens": request.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
                "total_tokens": request.prompt_tokens + usage.completion_tokens,
            }
        return body

    def step(self, deltas: Sequence[Delta]) -> bytes:
        item = self._open
        if len(deltas) == 1 and item is not None and not self._pending:
            # The per-token case: more text for the open reasoning or message item (``_delta``'s
            # bytes, inlined).
            delta = deltas[0]
            if not (delta.tool_calls or delta.logprobs):
                kind = item.kind
                if kind == "message":
                    text, other = delta.content, delta.reasoning
                else:
                    text, other = delta.reasoning, delta.content
                if text and not other and kind != "function_call":
                    item.parts.append(text)
                    if not self._stream:
                        return b""
                    sequence = self._sequence
                    self._sequence = sequence + len(text)
                    return framed_numbered(item.head, sequence, item.where, text, item.tail_end)
        out: list[str] = []
        self._render(deltas, out)
        return "".join(out).encode() if self._stream else b""

    def _render(self, deltas: Sequence[Delta], out: list[str]) -> None:
        if not self._started:
            self._started = True
            self._event("response.created", {"response": self._response("in_progress", None)}, out)
            self._event("response.in_progress", {"response": self._response("in_progress", None)}, out)
        for delta in deltas:
            if delta.reasoning:
                self._pending.clear()
                item = self._ensure("reasoning", out)
                item.parts.append(delta.reasoning)
                self._delta("response.reasoning_text.delta", item, delta.reasoning, "", out)
            if delta.logprobs:
                self._pending += delta.logprobs
            if delta.content:
                item = self._ensure("message", out)
                self._text(item, delta.content, out)
            for call in delta.tool_calls:
                self._pending.clear()
                if call.id is not None:
                    self._close(out)
                    index = len(self._items)
                    call_id = api_call_id(call.id, CALL_PREFIX)
                    item = _Item(
                        "function_call", item_id("fc_", self.request.response_id, index), index, call_id
                    )
                    item.name = call.name or ""
                    self._add(item, out)
                item = self._open
                if call.arguments and item is not None and item.kind == "function_call":
                    item.parts.append(call.arguments)
                    self._delta("response.function_call_arguments.delta", item, call.arguments, "", out)

    def _text(self, item: _Item, text: str, out: list[str]) -> None:
        item.parts.append(text)
        logprobs, self._pending = self._pending, []
        item.logprobs += logprobs
        tail = ',"logprobs":' + (dumps([delta_logprob(e) for e in logprobs]) if logprobs else "[]")
        self._delta("response.output_text.delta", item, text, tail, out)

    def _ensure(self, kind: str, out: list[str]) -> _Item:
        item = self._open
        if item is not None and item.kind == kind:
            return item
        self._close(out)
        index = len(self._items)
        item = _Item(kind, item_id(_ITEM_PREFIX[kind], self.request.response_id, index), index)
        self._add(item, out)
        part = {"type": "reasoning_text", "text": ""}
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        fields = {"item_id": item.id, "output_index": index, "content_index": 0, "part": part}
        self._event("response.content_part.added", fields, out)
        return item

    def _add(self, item: _Item, out: list[str]) -> None:
        self._items.append(item)
        self._open = item
        self._event("response.output_item.added", {"output_index": item.index, "item": item.added()}, out)

    def _close(self, out: list[str], status: str = "completed") -> None:
        item, self._open = self._open, None
        if item is None:
            return
        where = {"item_id": item.id, "output_index": item.index}
        if item.kind == "function_call":
            done = where | {"name": item.name, "arguments": "".join(item.parts)}
            self._event("response.function_call_arguments.done", done, out)
        else:
            part = item.part()
            text = part["text"]
            if item.kind == "reasoning":
                self._event("response.reasoning_text.done", where | {"content_index": 0, "text": text}, out)
            else:
                done = where | {"content_index": 0, "text": text, "logprobs": part["logprobs"]}
                self._event("response.output_text.done", done, out)
            self._event("response.content_part.done", where | {"content_index": 0, "part": part}, out)
        self._event("response.output_item.done", {"output_index": item.index, "item": item.body(status)}, out)

    def fail(self, code: str, message: str, failed_code: str) -> bytes:
        """The streamed response ended by an error (``dialects.errors``): an ``error`` event
        (``code``: the status's name in lower case), then, when the response had started, its
        open item closed ``incomplete`` and ``response.failed`` with ``error`` (``failed_code``,
        one of the API's ``ResponseError`` codes, and ``message``) and the output so far."""
        if not self._stream:
            return b""
        out: list[str] = []
        self._event("error", {"code": code, "message": message, "param": None}, out)
        if self._started:
            if self._pending and self._open is not None and self._open.kind == "message":
                self._text(self._open, "", out)
            self._close(out, "incomplete")
            error = {"code": failed_code, "message": message}
            self._event("response.failed", {"response": self._response("failed", None, error)}, out)
        return "".join(out).encode()

    def finish(self, deltas: Sequence[Delta], final: Final, stop_string: str | None) -> tuple[bytes, bytes]:
        out: list[str] = []
        self._render(deltas, out)
        status = {"length": "incomplete", "abort": "cancelled"}.get(final.finish_reason, "completed")
        if self._pending and self._open is not None and self._open.kind == "message":
            self._text(self._open, "", out)
        self._close(out, "incomplete" if status == "incomplete" else "completed")
        response = self._response(status, final)
        if not self.request.stream:
            return b"", dumps(response).encode()
        name = "response.incomplete" if status == "incomplete" else "response.completed"
        closing: list[str] = []
        self._event(name, {"response": response}, closing)
        return "".join(out).encode(), "".join(closing).encode()
