"""An OpenAI Responses request (``/v1/responses``) as a ``Conversation``.

``instructions`` becomes the first (system) message; ``input`` items become OpenAI-shaped
messages: a ``reasoning`` item's text is the next assistant turn's ``reasoning_content``,
consecutive ``function_call`` items are that turn's ``tool_calls`` (``arguments`` JSON text parsed
into the mapping templates read), each ``function_call_output`` a ``role: tool`` message. Nothing
is stored: ``previous_response_id``, ``conversation`` and item references are INVALID_ARGUMENT.
``reasoning.effort`` is the template's ``reasoning_effort``; ``text.format`` json_schema asks for
a JSON answer (the constraint).
"""

from __future__ import annotations

from parsetier.render.common import common_sampling, response_schema, template_switches, tool_choice
from parsetier.render.content import text_of
from parsetier.render.conversation import Conversation, Message, tool_call
from parsetier.render.fields import Obj
from parsetier.render.openai_chat import ROLES
from parsetier.render.tools import normalise_tools

REFUSED = {
    "previous_response_id": "stored responses are not available: send the whole conversation as input",
    "conversation": "stored conversations are not available: send the whole conversation as input",
    "prompt": "stored prompts are not available",
    "background": "background responses are not supported",
}
REASONING_PARTS = frozenset({"reasoning_text", "summary_text", "text"})


class _Items:
    """The messages being built, and the assistant turn later items still join."""

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.turn: Message | None = None
        self.reasoning: list[str] = []

    def assistant(self) -> Message:
        if self.turn is None:
            self.turn = {"role": "assistant", "content": ""}
            self.conv.messages.append(self.turn)
        if self.reasoning:
            previous = self.turn.get("reasoning_content")
            self.turn["reasoning_content"] = "\n".join(([previous] if previous else []) + self.reasoning)
            self.reasoning = []
        return self.turn

    def other(self, message: Message) -> None:
        self.turn = None
        self.conv.messages.append(message)


def _message(item: Obj, items: _Items) -> None:
    role = item.string("role")
    if role not in ROLES or role == "tool":
        raise item.fail("role", f"unknown role {role!r}")
    content = text_of(item.raw("content"), item.at("content")) or ""
    if ROLES[role] == "assistant":
        turn = items.assistant()
        turn["content"] = turn["content"] + ("\n" if turn["content"] and content else "") + content
    else:
        items.other({"role": ROLES[role], "content": content})


def read_input(body: Obj, items: _Items) -> None:
    value = body.raw("input")
    if isinstance(value, str):
        items.other({"role": "user", "content": value})
        return
    if value is None:
        raise body.fail("input", "is required")
    for item in body.objects("input"):
        kind_ = item.string("type", "message")
        if kind_ == "message":
            _message(item, items)
        elif kind_ == "reasoning":
            for key in ("content", "summary"):
                text = text_of(item.raw(key), item.at(key), REASONING_PARTS)
                if text:
                    items.reasoning.append(text)
                    break
        elif kind_ == "function_call":
            name = item.string("name")
            if not name:
                raise item.fail("name", "a function_call item needs a name")
            call = tool_call(
                name,
                item.raw("arguments"),
                item.at("arguments"),
                item.string("call_id"),
                items.conv.argument_texts,
            )
            items.assistant().setdefault("tool_calls", []).append(call)
        elif kind_ == "function_call_output":
            output = text_of(item.raw("output"), item.at("output")) or ""
            result: Message = {"role": "tool", "content": output}
            call_id = item.string("call_id")
            if call_id is not None:
                result["tool_call_id"] = call_id
            items.other(result)
        else:
            raise item.fail("type", f"input item {kind_!r} cannot be rendered")


def read(body: Obj) -> Conversation:
    conv = Conversation("openai_responses")
    for key, why in REFUSED.items():
        body.refuse(key, why)
    items = _Items(conv)
    instructions = body.string("instructions")
    if instructions is not None:
        items.other({"role": "system", "content": instructions})
    read_input(body, items)
    if not conv.messages:
        raise body.fail("input", "a Responses request needs at least one input item")
    conv.tools = normalise_tools(body, "tools")
    conv.tools_given = body.raw("tools") if conv.tools else None
    choice = body.raw("tool_choice")
    named = None
    if isinstance(choice, dict):
        obj = Obj(choice, body.at("tool_choice"))
        if obj.string("type") != "function":
            raise obj.fail("type", f"tool_choice type {obj.raw('type')!r} is not supported")
        named = obj.string("name")
        if not named:
            raise obj.fail("name", "a function tool_choice needs a name")
    elif choice is not None and not isinstance(choice, str):
        raise body.fail("tool_choice", "expected a string or an object")
    conv.tool_choice = tool_choice(choice, body.at("tool_choice"), conv.tools, named)
    conv.parallel_tool_calls = body.boolean("parallel_tool_calls")
    template_switches(body, conv)
    reasoning = body.obj("reasoning")
    if reasoning is not None:
        effort = reasoning.string("effort")
        if effort is not None:
            conv.template_kwargs["reasoning_effort"] = effort
            if effort == "none":  # the prompt and the parser agree: thinking off in both
                conv.thinking = False
                conv.template_kwargs.setdefault("enable_thinking", False)
                conv.template_kwargs.setdefault("thinking", False)
    common_sampling(body, conv)
    s = conv.sampling
    s.max_tokens = body.integer("max_output_tokens", minimum=1, maximum=2**32 - 1)
    s.top_logprobs = body.integer("top_logprobs", minimum=0, maximum=20) or 0
    s.logprobs = s.top_logprobs > 0
    text = body.obj("text")
    conv.response_schema = response_schema(text.obj("format") if text else None, ("schema",))
    return conv
