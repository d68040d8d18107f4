"""OpenAI completions: ``text_completion`` objects, streamed as chunks or as one body.

A delta's ``content`` is the chunk's ``text`` (reasoning and tool calls have no place in this API:
use it for completion sessions, ``Open.completion``); its logprobs are the four parallel lists
``tokens``, ``token_logprobs``, ``top_logprobs`` (``{token: logprob}``) and ``text_offset``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parsetier.engine.wire.request import WireRequest
from parsetier.engine.wire.wire_json import dumps, logprob, openai_stream_end, usage_openai
from parsetier.messages import Delta, Final, TokenLogprob


def completion_logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any]:
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [logprob(e.logprob) for e in entries],
        "top_logprobs": [{top.token: logprob(top.logprob) for top in e.top_logprobs} for e in entries],
        "text_offset": [e.text_offset for e in entries],
    }


class CompletionsRenderer:
    __slots__ = ("_head", "_logprobs", "request")

    def __init__(self, request: WireRequest) -> None:
        self.request = request
        head = {"id": request.response_id, "object": "text_completion", "created": request.created}
        head["model"] = request.model
        self._head = "data: " + dumps(head)[:-1] + ',"choices":[{"index":' + str(request.choice_index) + ","
        self._logprobs: list[TokenLogprob] = []

    def step(self, deltas: Sequence[Delta]) -> bytes:
        if not self.request.stream:
            for delta in deltas:
                self._logprobs += delta.logprobs
            return b""
        return "".join([self._chunk(delta) for delta in deltas if delta.content or delta.logprobs]).encode()

    def _chunk(self, delta: Delta) -> str:
        lp = dumps(completion_logprobs(delta.logprobs)) if delta.logprobs else "null"
        ids = ',"token_ids":' + dumps(list(delta.token_ids)) if delta.token_ids else ""
        return (
            self._head
            + '"text":'
            + dumps(delta.content)
            + ',"logprobs":'
            + lp
            + ',"finish_reason":null'
            + ids
            + "}]}\n\n"
        )

    def finish(self, deltas: Sequence[Delta], final: Final, stop_string: str | None) -> tuple[bytes, bytes]:
        request = self.request
        usage_json = usage_openai(
            request.prompt_tokens, final.usage.completion_tokens, final.usage.reasoning_tokens
        )
        if not request.stream:
            for delta in deltas:
                self._logprobs += delta.logprobs
            choice: dict[str, Any] = {"index": request.choice_index, "text": final.message.content}
            choice["logprobs"] = completion_logprobs(self._logprobs) if self._logprobs else None
            choice["finish_reason"] = final.finish_reason
            if final.token_ids:
                choice["token_ids"] = list(final.token_ids)
            body = {"id": request.response_id, "object": "text_completion", "created": request.created}
            body |= {"model": request.model, "choices": [choice], "usage": usage_json}
            return b"", dumps(body).encode()
        last = [self._chunk(delta) for delta in deltas if delta.content or delta.logprobs]
        last.append(
            self._head + '"text":"","logprobs":null,"finish_reason":' + dumps(final.finish_reason) + "}]}\n\n"
        )
        closing = openai_stream_end(request, "text_completion", usage_json)
        return "".join(last).encode(), closing.encode()
