"""Strict JSON and server-sent-event framing shared by the dialects.

Every body is JSON both official SDKs read: no NaN or Infinity (a logprob of -inf, which the
generate side may report, is written as -9999.0, OpenAI's own stand-in), UTF-8 text as it is,
with the characters some line splitters take for line ends (U+0085, U+2028, U+2029) escaped, so
that no SSE reader splits an event inside a string.
"""

from __future__ import annotations

import json
import math
from typing import Any

from parsetier.engine.wire.request import WireRequest
from parsetier.messages import TokenLogprob, TopLogprob

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_LINE_ENDS = (("\x85", "\\u0085"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))
NEG_INF_LOGPROB = -9999.0


def dumps(value: Any) -> str:
    """Compact strict JSON, safe inside one SSE ``data:`` line."""
    text = _encode(value)
    return text if text.isascii() else _escape_line_ends(text)


def _escape_line_ends(text: str) -> str:
    """``text`` with the line ends JSON allows raw but an SSE ``data:`` line does not escaped."""
    for char, escaped in _LINE_ENDS:
        if char in text:
            text = text.replace(char, escaped)
    return text


_encode_string = json.encoder.encode_basestring  # C: escapes '"', '\\' and control characters


def string(text: str) -> str:
    """A JSON string, exactly as ``dumps`` writes it: the per-token paths build events from
    templates around it (a fraction of a general encode's cost) and give the same bytes."""
    quoted = _encode_string(text)
    return quoted if text.isascii() else _escape_line_ends(quoted)


def framed(head: str, text: str, tail: str) -> bytes:
    """``head``, ``text`` as a JSON string, ``tail``, as UTF-8: the per-token events. Non-ASCII
    text is encoded alone (joining it to the event first would widen and re-encode the whole
    event: twice the cost for CJK text)."""
    quoted = string(text)
    if quoted.isascii():
        return f"{head}{quoted}{tail}".encode()
    return b"".join((head.encode(), quoted.encode(), tail.encode()))


def framed_numbered(head: str, number: int, middle: str, text: str, tail: str) -> bytes:
    """``framed(f"{head}{number}{middle}", text, tail)`` without building the head first."""
    quoted = string(text)
    if quoted.isascii():
        return f"{head}{number}{middle}{quoted}{tail}".encode()
    return b"".join((f"{head}{number}{middle}".encode(), quoted.encode(), tail.encode()))


def logprob(value: float) -> float:
    """A logprob JSON can hold (the proto refuses NaN and +inf; -inf becomes -9999.0)."""
    return NEG_INF_LOGPROB if math.isinf(value) else value


def sse_data(payload: str) -> str:
    """An OpenAI-style event: one ``data:`` line."""
    return f"data: {payload}\n\n"


def sse_event(name: str, payload: str) -> str:
    """A named event (Anthropic, Responses): ``event:`` and ``data:`` lines."""
    return f"event: {name}\ndata: {payload}\n\n"


DONE = "data: [DONE]\n\n"


def openai_stream_end(request: WireRequest, object_name: str, usage_json: dict[str, Any]) -> str:
    """The end of an OpenAI chat or completions stream: the usage chunk when the request asked
    for it (``stream_options.include_usage``), then ``[DONE]``."""
    if not request.include_usage:
        return DONE
    chunk = {"id": request.response_id, "object": object_name, "created": request.created}
    chunk |= {"model": request.model, "choices": [], "usage": usage_json}
    return sse_data(dumps(chunk)) + DONE


def top_entry(top: TopLogprob) -> dict[str, Any]:
    return {"token": top.token, "logprob": logprob(top.logprob), "bytes": list(top.bytes)}


def chat_logprob(entry: TokenLogprob) -> dict[str, Any]:
    """One ``logprobs.content[]`` entry of a chat chunk or body (and of Responses' text part)."""
    return {
        "token": entry.token,
        "logprob": logprob(entry.logprob),
        "bytes": list(entry.bytes),
        "top_logprobs": [top_entry(top) for top in entry.top_logprobs],
    }


def logprob_json(entry: TokenLogprob) -> tuple[str, str]:
    """One logprob entry as the JSON the native renderers insert (``_core.WireRenderer``, fed
    Python deltas on the annotated path): as a chat chunk's ``logprobs.content[]`` entry and as a
    Responses delta event's (``openai_responses.delta_logprob``)."""
    tops = [{"token": top.token, "logprob": logprob(top.logprob)} for top in entry.top_logprobs]
    delta = {"token": entry.token, "logprob": logprob(entry.logprob), "top_logprobs": tops}
    return dumps(chat_logprob(entry)), dumps(delta)


def usage_openai(prompt: int, completion: int, reasoning: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
