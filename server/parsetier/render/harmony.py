"""gpt-oss's prompt through its official renderer, ``openai-harmony`` (an optional dependency:
``pip install openai-harmony``; without it the preset is FAILED_PRECONDITION saying so).

openai-harmony renders a conversation of Harmony messages to token ids itself. Its vocabulary
(o200k_harmony's base ranks) is given locally, from the ranks quicktok ships (the same vocabulary
the gpt-oss preset's tokenizer is converted from), written once to parsetier's cache directory:
the library would otherwise download it (``TIKTOKEN_ENCODINGS_BASE`` is pointed at that directory).

The request becomes Harmony messages as the harmony guide describes a chat request:

- a system message (``SystemContent.new()``: its model identity, knowledge cutoff, required
  channels) with the reasoning effort from ``reasoning_effort`` (``low`` / ``medium`` / ``high``;
  medium when unset); ``model_identity``, ``knowledge_cutoff`` and ``conversation_start_date``
  template keywords replace the defaults (no date unless given: the prompt stays deterministic);
- a developer message with the system / developer messages' text as its instructions and the
  function tools (``functions`` namespace), when there are any;
- user messages as they are; an assistant turn as its reasoning (``analysis`` channel), its calls
  (``commentary`` channel, recipient ``functions.NAME``, ``<|constrain|>json``, the arguments' JSON
  text) with any text before them as a ``commentary`` preamble, or its text (``final``);
- a tool result as a ``functions.NAME`` tool message to the assistant on ``commentary``, NAME
  found from the call its ``tool_call_id`` answers (INVALID_ARGUMENT when none does).

The library then drops earlier turns' analysis as the format asks and ends with
``<|start|>assistant``.
"""

from __future__ import annotations

import base64
import functools
import os
from typing import Any

from parsetier.render.conversation import Conversation, text_arguments
from parsetier.render.errors import BadRequest, NoTemplate
from parsetier.tokenizers import cache_dir, packaged
from parsetier.tokenizers.convert import read_quicktok_vocab

EFFORTS = ("low", "medium", "high")


@functools.cache
def encoding() -> Any:
    """openai-harmony's gpt-oss encoding, its vocabulary given from quicktok's ranks."""
    try:
        import openai_harmony as oh
    except ImportError:
        raise NoTemplate("gpt-oss renders with openai-harmony: pip install openai-harmony") from None
    vocab = packaged.data_file("gpt-oss")
    if vocab is None:
        raise NoTemplate(f"gpt-oss's vocabulary needs {packaged.SOURCES['gpt-oss'].pip_install}")
    directory = cache_dir() / "harmony"
    target = directory / "o200k_base.tiktoken"
    if not target.is_file():
        ranks = read_quicktok_vocab(vocab.with_name("o200k.vocab"))
        lines = (
            f"{base64.b64encode(t).decode()} {r}" for t, r in sorted(ranks.items(), key=lambda kv: kv[1])
        )
        directory.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.part")
        partial.write_text("\n".join(lines) + "\n", encoding="utf-8")
        partial.replace(target)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(directory)
    return oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)


def render_ids(conv: Conversation) -> list[int]:
    import openai_harmony as oh

    enc = encoding()
    kwargs = conv.template_kwargs
    effort = kwargs.get("reasoning_effort")
    system = oh.SystemContent.new().with_reasoning_effort(
        oh.ReasoningEffort(effort.capitalize()) if effort in EFFORTS else oh.ReasoningEffort.MEDIUM
    )
    if isinstance(kwargs.get("model_identity"), str):
        system = system.with_model_identity(kwargs["model_identity"])
    if isinstance(kwargs.get("knowledge_cutoff"), str):
        system = system.with_knowledge_cutoff(kwargs["knowledge_cutoff"])
    if isinstance(kwargs.get("conversation_start_date"), str):
        system = system.with_conversation_start_date(kwargs["conversation_start_date"])
    messages = [oh.Message.from_role_and_content(oh.Role.SYSTEM, system)]
    instructions = "\n\n".join(m.get("content") or "" for m in conv.messages if m["role"] == "system")
    if instructions or conv.tools:
        developer = oh.DeveloperContent.new()
        if instructions:
            developer = developer.with_instructions(instructions)
        if conv.tools:
            functions = [t["function"] for t in conv.tools]
            described = [oh.ToolDescription.new(f["name"], f.get("description") or "", f.get("parameters"))
                         for f in functions]  # fmt: skip
            developer = developer.with_function_tools(described)
        messages.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, developer))
    names: dict[str, str] = {}
    for i, m in enumerate(text_arguments(conv.messages, conv.argument_texts)):
        role, content = m["role"], m.get("content") or ""
        if role == "user":
            messages.append(oh.Message.from_role_and_content(oh.Role.USER, content))
        elif role == "assistant":
            messages.extend(_assistant(oh, m, content, names))
        elif role == "tool":
            name = names.get(m.get("tool_call_id", ""))
            if name is None:
                raise BadRequest(f"messages[{i}].tool_call_id", "answers no earlier tool call")
            author = oh.Author.new(oh.Role.TOOL, f"functions.{name}")
            result = oh.Message.from_author_and_content(author, content)
            messages.append(result.with_channel("commentary").with_recipient("assistant"))
    conversation = oh.Conversation.from_messages(messages)
    return list(enc.render_conversation_for_completion(conversation, oh.Role.ASSISTANT))


def _assistant(oh: Any, m: dict[str, Any], content: str, names: dict[str, str]) -> list[Any]:
    out = []
    if m.get("reasoning_content"):
        out.append(
            oh.Message.from_role_and_content(oh.Role.ASSISTANT, m["reasoning_content"]).with_channel(
                "analysis"
            )
        )
    calls = m.get("tool_calls") or []
    if content:
        channel = "commentary" if calls else "final"
        out.append(oh.Message.from_role_and_content(oh.Role.ASSISTANT, content).with_channel(channel))
    for call in calls:
        function = call["function"]
        if call.get("id"):
            names[call["id"]] = function["name"]
        message = oh.Message.from_role_and_content(oh.Role.ASSISTANT, function["arguments"])
        out.append(
            message.with_channel("commentary")
            .with_recipient(f"functions.{function['name']}")
            .with_content_type("<|constrain|>json")
        )
    return out
