"""Building request messages from plain Python values (OpenAI-shaped tools and options).

Kept free of I/O so the sync client, the async client and the replay CLI build identical
messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from parsetier_api.v1 import parsetier_pb2 as pb

StepLike = Sequence[int] | str | pb.Step
"""One decode step: its token ids, already-detokenized text, or a ``pb.Step``."""

OUTPUT_KINDS = {
    "deltas": pb.OUTPUT_KIND_DELTAS,
    "events": pb.OUTPUT_KIND_EVENTS,
    "both": pb.OUTPUT_KIND_DELTAS_AND_EVENTS,
    "final": pb.OUTPUT_KIND_FINAL_ONLY,
}
FINISH_REASONS = {
    "stop": pb.FINISH_REASON_STOP,
    "length": pb.FINISH_REASON_LENGTH,
    "abort": pb.FINISH_REASON_ABORT,
}
_MODES = {
    "auto": pb.TOOL_CHOICE_MODE_AUTO,
    "none": pb.TOOL_CHOICE_MODE_NONE,
    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
}


def tool_message(tool: Mapping[str, Any]) -> pb.Tool:
    """A function tool in any API's shape: OpenAI chat (``{"type": "function", "function": {...}}``
    or the bare function object), Responses' flat function tool, Anthropic's (``input_schema``).
    The server reads ``tools_json`` the same way (``parsetier.tool_shapes``); a provider-run tool
    (``web_search``...) is refused here as there."""
    if tool.get("type") not in (None, "function", "custom"):
        raise ValueError(f"a {tool.get('type')!r} tool is not a function tool")
    function = tool.get("function", tool)
    parameters = function.get("parameters", function.get("input_schema"))
    return pb.Tool(
        name=function["name"],
        description=function.get("description") or "",
        parameters_json=json.dumps(parameters) if parameters is not None else "",
        strict=function.get("strict") is True,
    )


def tool_choice_message(choice: str | Mapping[str, Any] | None) -> pb.ToolChoice | None:
    """``"auto"``/``"none"``/``"required"``, a function name, or OpenAI's named-function object."""
    if choice is None:
        return None
    if isinstance(choice, Mapping):
        return pb.ToolChoice(function_name=choice.get("function", choice)["name"])
    if choice in _MODES:
        return pb.ToolChoice(mode=_MODES[choice])
    return pb.ToolChoice(function_name=choice)


def open_message(
    model: str,
    *,
    tools: Iterable[Mapping[str, Any]] | str | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
    parallel_tool_calls: bool | None = None,
    include_reasoning: bool | None = None,
    thinking: bool | None = None,
    chat_template_kwargs: Mapping[str, str] | None = None,
    prompt_token_ids: Sequence[int] = (),
    output: str = "deltas",
    include_stop_text: bool = False,
    complete_tool_calls: bool = False,
    request_id: str = "",
    return_token_ids: bool = False,
    completion: bool = False,
    skip_special_tokens: bool | None = None,
    spaces_between_special_tokens: bool | None = None,
    choice_index: int = 0,
    stop: Sequence[str] = (),
    stop_token_ids: Sequence[int] = (),
    wire: pb.WireOptions | Mapping[str, Any] | None = None,
) -> pb.Open:
    """The ``Open`` of a session. ``tools`` may be OpenAI tool dicts or the raw JSON array text.

    ``output``: ``deltas`` (default), ``events``, ``both`` or ``final`` (only the final result).
    ``completion``: a completion session (plain text; ``skip_special_tokens`` and
    ``spaces_between_special_tokens`` apply, unset meaning vLLM's defaults). For ``n`` > 1, open
    one session per choice with the same ``request_id`` and ``choice_index`` 0 .. n-1.
    ``wire``: render the output as a public API's bytes (``Open.wire``): a ``pb.WireOptions`` or
    its fields as a dict, e.g. ``{"dialect": "openai_chat", "response_id": "chatcmpl-1", "model":
    "qwen3", "stream": True}``; the bytes are then on every reply's ``wire`` and ``final.wire``."""
    message = pb.Open(
        model=model,
        request_id=request_id,
        prompt_token_ids=prompt_token_ids,
        output=OUTPUT_KINDS[output],
        include_stop_text=include_stop_text,
        complete_tool_calls=complete_tool_calls,
        return_token_ids=return_token_ids,
        choice_index=choice_index,
        stop=stop,
        stop_token_ids=stop_token_ids,
    )
    if completion or skip_special_tokens is not None or spaces_between_special_tokens is not None:
        message.completion.SetInParent()
        if skip_special_tokens is not None:
            message.completion.skip_special_tokens = skip_special_tokens
        if spaces_between_special_tokens is not None:
            message.completion.spaces_between_special_tokens = spaces_between_special_tokens
    if isinstance(tools, str):
        message.tools_json = tools
    elif tools is not None:
        message.tools.extend(tool_message(t) for t in tools)
    choice = tool_choice_message(tool_choice)
    if choice is not None:
        message.tool_choice.CopyFrom(choice)
    if parallel_tool_calls is not None:
        message.parallel_tool_calls = parallel_tool_calls
    if include_reasoning is not None:
        message.include_reasoning = include_reasoning
    if thinking is not None:
        message.thinking = thinking
    if chat_template_kwargs:
        message.chat_template_kwargs.update(chat_template_kwargs)
    if wire is not None:
        message.wire.CopyFrom(wire_options(wire))
    return message


