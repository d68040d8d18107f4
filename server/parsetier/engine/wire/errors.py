"""A session that ends with a status, in its dialect: the bytes a gateway forwards as they are.

A gateway forwarding a session's wire bytes must not have to write the one body it was not sent:
when the session ends with an error, the status comes with the error as its caller's API shows
it (``Open.wire``'s dialect), in the same form as the session's other bytes:

- streamed (``WireOptions.stream``), an event that ends the stream: OpenAI chat and completions
  send ``data: {"error": {...}}`` then ``data: [DONE]`` (as OpenAI-compatible servers do; the
  ``openai`` SDK raises ``APIError`` on it); Anthropic ``event: error`` with
  ``{"type": "error", "error": {"type", "message"}}`` (the ``anthropic`` SDK raises on it);
  Responses an ``error`` event (``type``, ``sequence_number`` going on from the stream's,
  ``code``, ``message``, ``param``), which the ``openai`` SDK yields as a ``ResponseErrorEvent``,
  and, once the response had started, its open item closed ``incomplete`` and
  ``response.failed`` (status ``failed``, ``error`` with one of the API's codes, the output so
  far): the session's renderer writes those (``ResponsesRenderer.fail``, in both engines);
- a body (``stream`` false), the API's error body: ``{"error": {"message", "type", "param",
  "code"}}`` for OpenAI's three, ``{"type": "error", "error": {...}}`` for Anthropic, to send with
  ``http_status(code)`` (the status the SDKs map to their exception classes).

``code`` (OpenAI's ``error.code``, Responses' ``code``) is the gRPC code's name in lower case
(``invalid_argument``); the message is the status's, clipped to ``MESSAGE_CHARS``. These bytes
are the same whichever engine ran the session (only the Responses ``sequence_number`` is read
from its renderer).
"""

from __future__ import annotations

from typing import NamedTuple

from parsetier.engine.wire.request import WireRequest
from parsetier.engine.wire.wire_json import DONE, dumps, sse_data, sse_event


class ErrorKind(NamedTuple):
    """How one status code shows in the APIs' shapes."""

    http_status: int
    openai_type: str
    anthropic_type: str
    responses_code: str = "server_error"
    """The ``error.code`` of a Responses ``response.failed`` (the API's ``ResponseError`` codes)."""


KINDS: dict[str, ErrorKind] = {
    "INVALID_ARGUMENT": ErrorKind(400, "invalid_request_error", "invalid_request_error", "invalid_prompt"),
    "FAILED_PRECONDITION": ErrorKind(400, "invalid_request_error", "invalid_request_error", "invalid_prompt"),
    "OUT_OF_RANGE": ErrorKind(400, "invalid_request_error", "invalid_request_error", "invalid_prompt"),
    "UNAUTHENTICATED": ErrorKind(401, "authentication_error", "authentication_error"),
    "PERMISSION_DENIED": ErrorKind(403, "permission_error", "permission_error"),
    "NOT_FOUND": ErrorKind(404, "not_found_error", "not_found_error", "invalid_prompt"),
    "RESOURCE_EXHAUSTED": ErrorKind(429, "rate_limit_error", "rate_limit_error", "rate_limit_exceeded"),
    "DEADLINE_EXCEEDED": ErrorKind(504, "timeout_error", "timeout_error"),
    "UNAVAILABLE": ErrorKind(503, "server_error", "overloaded_error"),
}
"""The status codes a session may end with, by name; any other is a server error (``SERVER``)."""
SERVER = ErrorKind(500, "server_error", "api_error")
MESSAGE_CHARS = 1024
"""The longest message an error shows (a status message is no longer)."""


def error_bytes(request: WireRequest, code: str, message: str, sequence: int = 0) -> bytes:
    """The bytes that end ``request``'s response with the status ``code`` (its name, as
    ``grpc.StatusCode`` and ``google.rpc.Code`` spell it) and ``message``. ``sequence``: the
    ``sequence_number`` the stream's next event would carry (Responses)."""
    kind = KINDS.get(code, SERVER)
    message = message[:MESSAGE_CHARS]
    name = code.lower()
    dialect = request.dialect
    if dialect == "anthropic_messages":
        body = dumps({"type": "error", "error": {"type": kind.anthropic_type, "message": message}})
        return (sse_event("error", body) if request.stream else body).encode()
    if dialect == "openai_responses" and request.stream:
        event = {"type": "error", "sequence_number": sequence, "code": name, "message": message}
        return sse_event("error", dumps(event | {"param": None})).encode()
    body = dumps({"error": {"message": message, "type": kind.openai_type, "param": None, "code": name}})
    return (sse_data(body) + DONE).encode() if request.stream else body.encode()


def failed_response(renderer: object, code: str, message: str) -> bytes | None:
    """A streamed Responses session's error through its renderer (``fail``: the ``error`` event
    numbered on from the stream, then ``response.failed`` with the output so far, when the
    response had started), or None when ``renderer`` renders no such thing."""
    fail = getattr(renderer, "fail", None)
    if fail is None:
        return None
    data: bytes = fail(code.lower(), message[:MESSAGE_CHARS], KINDS.get(code, SERVER).responses_code)
    return data


def http_status(code: str) -> int:
    """The HTTP status of an error body (``error_bytes`` with ``stream`` false)."""
    return KINDS.get(code, SERVER).http_status
