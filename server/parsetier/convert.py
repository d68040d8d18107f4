"""Proto messages ↔ the core's value types. Pure functions, no grpc status handling beyond
raising ``ProtocolError`` for requests the proto can express but the contract rejects."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any, NamedTuple

from parsetier import tool_shapes
from parsetier.engine import json_bounds
from parsetier.engine.events import Event, EventKind
from parsetier.engine.wire import Dialect, WireRequest
from parsetier.messages import (
    CompletionOptions,
    Delta,
    Final,
    SessionOptions,
    StepLogprobs,
    TokenLogprob,
    Tool,
)
from parsetier.status import invalid
from parsetier_api.v1 import parsetier_pb2 as pb

_TOOL_CHOICE_MODES = {
    pb.TOOL_CHOICE_MODE_UNSPECIFIED: "auto",
    pb.TOOL_CHOICE_MODE_AUTO: "auto",
    pb.TOOL_CHOICE_MODE_NONE: "none",
    pb.TOOL_CHOICE_MODE_REQUIRED: "required",
}
FINISH_IN = {  # the reasons a client's Finish may give
    pb.FINISH_REASON_UNSPECIFIED: "stop",
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_ABORT: "abort",
}
_FINISH_OUT = {
    "stop": pb.FINISH_REASON_STOP,
    "length": pb.FINISH_REASON_LENGTH,
    "abort": pb.FINISH_REASON_ABORT,
    "tool_calls": pb.FINISH_REASON_TOOL_CALLS,
}
_EVENT_KINDS = {
    EventKind.CONTENT: pb.EVENT_KIND_CONTENT,
    EventKind.REASONING_START: pb.EVENT_KIND_REASONING_START,
    EventKind.REASONING: pb.EVENT_KIND_REASONING,
    EventKind.REASONING_END: pb.EVENT_KIND_REASONING_END,
    EventKind.TOOL_CALL_START: pb.EVENT_KIND_TOOL_CALL_START,
    EventKind.TOOL_ARGUMENTS: pb.EVENT_KIND_TOOL_ARGUMENTS,
    EventKind.TOOL_CALL_END: pb.EVENT_KIND_TOOL_CALL_END,
    EventKind.END: pb.EVENT_KIND_END,
}


def _parse_json(text: str, what: str) -> Any:
    """A client's JSON, within the bounds every JSON the server reads is held to."""
    try:
        return json_bounds.loads(text)
    except ValueError as exc:
        raise invalid(f"{what} is not valid JSON: {exc}") from None


def _tools_from_json(text: str) -> tuple[Tool, ...]:
    """The request's ``tools`` array, in any API's shape (``tool_shapes``)."""
    return tool_shapes.tools_of_json(_parse_json(text, "tools_json"), "tools_json")


TOOLS_CACHE_TEXT = 64 * 1024
"""``tools_json`` texts up to this size are parsed once per process (``_cached_tools``)."""


@functools.lru_cache(maxsize=32)
def _cached_tools(text: str) -> tuple[Tool, ...]:
    """Most requests of a deployment send the same tools, and parsing them was most of a session
    open (~45 of ~70 µs for two small tools). Tools are frozen and nothing changes a schema
    (``parameters``) once parsed, so sessions may share them. Bad input raises and is not cached;
    at most 32 texts of at most ``TOOLS_CACHE_TEXT`` characters are kept."""
    return _tools_from_json(text)


def tools_of(open_: pb.Open) -> tuple[Tool, ...]:
    if open_.tools and open_.tools_json:
        raise invalid("set either tools or tools_json, not both")
    if open_.tools_json:
        text = open_.tools_json
        tools = _cached_tools(text) if len(text) <= TOOLS_CACHE_TEXT else _tools_from_json(text)
    else:
        tools = []
        for i, tool in enumerate(open_.tools):
            if not tool.name:
                raise invalid(f"tools[{i}] has no name")
            what = f"tools[{i}].parameters_json"
            text = tool.parameters_json
            parameters = tool_shapes.schema(_parse_json(text, what), what) if text.strip() else {}
            tools.append(
                Tool(name=tool.name, parameters=parameters, description=tool.description, strict=tool.strict)
            )
        tools = tuple(tools)
    names = [tool.name for tool in tools]
    if len(set(names)) != len(names):
        raise invalid(f"duplicate tool names in {names}")
    return tools


