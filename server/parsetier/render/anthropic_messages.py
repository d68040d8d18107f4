"""An Anthropic Messages request (``/v1/messages``) as a ``Conversation``.

``system`` becomes the first message; content blocks become OpenAI-shaped messages: text blocks
are joined with newlines, ``thinking`` blocks are the assistant's ``reasoning_content``,
``tool_use`` blocks its ``tool_calls`` (``input`` is the arguments mapping), and each
``tool_result`` block a ``role: tool`` message, in order, before the user's other text. Thinking
``{"type": "enabled"}`` / ``"disabled"`` is the thinking switch (the template's
``enable_thinking`` / ``thinking``); ``tool_choice`` ``any`` is ``required``, ``tool`` a named
function, ``disable_parallel_tool_use`` turns parallel calls off.
"""

from __future__ import annotations

from parsetier.render.common import common_sampling, stops, template_switches, tool_choice
from parsetier.render.content import text_of
from parsetier.render.conversation import Conversation, Message, tool_call
from parsetier.render.errors import BadRequest
from parsetier.render.fields import Obj, kind
from parsetier.render.tools import normalise_tools

TOOL_RESULT_TEXT = frozenset({"text"})


def _blocks(m: Obj) -> list[Obj]:
    content = m.raw("content")
    if isinstance(content, str):
        return [Obj({"type": "text", "text": content}, m.at("content"))]
    if not isinstance(content, list):
        raise m.fail("content", f"expected a string or an array of content blocks, got {kind(content)}")
    return list(m.objects("content"))


def _assistant(m: Obj, argument_texts: list[str | None]) -> Message:
    texts, reasoning, calls = [], [], []
    for block in _blocks(m):
        kind_ = block.string("type")
        if kind_ == "text":
            texts.append(block.string("text", "") or "")
        elif kind_ == "thinking":
            reasoning.append(block.string("thinking", "") or "")
        elif kind_ == "redacted_thinking":
            continue  # encrypted: nothing a template can render
        elif kind_ == "tool_use":
            name = block.string("name")
            if not name:
                raise block.fail("name", "a tool_use block needs a name")
            raw = block.raw("input")
            calls.append(
                tool_call(
                    name, {} if raw is None else raw, block.at("input"), block.string("id"), argument_texts
                )
            )
        else:
            raise block.fail("type", f"content block {kind_!r} cannot be rendered in an assistant turn")
    out: Message = {"role": "assistant", "content": "\n".join(texts)}
    if reasoning:
        out["reasoning_content"] = "\n".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    return out


def _user(m: Obj) -> list[Message]:
    out: list[Message] = []
    texts = []
    for block in _blocks(m):
        kind_ = block.string("type")
        if kind_ == "text":
            texts.append(block.string("text", "") or "")
        elif kind_ == "tool_result":
            content = text_of(block.raw("content"), block.at("content"), TOOL_RESULT_TEXT) or ""
            result: Message = {"role": "tool", "content": content}
            call_id = block.string("tool_use_id")
            if call_id is not None:
                result["tool_call_id"] = call_id
            out.append(result)
        elif kind_ in ("image", "document", "search_result"):
            raise block.fail("type", f"{kind_!r} content: this model takes text only")
        else:
            raise block.fail("type", f"content block {kind_!r} cannot be rendered in a user turn")
    if texts or not out:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


REFUSED = {
    "mcp_servers": "MCP servers are run by the API provider: this model's server connects to none",
    "container": "code execution containers are not available",
}


def read(body: Obj) -> Conversation:
    conv = Conversation("anthropic_messages")
    for key, why in REFUSED.items():
        body.refuse(key, why)
    system = body.raw("system")
    if system is not None:
        conv.messages.append(
            {"role": "system", "content": text_of(system, body.at("system"), TOOL_RESULT_TEXT)}
        )
    for m in body.objects("messages"):
        role = m.string("role")
        if role == "user":
            conv.messages.extend(_user(m))
        elif role == "assistant":
            conv.messages.append(_assistant(m, conv.argument_texts))
        else:
            raise m.fail("role", f"expected 'user' or 'assistant', got {role!r}")
    if not any(msg["role"] != "system" for msg in conv.messages):
        raise body.fail("messages", "a Messages request needs at least one message")
    conv.tools = normalise_tools(body, "tools")
    conv.tools_given = body.raw("tools") if conv.tools else None
    choice = body.obj("tool_choice")
    mode, named = None, None
    if choice is not None:
        kind_ = choice.string("type")
        mode = {"auto": "auto", "any": "required", "none": "none"}.get(kind_ or "")
        if kind_ == "tool":
            named = choice.string("name")
            if not named:
                raise choice.fail("name", "tool_choice of type 'tool' needs the tool's name")
        elif mode is None:
            raise choice.fail("type", f"unknown tool_choice type {kind_!r}")
        if choice.boolean("disable_parallel_tool_use"):
            conv.parallel_tool_calls = False
    conv.tool_choice = tool_choice(mode, body.at("tool_choice"), conv.tools, named)
    template_switches(body, conv)
    thinking = body.obj("thinking")
    if thinking is not None:
        kind_ = thinking.string("type")
        if kind_ in ("enabled", "adaptive"):
            conv.thinking = True
        elif kind_ == "disabled":
            conv.thinking = False
        else:
            raise thinking.fail("type", f"unknown thinking type {kind_!r}")
        conv.template_kwargs.update(enable_thinking=conv.thinking, thinking=conv.thinking)
    common_sampling(body, conv)
    s = conv.sampling
    s.max_tokens = body.integer("max_tokens", minimum=1, maximum=2**32 - 1)
    if s.max_tokens is None:
        raise BadRequest(body.at("max_tokens"), "is required")
    s.stop = stops(body, "stop_sequences")
    return conv
