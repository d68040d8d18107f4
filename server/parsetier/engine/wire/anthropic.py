"""Anthropic Messages: ``message_start`` … ``message_stop`` events, or one ``message`` body.

The output is a list of content blocks in the order the model wrote them: reasoning is a
``thinking`` block (``thinking_delta``; its ``signature`` is empty: open models sign nothing),
content a ``text`` block (``text_delta``), each call a ``tool_use`` block with a ``toolu_…`` id
whose arguments stream as ``input_json_delta``. A change of kind closes the open block. The finish
reason maps to ``stop_reason``: ``tool_use`` when calls were made, ``max_tokens`` for a length cut,
``stop_sequence`` (with ``stop_sequence`` set) when a stop string ended the output, else
``end_turn``. The API has no logprobs and no ``n``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from parsetier.engine.call_ids import api_call_id
from parsetier.engine.wire.request import WireRequest
from parsetier.engine.wire.wire_json import dumps, framed, sse_event, string
from parsetier.messages import Delta, Final

CALL_PREFIX = "toolu_"
_STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens"}


class _Block:
    __slots__ = ("call_id", "kind", "name", "parts")

    def __init__(self, kind: str, call_id: str = "", name: str = "") -> None:
        self.kind = kind
        """``thinking``, ``text`` or ``tool_use``."""
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []

    def body(self) -> dict[str, Any]:
        text = "".join(self.parts)
        if self.kind == "thinking":
            return {"type": "thinking", "thinking": text, "signature": ""}
        if self.kind == "text":
            return {"type": "text", "text": text}
        return {"type": "tool_use", "id": self.call_id, "name": self.name, "input": tool_input(text)}


def tool_input(arguments: str) -> Any:
    """A call's ``input``: its arguments as the JSON object they are. A call cut off by the length
    limit streamed its text as it was (``input_json_delta``); its ``input`` in a body is what a
    client rebuilds from those events (the SDK's accumulator parses the partial JSON): the
    complete members, a last string that is not finished left out (``partial_input``). Arguments
    that are no object even so (not JSON, an array) are ``{}``: ``input`` is always an object."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        value = partial_input(arguments)
    return value if isinstance(value, dict) else {}


_WS = " \t\n\r"
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_STRING_START = re.compile(_STRING.pattern[:-1] + r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?")
"""The start of a string the text ends in."""
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_NUMBER_CUT = re.compile(r"\.|[eE][-+]?")
_LITERALS = {"true": True, "false": False, "null": None}


class _Cut(Exception):
    """The text ended inside the value being read: it is left out."""


def partial_input(text: str) -> Any:
    """The value of a JSON text cut short, as Anthropic's SDK accumulates a streamed ``tool_use``
    input (a partial-mode parse): open arrays and objects are closed, a member or element whose
    value is unfinished (a string, a literal, a number without its digits) is left out, a number
    cut after a digit is kept. None when the text is not the start of a JSON value."""
    try:
        value, _ = _partial_value(text, _skip(text, 0))
    except (_Cut, ValueError):
        return None
    return value


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WS:
        at += 1
    return at


def _partial_value(text: str, at: int) -> tuple[Any, int]:
    """The value at ``at`` and where it ends; ``_Cut`` when the text ends inside an unfinished
    scalar, ``ValueError`` when it is not JSON."""
    if at >= len(text):
        raise _Cut
    char = text[at]
    if char == "{":
        return _partial_container(text, at + 1, "}")
    if char == "[":
        return _partial_container(text, at + 1, "]")
    if char == '"':
        found = _STRING.match(text, at)
        if found is None:
            if _STRING_START.fullmatch(text, at) is None:
                raise ValueError("bad string")
            raise _Cut
        return json.loads(found.group()), found.end()
    for word, value in _LITERALS.items():
        if text.startswith(word, at):
            return value, at + len(word)
        if word.startswith(text[at:]):
            raise _Cut
    found = _NUMBER.match(text, at)
    if found is None:
        raise _Cut if text[at:] == "-" else ValueError("not JSON")
    end = found.end()
    if end < len(text) and _NUMBER_CUT.fullmatch(text, end) is not None:
        raise _Cut  # "1." or "1e-": no number yet
    return json.loads(found.group()), end


def _partial_container(text: str, at: int, close: str) -> tuple[Any, int]:
    """An array's or object's members from ``at`` (past its bracket) to its end or the text's."""
    is_object = close == "}"
    members: dict[str, Any] | list[Any] = {} if is_object else []
    at = _skip(text, at)
    if at < len(text) and text[at] == close:
        return members, at + 1
    while True:
        if at >= len(text):
            return members, at
        try:
            if is_object:
                key, at = _partial_value(text, at)
                if not isinstance(key, str):
                    raise ValueError("object keys are strings")
                at = _skip(text, at)
                if at >= len(text):
                    return members, at
                if text[at] != ":":
                    raise ValueError("expected ':'")
                value, at = _partial_value(text, _skip(text, at + 1))
                members[key] = value  # type: ignore[index]
            else:
                value, at = _partial_value(text, at)
                members.append(value)  # type: ignore[union-attr]
        except _Cut:
            return members, len(text)
        at = _skip(text, at)
        if at >= len(text):
            return members, at
        if text[at] == close:
            return members, at + 1
        if text[at] != ",":
            raise ValueError("expected ',' or a closing bracket")
        at = _skip(text, at + 1)


_DELTA_KEYS = {
    "thinking": ("thinking_delta", "thinking"),
    "text": ("text_delta", "text"),
    "tool_use": ("input_json_delta", "partial_json"),
}
"""A block kind's delta ``type`` and the key of its text."""
_START = {
    "thinking": '{"type":"thinking","thinking":"","signature":""}',
    "text": '{"type":"text","text":""}',
}


class MessagesRenderer:
    __slots__ = ("_blocks", "_delta_head", "_open", "_started", "_stream", "_text_head", "request")

    def __init__(self, request: WireRequest) -> None:
        self.request = request
        self._blocks: list[_Block] = []
        self._open: _Block | None = None
        self._delta_head = ""
        self._text_head = ""
        """The open block's text delta event up to its text's value."""
        self._stream = request.stream
        """The open block's ``content_block_delta`` event up to its ``delta``."""
        self._started = False

    def step(self, deltas: Sequence[Delta]) -> bytes:
        block = self._open
        if len(deltas) == 1 and block is not None and block.kind != "tool_use":  # the per-token case
            delta = deltas[0]
            if not delta.tool_calls:
                if block.kind == "thinking":
                    text, other = delta.reasoning, delta.content
                else:
                    text, other = delta.content, delta.reasoning
                if text and not other:
                    block.parts.append(text)
                    if not self._stream:
                        return b""
                    return framed(self._text_head, text, "}}\n\n")
        out: list[str] = []
        self._render(deltas, out)
        return "".join(out).encode() if self._stream else b""

    def _render(self, deltas: Sequence[Delta], out: list[str]) -> None:
        if not self._started:
            self._started = True
            message = {"id": self.request.response_id, "type": "message", "role": "assistant"}
            message |= {
                "model": self.request.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
            }
            message["usage"] = {"input_tokens": self.request.prompt_tokens, "output_tokens": 0}
            out.append(sse_event("message_start", dumps({"type": "message_start", "message": message})))
        for delta in deltas:
            if delta.reasoning:
                self._text("thinking", delta.reasoning, out)
            if delta.content:
                self._text("text", delta.content, out)
            for call in delta.tool_calls:
                if call.id is not None:
                    self._close(out)
                    block = _Block("tool_use", api_call_id(call.id, CALL_PREFIX), call.name or "")
                    start = {"type": "tool_use", "id": block.call_id, "name": block.name, "input": {}}
                    self._begin(block, dumps(start), out)
                if call.arguments and self._open is not None and self._open.kind == "tool_use":
                    self._open.parts.append(call.arguments)
                    out.append(f"{self._text_head}{string(call.arguments)}}}}}\n\n")

    def _text(self, kind: str, text: str, out: list[str]) -> None:
        block = self._open
        if block is None or block.kind != kind:
            self._close(out)
            block = _Block(kind)
            self._begin(block, _START[kind], out)
        block.parts.append(text)
        out.append(f"{self._text_head}{string(text)}}}}}\n\n")

    def _begin(self, block: _Block, start: str, out: list[str]) -> None:
        self._blocks.append(block)
        self._open = block
        index = len(self._blocks) - 1
        self._delta_head = (
            'event: content_block_delta\ndata: {"type":"content_block_delta","index":' + str(index) + ","
        )
        delta_type, key = _DELTA_KEYS[block.kind]
        self._text_head = f'{self._delta_head}"delta":{{"type":"{delta_type}","{key}":'
        payload = '{"type":"content_block_start","index":' + str(index) + ',"content_block":' + start + "}"
        out.append(sse_event("content_block_start", payload))

    def _close(self, out: list[str]) -> None:
        if self._open is not None:
            self._open = None
            payload = '{"type":"content_block_stop","index":' + str(len(self._blocks) - 1) + "}"
            out.append(sse_event("content_block_stop", payload))

    def finish(self, deltas: Sequence[Delta], final: Final, stop_string: str | None) -> tuple[bytes, bytes]:
        request = self.request
        out: list[str] = []
        self._render(deltas, out)
        self._close(out)
        reason = _STOP_REASONS.get(final.finish_reason, "end_turn")
        sequence = None
        if reason == "end_turn" and stop_string is not None and final.finish_reason == "stop":
            reason, sequence = "stop_sequence", stop_string
        output_tokens = final.usage.completion_tokens
        if not request.stream:
            body = {"id": request.response_id, "type": "message", "role": "assistant", "model": request.model}
            body |= {"content": [block.body() for block in self._blocks], "stop_reason": reason}
            body |= {"stop_sequence": sequence}
            body["usage"] = {"input_tokens": request.prompt_tokens, "output_tokens": output_tokens}
            return b"", dumps(body).encode()
        delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}}
        delta["usage"] = {"output_tokens": output_tokens}
        out.append(sse_event("message_delta", dumps(delta)))
        return "".join(out).encode(), sse_event("message_stop", '{"type":"message_stop"}').encode()