def tool_choice_of(choice: pb.ToolChoice, tools: tuple[Tool, ...]) -> str:
    which = choice.WhichOneof("choice")
    if which == "function_name":
        if choice.function_name not in {tool.name for tool in tools}:
            raise invalid(f"tool_choice names {choice.function_name!r}, which is not among the tools")
        return choice.function_name
    if which is None:
        return "auto"
    mode = _TOOL_CHOICE_MODES.get(choice.mode)
    if mode is None:
        raise invalid(f"unknown tool_choice mode {choice.mode}")
    if mode == "required" and not tools:
        raise invalid("tool_choice is required but no tools were given")
    return mode


_OUTPUT_KINDS = frozenset(pb.OutputKind.values())


def options_of(open_: pb.Open, *, collect_in_final: bool = False, events: bool = True) -> SessionOptions:
    """Request options; token ids are validated by the session against its model's vocabulary.
    ``collect_in_final``, ``events``: see ``SessionOptions`` (the caller knows whether deltas and
    events are sent)."""
    if open_.output not in _OUTPUT_KINDS:
        raise invalid(f"unknown output kind {open_.output}")
    tools = tools_of(open_)
    return SessionOptions(
        tools=tools,
        tool_choice=tool_choice_of(open_.tool_choice, tools),
        parallel_tool_calls=open_.parallel_tool_calls if open_.HasField("parallel_tool_calls") else True,
        include_reasoning=open_.include_reasoning if open_.HasField("include_reasoning") else True,
        thinking=open_.thinking if open_.HasField("thinking") else None,
        chat_template_kwargs=dict(open_.chat_template_kwargs),
        prompt_token_ids=tuple(open_.prompt_token_ids),
        include_stop_text=open_.include_stop_text,
        complete_tool_calls=open_.complete_tool_calls,
        request_id=open_.request_id,
        return_token_ids=open_.return_token_ids,
        completion=completion_of(open_),
        stop=tuple(open_.stop),
        stop_token_ids=tuple(open_.stop_token_ids),
        choice_index=open_.choice_index,
        collect_in_final=collect_in_final,
        events=events,
    )


class Opening(NamedTuple):
    """What an ``Open`` decides apart from its per-session fields, shared by every ``Open`` that
    sets the same values (``opening_of``): the deltas and events the client reads and the
    ``SessionOptions`` it asks for with ``request_id``, ``prompt_token_ids`` and ``choice_index``
    at their defaults (``session_options`` adds a session's own)."""

    want_deltas: bool
    want_events: bool
    options: SessionOptions
    shared: dict[str, Any]
    """``options``' fields but the per-session ones, as keywords (``session_options``)."""


_SESSION_FIELDS = ("request_id", "prompt_token_ids", "choice_index")
"""The ``SessionOptions`` fields each session sets from its own ``Open``."""


OPENINGS = 64
"""``Opening`` values kept (``opening_of``): a deployment's requests use a few option sets."""
OPENING_KEY_TEXT = TOOLS_CACHE_TEXT
"""An ``Open`` whose shared fields hold more than this, in all (characters and bytes, and
``KEY_ID_SIZE`` per repeated id), is read whole each time (``options_of``) rather than kept as a
key: the kept keys stay within a few MiB."""
KEY_ID_SIZE = 32
"""What one id of a repeated number field (``stop_token_ids``) counts for (an ``int`` and its
pointer in the key's tuple)."""

