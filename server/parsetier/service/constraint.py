"""``BuildConstraint``: a request's options in, the constraint derived from its format out.

The request is read exactly as a ``Parse`` stream's ``Open`` is (same tools, tool_choice and
thinking rules, same prompt-tail reading), so the constraint is derived for the very start state
the parser will start in. A constraint is answered only once llguidance compiles it
(``constraints.schemas.compiled``): a schema it cannot hold a call to is refused, naming the tool.
"""

from __future__ import annotations

import dataclasses
import json

from parsetier import convert
from parsetier.constraints import ConstraintRequest, derive, to_lark, to_structural_tag
from parsetier.constraints.headers import header_reasoning
from parsetier.constraints.schemas import compiled
from parsetier.constraints.shape import reasoning_shape
from parsetier.engine.session import kwargs_thinking, start_state
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model
from parsetier_api.v1 import parsetier_pb2 as pb

_REASONING = {
    "off": pb.CONSTRAINT_REASONING_NONE,
    "open": pb.CONSTRAINT_REASONING_BLOCK,
    "optional": pb.CONSTRAINT_REASONING_OPTIONAL,
    "inside": pb.CONSTRAINT_REASONING_CONTINUED,
}


def build_constraint(model: Model, open_: pb.Open) -> pb.BuildConstraintResponse:
    options = convert.options_of(open_)
    reasoning = reasoning_mode(model, options)
    choice = options.tool_choice
    named = choice not in ("auto", "none", "required")
    request = ConstraintRequest(
        tools=options.tools,
        mode="named" if named else choice,
        function_name=choice if named else None,
        parallel_tool_calls=options.parallel_tool_calls,
        reasoning=reasoning,
        stop_ids=model.eos_token_ids,
    )
    root = derive(model.grammar, request)
    lark = to_lark(root)
    compiled(lark, request.callable_tools, lambda tool: to_lark(derive(model.grammar, _alone(request, tool))))
    g = model.grammar.grammar
    return pb.BuildConstraintResponse(
        structural_tag_json=json.dumps(to_structural_tag(root), ensure_ascii=False),
        lark_grammar=lark,
        triggers=root.triggers,
        reasoning=_REASONING[reasoning],
        message_start_anchors=[
            pb.MessageStartAnchor(text=g.terminals[term], in_reasoning=g.states[state].kind == "reasoning")
            for term, state in g.prompt.items()
        ],
    )


def _alone(request: ConstraintRequest, tool: Tool) -> ConstraintRequest:
    """The request with ``tool`` its only tool (to tell which tool a grammar fails on)."""
    mode = "auto" if request.mode == "none" else request.mode
    return dataclasses.replace(request, tools=(tool,), mode=mode, function_name=tool.name)


def reasoning_mode(model: Model, options: SessionOptions) -> str:
    """``inside`` when the output starts in reasoning (the prompt, or a template that opens it);
    ``open`` when thinking is on and the model opens the block itself; ``optional`` when nothing
    says whether it will; else ``off``."""
    g = model.grammar.grammar
    start = start_state(model.grammar, options, model.spec.thinking, model.tokenizer)
    if g.states[start].kind == "reasoning":
        return "inside"
    shape = reasoning_shape(g)
    if (shape is None or shape.open is None) and not header_reasoning(g):
        return "off"
    thinking = options.thinking if options.thinking is not None else kwargs_thinking(options)
    if thinking is None:
        thinking = model.spec.thinking
    if thinking is None:
        return "optional"
    return "open" if thinking else "off"
