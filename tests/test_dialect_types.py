"""Every event and body parsetier renders is valid for the official SDKs' own types, strictly.

The SDKs build their objects without validation (``construct``), so a missing required field
passes them by and only breaks a strictly typed client (Responses' ``usage`` once lacked
``input_tokens_details.cache_write_tokens``). Here each event of each dialect, from the live
server, is validated with pydantic's strict mode against the SDK class its ``type`` names (not
the union of all events, which any look-alike would satisfy); errors in the dialect too.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import anthropic.types
import grpc
import openai.types
import openai.types.chat
import openai.types.responses
import pydantic
import pytest

import test_dialects as td

STREAM_UNIONS = {
    "openai_responses": openai.types.responses.ResponseStreamEvent,
    "anthropic_messages": anthropic.types.RawMessageStreamEvent,
}
BODIES = {
    "openai_chat": openai.types.chat.ChatCompletion,
    "openai_completions": openai.types.Completion,
    "anthropic_messages": anthropic.types.Message,
    "openai_responses": openai.types.responses.Response,
}
CHUNKS = {"openai_chat": openai.types.chat.ChatCompletionChunk, "openai_completions": openai.types.Completion}


def _members(union: Any) -> list[type[pydantic.BaseModel]]:
    """The classes of an SDK's (annotated) union of events."""
    while typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    return [m for m in typing.get_args(union) if isinstance(m, type)]


def _by_type(union: Any) -> dict[str, type[pydantic.BaseModel]]:
    """Each event class by the ``type`` its ``Literal`` names."""
    found = {}
    for member in _members(union):
        (name,) = typing.get_args(member.model_fields["type"].annotation)
        found[name] = member
    return found


EVENT_TYPES = {dialect: _by_type(union) for dialect, union in STREAM_UNIONS.items()}
ERROR_EVENT = {
    "openai_responses": openai.types.responses.ResponseErrorEvent,
    "anthropic_messages": anthropic.types.ErrorResponse,
}


def strict(model: type[pydantic.BaseModel], data: Any) -> None:
    model.model_validate(data, strict=True)


def events(body: bytes) -> list[tuple[str | None, Any]]:
    """The (event name, JSON data) of each server-sent event (``[DONE]`` left out)."""
    out = []
    for block in body.decode().split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
        if data is not None and data != "[DONE]":
            out.append((name, json.loads(data)))
    return out


def check_types(dialect: str, body: bytes, stream: bool) -> int:
    """Validate every event (or the body) strictly; the number of events checked."""
    if not stream:
        strict(BODIES[dialect], json.loads(body))
        return 1
    seen = events(body)
    assert seen
    for name, data in seen:
        if dialect in EVENT_TYPES:
            assert name == data["type"]
            model = EVENT_TYPES[dialect].get(data["type"]) or ERROR_EVENT[dialect]
        elif "error" in data:
            model = openai.types.ErrorObject
            data = data["error"]
        else:
            model = CHUNKS[dialect]
            if dialect == "openai_completions":
                # The SDK types a completions chunk as a whole ``Completion``, whose
                # ``finish_reason`` may not be null; OpenAI's own chunks carry null until the last.
                data = data | {
                    "choices": [c | {"finish_reason": c["finish_reason"] or "stop"} for c in data["choices"]]
                }
        strict(model, data)
    return len(seen)


def _family_params() -> list:
    """Every family, dialect and delivery; the quick lane runs the first family's (the rest is
    ``slow``, as in test_dialects)."""
    return [
        pytest.param(
            family,
            dialect,
            stream,
            id=f"{family.label}-{dialect}-{'stream' if stream else 'body'}",
            marks=() if family is td.PACKAGED[0] else pytest.mark.slow,
        )
        for family in td.PACKAGED
        for dialect in td.DIALECTS
        for stream in (True, False)
    ]


@pytest.mark.parametrize(("family", "dialect", "stream"), _family_params())
def test_every_event_is_valid_for_the_sdk_types(family, dialect, stream, registry, client) -> None:
    """Each family's message with reasoning and (parallel) calls, over Parse, on the native core's
    renderer: every event and body validates strictly."""
    case = td._family_case(family, registry)
    body, _ = td.run_parse(client, case, dialect, stream)
    assert check_types(dialect, body, stream) >= (3 if stream else 1)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("dialect", [*td.DIALECTS, "openai_completions"])
def test_cuts_stops_and_logprobs_are_valid_for_the_sdk_types(dialect, stream, registry, client) -> None:
    cases = [*td.qwen_cases(registry), *td._logprob_cases(registry)]
    if dialect == "openai_completions":
        cases = [td._completion_case(registry, "Once upon a time", 3, "length")]
    for case in cases:
        body, _ = td.RUNS["ParseBatch"](client, case, dialect, stream)
        check_types(dialect, body, stream)


def test_responses_usage_has_every_required_field(registry, client) -> None:
    """The closing event's usage, field by field, as the SDK's type requires it."""
    case = td.qwen_cases(registry)[1]
    body, final = td.run_parse(client, case, "openai_responses", True)
    (completed,) = [data for name, data in events(body) if name == "response.completed"]
    usage = openai.types.responses.ResponseUsage.model_validate(completed["response"]["usage"], strict=True)
    assert usage.input_tokens_details.cache_write_tokens == 0 == usage.input_tokens_details.cached_tokens
    assert usage.output_tokens == final.usage.completion_tokens


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("dialect", [*td.DIALECTS, "openai_completions"])
def test_errors_in_the_dialect_are_valid_for_the_sdk_types(dialect, stream, client) -> None:
    """A session ended by a bad token id: its error bytes (with the events before them) validate."""
    options: dict[str, Any] = {"completion": dialect == "openai_completions"}
    stream_ = client.open("qwen3", output="final", wire=td.wire(dialect, stream), **options)
    for tid in (785, 4226, 374, 10_000_000):
        stream_.send([tid])
    pieces = []
    with pytest.raises(grpc.RpcError):
        for piece in stream_.wire():
            pieces.append(piece)
    body = b"".join(pieces)
    assert b"is not in the vocabulary" in body
    check_types(dialect, body, stream) if stream else strict_error_body(dialect, body)


def strict_error_body(dialect: str, body: bytes) -> None:
    data = json.loads(body)
    if dialect == "anthropic_messages":
        strict(anthropic.types.ErrorResponse, data | {"request_id": None})
    else:
        strict(openai.types.ErrorObject, data["error"])