_openings: dict[tuple, Opening] = {}
_openings_lock = threading.Lock()

_OPEN_FIELDS = pb.Open.DESCRIPTOR.fields_by_name
_PER_SESSION = frozenset(
    _OPEN_FIELDS[name].number
    for name in ("model", "request_id", "prompt_token_ids", "choice_index", "resume", "resumable", "wire")
)
"""``Open`` fields that are not part of an ``Opening``'s key: the model (the caller's), the
fields each session reads for itself (the ids' seed, the prompt, the choice; ``session_options``)
and those the protocol reads from the ``Open`` (``resume``, ``resumable``, ``wire``)."""
_MESSAGES = frozenset(f.number for f in pb.Open.DESCRIPTOR.fields if f.message_type is not None)
"""Message fields (``tool_choice``, ``completion``, ``tools``, the map's entries…): keyed as
their deterministic bytes."""
_MAPS = frozenset(
    f.number
    for f in pb.Open.DESCRIPTOR.fields
    if f.message_type is not None and f.message_type.GetOptions().map_entry
)
_REPEATED = frozenset(f.number for f in pb.Open.DESCRIPTOR.fields if f.is_repeated and f.number not in _MAPS)


def _opening_key(open_: pb.Open, unary: bool) -> tuple | None:
    """The key of an ``Open``'s shared fields: every field it sets (``ListFields``, so a field
    added to ``Open`` is part of it unless named in ``_PER_SESSION``), as its number and a
    hashable copy of its value (bytes for a message, a tuple for a repeated field, sorted
    pairs for a map). None: too large to keep (``OPENING_KEY_TEXT``)."""
    key: list = [unary]
    total = 0
    for field, value in open_.ListFields():
        number = field.number
        if number in _PER_SESSION:
            continue
        if number in _MAPS:
            value = tuple(sorted(value.items()))
            size = sum(len(k) + len(v) for k, v in value)
        elif number in _REPEATED:
            if number in _MESSAGES:
                value = tuple(item.SerializeToString(deterministic=True) for item in value)
                size = sum(map(len, value))
            else:
                value = tuple(value)
                strings = value and isinstance(value[0], str)
                size = sum(map(len, value)) if strings else KEY_ID_SIZE * len(value)
        elif number in _MESSAGES:
            value = value.SerializeToString(deterministic=True)
            size = len(value)
        else:
            size = len(value) if isinstance(value, str) else 0
        total += size
        if total > OPENING_KEY_TEXT:
            return None
        key.append(number)
        key.append(value)
    return tuple(key)


def _bytes_key(open_: pb.Open, unary: bool) -> tuple | None:
    """The key of an Open that sets no per-session field but the model: ``unary`` and its bytes.
    Equal bytes parse to equal fields, so an ``Opening`` kept under them is that Open's; an
    equal Open may serialize otherwise (another model, unknown fields, a map's order), and only
    gets an ``Opening`` of its own. (The model and unknown fields are in the bytes: harmless.)
    Never equal to an ``_opening_key`` (whose second item is a field number). Bytes past
    ``OPENING_KEY_TEXT`` take ``_opening_key``, which may keep no key."""
    data = open_.SerializeToString()
    return (unary, data) if len(data) <= OPENING_KEY_TEXT else _opening_key(open_, unary)