WIRE_DIALECTS = {
    "openai_chat": pb.WIRE_DIALECT_OPENAI_CHAT,
    "openai_completions": pb.WIRE_DIALECT_OPENAI_COMPLETIONS,
    "anthropic_messages": pb.WIRE_DIALECT_ANTHROPIC_MESSAGES,
    "openai_responses": pb.WIRE_DIALECT_OPENAI_RESPONSES,
}


def wire_options(wire: pb.WireOptions | Mapping[str, Any]) -> pb.WireOptions:
    """``Open.wire`` from a dict of its fields (``dialect`` by name: ``openai_chat``,
    ``openai_completions``, ``anthropic_messages``, ``openai_responses``)."""
    if isinstance(wire, pb.WireOptions):
        return wire
    fields = dict(wire)
    dialect = fields.pop("dialect")
    return pb.WireOptions(dialect=WIRE_DIALECTS.get(dialect, dialect), **fields)


def step_message(step: StepLike) -> pb.Step:
    """Token ids, text, or a ready ``pb.Step`` (e.g. text with ``text_tokens`` for usage)."""
    if isinstance(step, pb.Step):
        return step
    if isinstance(step, str):
        return pb.Step(text=step)
    return pb.Step(token_ids=step)


TopLike = Mapping[int, float] | Sequence[tuple[int, float]]
"""One position's alternatives: ``{id: logprob}`` (vLLM's per-position dict) or ``[(id, logprob)]``."""


def step_logprobs(token_logprobs: Sequence[float], top: Sequence[TopLike] = ()) -> pb.StepLogprobs:
    """Logprobs of one step: the sampled tokens' logprobs and, per token, the same number of
    alternatives (in the order to report them)."""
    message = pb.StepLogprobs(token_logprobs=token_logprobs)
    for position in top:
        pairs = position.items() if isinstance(position, Mapping) else position
        for token_id, logprob in pairs:
            message.top_token_ids.append(token_id)
            message.top_logprobs.append(logprob)
    return message


def logprob_step(
    token_ids: Sequence[int], token_logprobs: Sequence[float], top: Sequence[TopLike] = ()
) -> pb.Step:
    """An id step carrying its logprobs: ``logprob_step([id], [-0.1], [{id: -0.1, other: -2.5}])``."""
    return pb.Step(token_ids=token_ids, logprobs=step_logprobs(token_logprobs, top))


