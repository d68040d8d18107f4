"""``Render``: a ``Rendered`` request as the ``RenderResponse`` message, and the constraint.

The ``Open`` is filled from the same normalised request the prompt was rendered from, so the
parser and the prompt agree on the tools, the tool choice, the thinking switch and the prompt's
tail. The constraint is ``BuildConstraint``'s own answer for that ``Open`` when the request forces
a tool; a JSON response format is constrained to its schema (see docs/render.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from parsetier.engine.wire import WireRequest
from parsetier.engine.wire.errors import error_bytes
from parsetier.models import Model
from parsetier.render import Rendered, Renderer
from parsetier.render.common import kwargs_as_strings
from parsetier.render.conversation import Conversation
from parsetier.service.constraint import build_constraint
from parsetier_api.v1 import parsetier_pb2 as pb

DIALECTS = {
    pb.WIRE_DIALECT_OPENAI_CHAT: "openai_chat",
    pb.WIRE_DIALECT_OPENAI_COMPLETIONS: "openai_completions",
    pb.WIRE_DIALECT_ANTHROPIC_MESSAGES: "anthropic_messages",
    pb.WIRE_DIALECT_OPENAI_RESPONSES: "openai_responses",
}
ID_PREFIXES = {
    "openai_chat": "chatcmpl-",
    "openai_completions": "cmpl-",
    "anthropic_messages": "msg_",
    "openai_responses": "resp_",
}
PROMPT_TAIL = 512
"""Prompt ids the ``Open`` carries: the tail decides where the output starts (reasoning or not)."""


def dialect_of(request: pb.RenderRequest) -> str:
    from parsetier.render.errors import BadRequest

    dialect = DIALECTS.get(request.dialect)
    if dialect is None:
        raise BadRequest("dialect", f"{request.dialect} is not a dialect (set one of WIRE_DIALECT_*)")
    return dialect


class RenderErrorWire:
    """A failed ``Render``'s error in its request's dialect (the ``parsetier-wire-bin`` trailer):
    the API's error body, which a gateway forwards with the code's HTTP status as it forwards a
    session's bytes. A body even for a streamed request: nothing has been sent yet, and an API
    refuses a bad streamed request with an error status and body before any event (the SDKs
    raise their error class from it). None for an unset dialect (that is the error) or a cancel."""

    __slots__ = ("dialect",)

    def __init__(self, dialect: int) -> None:
        self.dialect = dialect

    def error_wire(self, code: str, message: str) -> bytes:
        name = DIALECTS.get(self.dialect)
        if name is None or code == "CANCELLED":
            return b""
        return error_bytes(WireRequest(dialect=name, stream=False), code, message)


def render_request(renderer: Renderer, model: Model, request: pb.RenderRequest) -> pb.RenderResponse:
    """The whole of a ``Render`` call's work (run in a worker thread)."""
    response, constrain = render_prompt(renderer, model, request)
    if constrain is not None:
        constrain()
    return response


def render_prompt(
    renderer: Renderer, model: Model, request: pb.RenderRequest
) -> tuple[pb.RenderResponse, Callable[[], None] | None]:
    """The response without its constraint, and the work that sets the constraint when the
    request needs one (llguidance compiles it: milliseconds to more, so the service may run it
    elsewhere than the render)."""
    dialect = dialect_of(request)
    rendered = renderer.render(
        model, dialect, request.request_json, chat_template=request.chat_template or None
    )
    open_ = open_of(request, rendered, dialect)
    response = pb.RenderResponse(
        prompt_token_ids=rendered.prompt_ids,
        open=open_,
        sampling=sampling_of(rendered.conversation, model),
        prompt_tokens=len(rendered.prompt_ids),
    )
    if request.return_prompt_text and rendered.text is not None:
        response.prompt_text = rendered.text
    conv = rendered.conversation
    if conv.prompt_ids is not None or conv.prompt_text is not None:
        return response, None
    if conv.tool_choice not in ("auto", "none") and conv.tools:
        return response, lambda: response.constraint.CopyFrom(build_constraint(model, open_))
    schema = conv.response_schema
    if schema is not None:
        return response, lambda: response.constraint.CopyFrom(
            response_format_constraint(model, open_, schema)
        )
    return response, None