def opening_of(open_: pb.Open, *, unary: bool = False, shared_only: bool = False) -> Opening:
    """``wants`` and ``options_of`` of an ``Open`` with its per-session fields left out, made
    once per set of values and shared (the last ``OPENINGS``): most of a deployment's opens set
    the same options (tools, switches), and reading them was the largest part of an open. A
    session's own fields go back in with ``session_options``. ``SessionOptions`` is frozen and
    nothing changes a value in it (``chat_template_kwargs`` is only read), so sessions may share
    one. A refused ``Open`` raises each time and is not kept.

    ``shared_only``: the caller read that the Open sets no ``_PER_SESSION`` field but the model.
    Its serialized bytes are then its key (``_bytes_key``), a third of ``_opening_key``'s cost."""
    key = _bytes_key(open_, unary) if shared_only else _opening_key(open_, unary)
    found = None if key is None else _openings.get(key)
    if found is not None:
        return found
    want_deltas, want_events = wants(open_.output, unary=unary)
    options = options_of(open_, collect_in_final=not want_deltas, events=want_events)
    if options.request_id or options.prompt_token_ids or options.choice_index:
        options = replace(options, request_id="", prompt_token_ids=(), choice_index=0)
    shared = {
        f.name: getattr(options, f.name) for f in fields(SessionOptions) if f.name not in _SESSION_FIELDS
    }
    made = Opening(want_deltas, want_events, options, shared)
    if key is not None:
        with _openings_lock:
            if len(_openings) >= OPENINGS:
                _openings.pop(next(iter(_openings)))
            _openings[key] = made
    return made


def session_options(opening: Opening, request_id: str, prompt: Sequence[int], choice: int) -> SessionOptions:
    """A session's ``SessionOptions``: its ``Opening``'s, with its ``Open``'s own request id,
    prompt and choice, read by the caller (the same value ``options_of`` makes; the shared one
    when it sets none)."""
    if not request_id and not prompt and not choice:
        return opening.options
    # Keywords, not ``replace`` (which costs several times more), and derived from the fields,
    # so a field added to ``SessionOptions`` is carried over too.
    return SessionOptions(
        **opening.shared, request_id=request_id, prompt_token_ids=tuple(prompt), choice_index=choice
    )


def completion_of(open_: pb.Open) -> CompletionOptions | None:
    if not open_.HasField("completion"):
        return None
    c = open_.completion
    return CompletionOptions(
        skip_special_tokens=c.skip_special_tokens if c.HasField("skip_special_tokens") else True,
        spaces_between_special_tokens=(
            c.spaces_between_special_tokens if c.HasField("spaces_between_special_tokens") else True
        ),
    )


def step_logprobs_of(logprobs: pb.StepLogprobs) -> StepLogprobs:
    """The proto's packed arrays as they are (the session validates them)."""
    return StepLogprobs(logprobs.token_logprobs, logprobs.top_token_ids, logprobs.top_logprobs)


def add_logprobs(target, logprobs: Sequence[TokenLogprob]) -> None:
    """Append resolved logprobs to a repeated ``TokenLogprob`` field in place: about half the cost
    of building each message and copying it in (top-k 20 is 21 messages per token)."""
    add = target.add
    for lp in logprobs:
        message = add(token_id=lp.token_id, token=lp.token, bytes=lp.bytes, logprob=lp.logprob)
        message.text_offset = lp.text_offset
        add_top = message.top_logprobs.add
        for t in lp.top_logprobs:
            add_top(token_id=t.token_id, token=t.token, bytes=t.bytes, logprob=t.logprob)


def finish_of(finish: pb.Finish) -> tuple[str, int | str | None]:
    reason = FINISH_IN.get(finish.reason)
    if reason is None:
        known = finish.reason in pb.FinishReason.values()
        name = pb.FinishReason.Name(finish.reason) if known else str(finish.reason)
        raise invalid(f"finish reason {name} is not allowed in Finish; use STOP, LENGTH or ABORT")
    which = finish.WhichOneof("matched_stop")
    matched: int | str | None = None
    if which == "stop_token_id":
        matched = finish.stop_token_id
    elif which == "stop_string":
        matched = finish.stop_string
    return reason, matched


def delta_to_pb(delta: Delta) -> pb.Delta:
    message = pb.Delta()
    fill_delta(message, delta)
    return message