def finish_message(
    reason: str = "stop",
    matched_stop: int | str | None = None,
    other_choices_usage: pb.Usage | tuple[int, int] | None = None,
) -> pb.Finish:
    """A ``Finish``. ``other_choices_usage``: with ``Open.wire`` and ``n`` > 1, the sum of the
    other choices' ``Final.usage`` (a ``Usage`` or ``(completion_tokens, reasoning_tokens)``), sent
    with the last choice to finish, whose closing bytes then show the whole request's usage."""
    message = pb.Finish(reason=FINISH_REASONS[reason])
    if isinstance(other_choices_usage, tuple):
        completion, reasoning = other_choices_usage
        other_choices_usage = pb.Usage(completion_tokens=completion, reasoning_tokens=reasoning)
    if other_choices_usage is not None:
        message.other_choices_usage.CopyFrom(other_choices_usage)
    if isinstance(matched_stop, str):
        message.stop_string = matched_stop
    elif matched_stop is not None:
        message.stop_token_id = matched_stop
    return message


def parse_once_request(
    model: str,
    token_ids: Iterable[int] = (),
    finish_reason: str = "stop",
    *,
    text: str = "",
    text_tokens: int = 0,
    matched_stop: int | str | None = None,
    tools: Iterable[Mapping[str, Any]] | str | None = None,
    logprobs: pb.StepLogprobs | None = None,
    **options: Any,
) -> pb.ParseOnceRequest:
    """The unary request; it asks for the final result only unless ``output`` says otherwise.
    ``logprobs`` (``step_logprobs(...)``) cover all of ``token_ids``."""
    options.setdefault("output", "final")
    return pb.ParseOnceRequest(
        open=open_message(model, tools=tools, **options),
        token_ids=list(token_ids),
        text=text,
        text_tokens=text_tokens,
        finish=finish_message(finish_reason, matched_stop),
        logprobs=logprobs,
    )


def steps_request(steps: Iterable[StepLike], finish: pb.Finish | None = None) -> pb.ParseRequest:
    """A client message of decode steps (token-id lists, text or ``pb.Step``), with the ``Finish``
    when it is the session's last."""
    return pb.ParseRequest(steps=[step_message(s) for s in steps], finish=finish)


def session_steps(
    steps: Iterable[StepLike], finish: pb.Finish, steps_per_message: int = 1
) -> Iterator[pb.ParseRequest]:
    """A session's client messages after its Open: the steps (``steps_per_message`` per message),
    then Finish in the last message. Lazy: a step is sent as soon as its message is full."""
    batch: list[StepLike] = []
    for step in steps:
        batch.append(step)
        if len(batch) >= steps_per_message:
            yield steps_request(batch)
            batch = []
    yield steps_request(batch, finish)


def stream_messages(
    model: str,
    steps: Iterable[StepLike],
    finish_reason: str = "stop",
    *,
    matched_stop: int | str | None = None,
    tools: Iterable[Mapping[str, Any]] | str | None = None,
    steps_per_message: int = 1,
    other_choices_usage: pb.Usage | tuple[int, int] | None = None,
    **options: Any,
) -> tuple[pb.Open, Iterator[pb.ParseRequest]]:
    """A recorded output as a session: its ``Open`` (``options``: ``open_message``'s keywords)
    and the client messages after it (``session_steps``), what ``parse_stream`` sends on either
    client, over a raw stream or a resuming one."""
    open_ = open_message(model, tools=tools, **options)
    finish = finish_message(finish_reason, matched_stop, other_choices_usage)
    return open_, session_steps(steps, finish, steps_per_message)


def session_messages(
    open_: pb.Open,
    steps: Iterable[StepLike],
    finish: pb.Finish,
    steps_per_message: int = 1,
) -> Iterator[pb.ParseRequest]:
    """A whole session as client messages: Open, then ``session_steps``."""
    yield pb.ParseRequest(open=open_)
    yield from session_steps(steps, finish, steps_per_message)
