"""An OpenAI chat-completions request (``/v1/chat/completions``) as a ``Conversation``.

Messages keep OpenAI's shape, which is what Hugging Face templates are written for; what changes:
``developer`` becomes ``system``; content parts become one string (``content.text_of``); an
assistant's ``reasoning`` is its ``reasoning_content``; tool calls' ``arguments`` JSON text becomes
the mapping templates read (refused when it is not a JSON object). vLLM's extensions are read too:
``chat_template_kwargs``, ``include_reasoning``, ``stop_token_ids``, ``top_k``,
``add_generation_prompt``.
"""

from __future__ import annotations

from typing import Any

from parsetier.render.common import (
    MAX_N,
    common_sampling,
    response_schema,
    stops,
    template_switches,
    tool_choice,
)
from parsetier.render.content import text_of
from parsetier.render.conversation import Conversation, Message, tool_call
from parsetier.render.errors import BadRequest
from parsetier.render.fields import Obj
from parsetier.render.tools import normalise_tools

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}

REFUSED = {
    "audio": "audio output is not supported",
    "prediction": "predicted outputs are not supported",
    "logit_bias": "logit_bias is not supported",
    "functions": "the legacy functions field is not supported: send tools",
    "function_call": "the legacy function_call field is not supported: send tool_choice",
    "continue_final_message": "continue_final_message is not supported",
    "echo": "echo is not supported",
    "documents": "documents are not supported",
    "web_search_options": "hosted web search is not available: the model's server runs no tools",
}


def tool_calls(message: Obj, texts: list[str | None]) -> list[dict[str, Any]] | None:
    calls = []
    for call in message.objects("tool_calls"):
        function = call.obj("function")
        if function is None:
            raise call.fail("function", "a tool call needs its function object")
        name = function.string("name")
        if not name:
            raise function.fail("name", "a tool call needs its function's name")
        calls.append(
            tool_call(name, function.raw("arguments"), function.at("arguments"), call.string("id"), texts)
        )
    return calls or None


def message_of(m: Obj, texts: list[str | None]) -> Message:
    role = m.string("role")
    if role not in ROLES:
        raise m.fail("role", f"unknown role {role!r}")
    out: Message = {"role": ROLES[role]}
    content = text_of(m.raw("content"), m.at("content"))
    if content is not None or role != "assistant":
        out["content"] = content if content is not None else ""
    name = m.string("name")
    if name is not None:
        out["name"] = name
    if role == "assistant":
        reasoning = m.string("reasoning_content")
        if reasoning is None:
            reasoning = m.string("reasoning")
        if reasoning is not None:
            out["reasoning_content"] = reasoning
        calls = tool_calls(m, texts)
        if calls is not None:
            out["tool_calls"] = calls
    elif m.has("tool_calls"):
        raise m.fail("tool_calls", f"a {role} message cannot have tool calls")
    if role == "tool":
        call_id = m.string("tool_call_id")
        if call_id is not None:
            out["tool_call_id"] = call_id
    return out


def read(body: Obj) -> Conversation:
    conv = Conversation("openai_chat")
    for key, why in REFUSED.items():
        body.refuse(key, why)
    modalities = body.array("modalities") or []
    if any(m != "text" for m in modalities):
        raise body.fail("modalities", f"only text output is supported, asked {modalities}")
    conv.messages = [message_of(m, conv.argument_texts) for m in body.objects("messages")]
    if not conv.messages:
        raise body.fail("messages", "a chat request needs at least one message")
    conv.tools = normalise_tools(body, "tools")
    conv.tools_given = body.raw("tools") if conv.tools else None
    named = None
    choice = body.raw("tool_choice")
    if isinstance(choice, dict):
        function = Obj(choice, body.at("tool_choice")).obj("function")
        named = function.string("name") if function is not None else None
        if not named:
            raise BadRequest(body.at("tool_choice"), "a named tool_choice needs function.name")
    elif choice is not None and not isinstance(choice, str):
        raise body.fail("tool_choice", "expected a string or an object")
    conv.tool_choice = tool_choice(choice, body.at("tool_choice"), conv.tools, named)
    conv.parallel_tool_calls = body.boolean("parallel_tool_calls")
    template_switches(body, conv)
    effort = body.string("reasoning_effort")
    if effort is not None:
        conv.template_kwargs.setdefault("reasoning_effort", effort)
    conv.include_reasoning = body.boolean("include_reasoning")
    conv.add_generation_prompt = body.boolean("add_generation_prompt", True) is not False
    common_sampling(body, conv)
    s = conv.sampling
    max_tokens = body.integer("max_completion_tokens", minimum=1, maximum=2**32 - 1)
    s.max_tokens = max_tokens if max_tokens is not None else body.integer("max_tokens", 1, 2**32 - 1)
    s.stop = stops(body, "stop")
    s.n = body.integer("n", minimum=1, maximum=MAX_N) or 1
    s.logprobs = body.boolean("logprobs", False) or False
    s.top_logprobs = body.integer("top_logprobs", minimum=0, maximum=20) or 0
    if s.top_logprobs and not s.logprobs:
        raise body.fail("top_logprobs", "needs logprobs: true")
    options = body.obj("stream_options")
    conv.include_usage = bool(options and options.boolean("include_usage"))
    conv.response_schema = response_schema(body.obj("response_format"), ("json_schema", "schema"))
    return conv