def response_id(request: pb.RenderRequest, rendered: Rendered, dialect: str) -> str:
    if request.response_id:
        return request.response_id
    seed = request.request_id.encode() if request.request_id else json.dumps(rendered.prompt_ids).encode()
    return ID_PREFIXES[dialect] + hashlib.blake2b(seed, digest_size=12).hexdigest()


def open_of(request: pb.RenderRequest, rendered: Rendered, dialect: str) -> pb.Open:
    conv = rendered.conversation
    open_ = pb.Open(
        model=request.model,
        request_id=request.request_id,
        prompt_token_ids=rendered.prompt_ids[-PROMPT_TAIL:],
        stop=conv.sampling.stop,
        stop_token_ids=conv.sampling.stop_token_ids,
    )
    if dialect == "openai_completions":
        open_.completion.SetInParent()
    else:
        if conv.tools_given:
            open_.tools_json = json.dumps(conv.tools_given, ensure_ascii=False)
        if conv.tool_choice in ("auto", "none", "required"):
            if conv.tool_choice != "auto":
                open_.tool_choice.mode = {
                    "none": pb.TOOL_CHOICE_MODE_NONE,
                    "required": pb.TOOL_CHOICE_MODE_REQUIRED,
                }[conv.tool_choice]
        else:
            open_.tool_choice.function_name = conv.tool_choice
        if conv.parallel_tool_calls is not None:
            open_.parallel_tool_calls = conv.parallel_tool_calls
        if conv.include_reasoning is not None:
            open_.include_reasoning = conv.include_reasoning
        if conv.thinking is not None:
            open_.thinking = conv.thinking
        open_.chat_template_kwargs.update(kwargs_as_strings(conv.template_kwargs))
    wire = open_.wire
    wire.dialect = request.dialect
    wire.response_id = response_id(request, rendered, dialect)
    wire.model = conv.model or request.model
    wire.created = request.created
    wire.stream = conv.stream
    wire.include_usage = conv.include_usage
    wire.prompt_tokens = len(rendered.prompt_ids)
    return open_


def sampling_of(conv: Conversation, model: Model) -> pb.SamplingParams:
    s = conv.sampling
    out = pb.SamplingParams(
        stop=s.stop,
        stop_token_ids=sorted(model.eos_token_ids)
        + [i for i in s.stop_token_ids if i not in model.eos_token_ids],
        logprobs=s.logprobs,
        top_logprobs=s.top_logprobs,
        n=s.n,
    )
    for name in (
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "presence_penalty",
        "frequency_penalty",
    ):
        value = getattr(s, name)
        if value is not None:
            setattr(out, name, value)
    return out


def response_format_constraint(model: Model, open_: pb.Open, schema: dict) -> pb.BuildConstraintResponse:
    """The constraint of a JSON response format: the message's reasoning as the format has it
    (as ``BuildConstraint`` would start it), then one JSON value matching ``schema`` (any JSON
    object for ``json_object``). A schema that is not a JSON Schema is INVALID_ARGUMENT; one
    llguidance cannot compile is FAILED_PRECONDITION."""
    from dataclasses import replace

    from parsetier import convert
    from parsetier.constraints import ConstraintRequest, derive, to_lark, to_structural_tag
    from parsetier.constraints.ir import Json
    from parsetier.constraints.schemas import check_schema, compiled
    from parsetier.service.constraint import _REASONING, reasoning_mode

    schema = schema or {"type": "object"}
    check_schema("response_format", schema)
    reasoning = reasoning_mode(model, convert.options_of(open_))
    request = ConstraintRequest(mode="none", reasoning=reasoning, stop_ids=model.eos_token_ids)
    root = replace(derive(model.grammar, request), calls=(), body=Json(schema), text_excludes=())
    lark = to_lark(root)
    compiled(lark, (), lambda tool: lark)
    return pb.BuildConstraintResponse(
        structural_tag_json=json.dumps(to_structural_tag(root), ensure_ascii=False),
        lark_grammar=lark,
        reasoning=_REASONING[reasoning],
    )
