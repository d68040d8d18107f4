"""What every dialect's request becomes before it is rendered: one normalised value.

``Conversation`` is the request as the chat template and the parser need it, whatever API it came
from: OpenAI-chat-shaped messages (assistant turns with ``reasoning_content`` and ``tool_calls``
whose ``arguments`` are mappings; tool results as ``role: tool`` messages), OpenAI-shaped tools,
the tool choice, the template's keyword arguments, and the sampling parameters. A completions
request carries its prompt instead of messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass
class Sampling:
    """The request's sampling parameters (None: not given)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0
    n: int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


@dataclass
class Conversation:
    """One request, normalised."""

    dialect: str
    """``openai_chat``, ``openai_completions``, ``openai_responses`` or ``anthropic_messages``."""
    messages: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    """OpenAI chat's shape: ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
    tools_given: list[Any] | None = None
    """The request's ``tools`` array as it came (``Open.tools_json`` reads every dialect's shape)."""
    tool_choice: str = "auto"
    """``auto``, ``none``, ``required``, or the one function's name."""
    parallel_tool_calls: bool | None = None
    thinking: bool | None = None
    """The request's reasoning switch (None: the model's default)."""
    include_reasoning: bool | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    """The chat template's keyword arguments besides messages and tools (``enable_thinking``...)."""
    add_generation_prompt: bool = True
    sampling: Sampling = field(default_factory=Sampling)
    model: str = ""
    """The body's own ``model`` (what the output bodies show)."""
    stream: bool = False
    include_usage: bool = False
    response_schema: dict[str, Any] | None = None
    """``response_format`` json_schema's schema (``{}`` for json_object): the output is that JSON."""
    prompt_text: str | None = None
    """Completions: the prompt as text (encoded with the tokenizer's special tokens)."""
    prompt_ids: list[int] | None = None
    """Completions: the prompt as token ids, used as given."""
    chat_template: str | None = None
    """A chat template the request body brought (vLLM's ``chat_template`` field)."""
    argument_texts: list[str | None] = field(default_factory=list)
    """Each tool call's arguments as the client sent them (None: sent as an object), in order."""


def tool_call(name: str, arguments: Any, path: str, call_id: str | None, texts: list[str | None]) -> dict:
    """An assistant turn's tool call as templates read it (``arguments`` a mapping); the text the
    client sent for the arguments is kept in ``texts``, in call order (``text_arguments``)."""
    from parsetier.render.fields import arguments_object

    mapping = arguments_object(arguments, path)
    texts.append(arguments if isinstance(arguments, str) else None)
    call = {"type": "function", "function": {"name": name, "arguments": mapping}}
    return {"id": call_id, **call} if call_id is not None else call


def text_arguments(messages: list[Message], texts: list[str | None]) -> list[Message]:
    """The messages with each tool call's arguments as JSON text: the text the client sent, else
    the mapping's ``json.dumps`` (Anthropic's ``input``)."""
    out = []
    order = iter(texts)
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_as_text(call, next(order, None)) for call in calls]}
        out.append(message)
    return out


def _as_text(call: dict[str, Any], text: str | None) -> dict[str, Any]:
    function = call["function"]
    if text is None:
        text = json.dumps(function["arguments"], ensure_ascii=False)
    return {**call, "function": {**function, "arguments": text}}
