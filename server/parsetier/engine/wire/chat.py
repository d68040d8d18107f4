"""OpenAI chat completions: ``chat.completion.chunk`` events, or one ``chat.completion`` body.

Streaming, the choice (``index`` = ``Open.choice_index``) starts with a chunk of its ``role``
(and ``content`` ""), then each delta is one chunk: reasoning is ``reasoning_content``; a call's
first fragment carries its ``id`` (``call_…``), ``type`` and ``function.name``, later ones only
``function.arguments``; a delta's logprobs are the chunk's ``logprobs.content``. The last reply
ends with the chunk that carries ``finish_reason``; ``Final.wire`` holds the usage chunk
(``include_usage``) and ``data: [DONE]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parsetier.engine.call_ids import api_call_id
from parsetier.engine.wire.request import WireRequest
from parsetier.engine.wire.wire_json import (
    chat_logprob,
    dumps,
    framed,
    openai_stream_end,
    string,
    usage_openai,
)
from parsetier.messages import Delta, Final

CALL_PREFIX = "call_"
_PLAIN_TAIL = '},"logprobs":null,"finish_reason":null}]}\n\n'


class ChatRenderer:
    __slots__ = ("_content", "_head", "_logprobs", "_reasoning", "_role_sent", "request")

    def __init__(self, request: WireRequest) -> None:
        self.request = request
        head = {"id": request.response_id, "object": "chat.completion.chunk", "created": request.created}
        head["model"] = request.model
        self._head = "data: " + dumps(head)[:-1] + ',"choices":[{"index":' + str(request.choice_index) + ","
        self._content = self._head + '"delta":{"content":'
        self._reasoning = self._head + '"delta":{"reasoning_content":'
        self._role_sent = False
        self._logprobs: list[dict[str, Any]] = []
        """Non-streaming: every delivered logprob, for the body's ``logprobs.content``."""

    def step(self, deltas: Sequence[Delta]) -> bytes:
        if not self.request.stream:
            self._collect(deltas)
            return b""
        if self._role_sent and len(deltas) == 1:
            delta = deltas[0]
            if not (delta.tool_calls or delta.logprobs or delta.token_ids):  # a text delta
                if not delta.reasoning:
                    return framed(self._content, delta.content, _PLAIN_TAIL)
                if not delta.content:
                    return framed(self._reasoning, delta.reasoning, _PLAIN_TAIL)
            return self._chunk(delta).encode()
        return "".join([self._role(), *[self._chunk(delta) for delta in deltas]]).encode()

    def _role(self) -> str:
        """The choice's first chunk: the role alone, as OpenAI sends it (a first chunk with logprobs
        would have them counted twice by the SDK's accumulator for a choice other than the first)."""
        if self._role_sent:
            return ""
        self._role_sent = True
        return (
            self._head
            + '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def _collect(self, deltas: Sequence[Delta]) -> None:
        for delta in deltas:
            if delta.logprobs:
                self._logprobs += [chat_logprob(entry) for entry in delta.logprobs]

    def _chunk(self, delta: Delta) -> str:
        if not (delta.tool_calls or delta.logprobs or delta.token_ids):  # a text delta: a template
            if not delta.reasoning:
                return f"{self._content}{string(delta.content)}{_PLAIN_TAIL}"
            if not delta.content:
                return f"{self._reasoning}{string(delta.reasoning)}{_PLAIN_TAIL}"
        fields: dict[str, Any] = {}
        if delta.reasoning:
            fields["reasoning_content"] = delta.reasoning
        if delta.content:
            fields["content"] = delta.content
        if delta.tool_calls:
            calls = []
            for call in delta.tool_calls:
                if call.id is not None:
                    first = {"index": call.index, "id": api_call_id(call.id, CALL_PREFIX), "type": "function"}
                    first["function"] = {"name": call.name or "", "arguments": call.arguments}
                    calls.append(first)
                else:
                    calls.append({"index": call.index, "function": {"arguments": call.arguments}})
            fields["tool_calls"] = calls
        tail = ',"logprobs":null,"finish_reason":null'
        if delta.logprobs:
            tail = ',"logprobs":' + dumps({"content": [chat_logprob(e) for e in delta.logprobs]})
            tail += ',"finish_reason":null'
        if delta.token_ids:
            tail += ',"token_ids":' + dumps(list(delta.token_ids))
        return self._head + '"delta":' + dumps(fields) + tail + "}]}\n\n"

    def finish(self, deltas: Sequence[Delta], final: Final, stop_string: str | None) -> tuple[bytes, bytes]:
        request = self.request
        usage = final.usage
        usage_json = usage_openai(request.prompt_tokens, usage.completion_tokens, usage.reasoning_tokens)
        if not request.stream:
            self._collect(deltas)
            return b"", dumps(self._body(final, usage_json)).encode()
        last = [self._role(), *[self._chunk(delta) for delta in deltas]]
        last.append(self._head + '"delta":{},"logprobs":null,"finish_reason":')
        last.append(dumps(final.finish_reason) + "}]}\n\n")
        closing = openai_stream_end(request, "chat.completion.chunk", usage_json)
        return "".join(last).encode(), closing.encode()

    def _body(self, final: Final, usage_json: dict[str, Any]) -> dict[str, Any]:
        request, message = self.request, final.message
        out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.reasoning:
            out["reasoning_content"] = message.reasoning
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": api_call_id(call.id, CALL_PREFIX),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        choice: dict[str, Any] = {"index": request.choice_index, "message": out}
        choice["logprobs"] = {"content": self._logprobs} if self._logprobs else None
        choice["finish_reason"] = final.finish_reason
        if final.token_ids:
            choice["token_ids"] = list(final.token_ids)
        body = {"id": request.response_id, "object": "chat.completion", "created": request.created}
        return body | {"model": request.model, "choices": [choice], "usage": usage_json}