def add_deltas(target, deltas) -> None:
    """Append ``deltas`` to a repeated ``Delta`` field in place (``extend`` would build each
    message, then copy it)."""
    add = target.add
    for delta in deltas:
        if delta.tool_calls or delta.logprobs or delta.token_ids:
            fill_delta(add(), delta)
        elif delta.reasoning:
            add(reasoning=delta.reasoning, content=delta.content)
        else:
            add(content=delta.content)


def fill_delta(message: pb.Delta, delta: Delta) -> None:
    if delta.reasoning:
        message.reasoning = delta.reasoning
    if delta.content:
        message.content = delta.content
    if delta.tool_calls:
        add = message.tool_calls.add
        for t in delta.tool_calls:
            add(index=t.index, id=t.id or "", name=t.name or "", arguments=t.arguments)
    if delta.logprobs:
        add_logprobs(message.logprobs, delta.logprobs)
    if delta.token_ids:
        message.token_ids.extend(delta.token_ids)


def event_to_pb(event: Event) -> pb.Event:
    """A ``TOOL_CALL_END``'s text (the call as the model wrote it, for ``complete_tool_calls``'
    recovery) stays in the engine: the wire contract says that event carries none."""
    return pb.Event(
        kind=_EVENT_KINDS[event.kind],
        text=event.text if event.kind is not EventKind.TOOL_CALL_END else "",
        tool_index=event.tool_index,
        tokens=event.tokens,
        call_id=event.call_id,
    )


def fill_final(out: pb.Final, final: Final) -> None:
    """Write ``final`` into ``out`` (a reply's ``final``) in place: building a ``Final`` and
    copying it in costs about twice as much, once per session."""
    message = final.message
    out.finish_reason = _FINISH_OUT[final.finish_reason]
    usage = out.usage
    usage.SetInParent()
    usage.completion_tokens = final.usage.completion_tokens
    usage.reasoning_tokens = final.usage.reasoning_tokens
    assistant = out.message
    assistant.SetInParent()
    assistant.content = message.content
    assistant.reasoning = message.reasoning
    add = assistant.tool_calls.add
    for c in message.tool_calls:
        add(id=c.id, name=c.name, arguments=c.arguments)
    out.token_ids.extend(final.token_ids)
    add_logprobs(out.logprobs, final.logprobs)


_DIALECTS: dict[int, Dialect] = {
    pb.WIRE_DIALECT_OPENAI_CHAT: "openai_chat",
    pb.WIRE_DIALECT_OPENAI_COMPLETIONS: "openai_completions",
    pb.WIRE_DIALECT_ANTHROPIC_MESSAGES: "anthropic_messages",
    pb.WIRE_DIALECT_OPENAI_RESPONSES: "openai_responses",
}


def wire_request_of(open_: pb.Open) -> WireRequest:
    """``Open.wire`` (and the choice index) as a dialect's request-level values."""
    wire = open_.wire
    dialect = _DIALECTS.get(wire.dialect)
    if dialect is None:
        raise invalid(f"wire.dialect: {wire.dialect} is not a wire dialect (set one of WIRE_DIALECT_*)")
    return WireRequest(
        dialect=dialect,
        response_id=wire.response_id,
        model=wire.model,
        created=wire.created,
        stream=wire.stream,
        include_usage=wire.include_usage,
        prompt_tokens=wire.prompt_tokens,
        choice_index=open_.choice_index,
    )


def wants(output: int, *, unary: bool) -> tuple[bool, bool]:
    """(deltas, events) to send for an ``OutputKind``."""
    if output == pb.OUTPUT_KIND_UNSPECIFIED:
        output = pb.OUTPUT_KIND_FINAL_ONLY if unary else pb.OUTPUT_KIND_DELTAS
    deltas = output in (pb.OUTPUT_KIND_DELTAS, pb.OUTPUT_KIND_DELTAS_AND_EVENTS)
    events = output in (pb.OUTPUT_KIND_EVENTS, pb.OUTPUT_KIND_DELTAS_AND_EVENTS)
    return deltas, events
