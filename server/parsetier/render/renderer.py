"""A request in, the prompt's ids out: the dialect's reader, the model's template, the tokenizer.

``Renderer.render`` is a plain function of (model, dialect, body) — sans-IO: the service calls it
in a worker thread and turns its answer into the response message. The chat template is the
model's own (``templates``) unless the request brings one and the operator trusts request
templates; either way it runs in transformers' sandbox under ``TemplateLimits``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from parsetier.models import Model
from parsetier.render import (
    anthropic_messages,
    jinja,
    official,
    openai_chat,
    openai_completions,
    openai_responses,
)
from parsetier.render.conversation import Conversation, text_arguments
from parsetier.render.encode import Boundaries, PrefixCache, boundaries
from parsetier.render.errors import BadRequest, NoTemplate, PromptTooLong, TemplateRaised, UntrustedTemplate
from parsetier.render.fields import Obj, parse_body
from parsetier.render.templates import ChatTemplate, template_for

READERS: dict[str, Callable[[Obj], Conversation]] = {
    "openai_chat": openai_chat.read,
    "openai_completions": openai_completions.read,
    "openai_responses": openai_responses.read,
    "anthropic_messages": anthropic_messages.read,
}
"""Each dialect's request reader."""


@dataclass(frozen=True)
class RenderOptions:
    """The operator's bounds and trust."""

    max_request_bytes: int = 16 * 1024 * 1024
    max_prompt_tokens: int = 1_048_576
    trust_request_templates: bool = False
    template: jinja.TemplateLimits = field(default_factory=jinja.TemplateLimits)


@dataclass
class Rendered:
    """What one request rendered to."""

    conversation: Conversation
    prompt_ids: list[int]
    text: str | None
    """The rendered prompt text (None for a completions prompt given as ids)."""


class Renderer:
    """Renders requests for a server's models; holds the prefix cache all renders share."""

    def __init__(self, options: RenderOptions | None = None, cache: PrefixCache | None = None) -> None:
        self.options = options or RenderOptions()
        self.cache = cache if cache is not None else PrefixCache()
        self._bounds: dict[int, Boundaries] = {}
        self._lock = threading.Lock()

    def _boundaries(self, model: Model) -> Boundaries:
        key = id(model.tokenizer)
        found = self._bounds.get(key)
        if found is None:
            found = boundaries(model.tokenizer)
            with self._lock:
                self._bounds[key] = found
        return found

    def read(self, dialect: str, body: bytes) -> Conversation:
        """The request body as a conversation (INVALID_ARGUMENT naming the path when it is not one)."""
        reader = READERS.get(dialect)
        if reader is None:
            raise BadRequest("dialect", f"unknown dialect {dialect!r}")
        if len(body) > self.options.max_request_bytes:
            raise BadRequest(
                "", f"the request body has {len(body)} bytes; the limit is {self.options.max_request_bytes}"
            )
        return reader(parse_body(body))

    def template(self, model: Model, conv: Conversation, supplied: str | None) -> str:
        """The template to render with: the request's (when trusted) or the model's."""
        supplied = supplied or conv.chat_template
        if supplied:
            if not self.options.trust_request_templates:
                raise UntrustedTemplate(
                    "this server renders only its models' own chat templates "
                    "(request templates need the operator's --trust-request-templates)"
                )
            return supplied
        chat: ChatTemplate = template_for(model.spec.name, model.spec.tokenizer)
        return chat.pick(conv.tools is not None)

    def _text(self, template: str, conv: Conversation, special: dict[str, str]) -> str:
        """The conversation through the template. Templates read a tool call's arguments as a
        mapping, except those that join them into text (DeepSeek V3 / R1 / V3.1: ``'...' +
        tool['function']['arguments']``), which fail on a mapping: those get the arguments as
        JSON text (the text the client sent, else the mapping's ``json.dumps``)."""

        def run(messages: list) -> str:
            return jinja.render(
                template,
                messages,
                tools=conv.tools,
                add_generation_prompt=conv.add_generation_prompt,
                special_tokens=special,
                kwargs=conv.template_kwargs,
                limits=self.options.template,
            )

        try:
            return run(conv.messages)
        except TemplateRaised as first:
            if first.refused or not any(m.get("tool_calls") for m in conv.messages):
                raise
            try:
                return run(text_arguments(conv.messages, conv.argument_texts))
            except TemplateRaised:
                raise first from None

    def render(
        self, model: Model, dialect: str, body: bytes, *, chat_template: str | None = None, salt: str = ""
    ) -> Rendered:
        """The request's prompt for ``model``; ``salt`` keys the prefix cache (the model's name)."""
        conv = self.read(dialect, body)
        if conv.prompt_ids is not None or conv.prompt_text is not None:
            text, ids = _completion_prompt(model, conv)
        else:
            text, ids = self._chat_prompt(
                model, conv, chat_template or conv.chat_template, salt or model.name
            )
        limit = self.options.max_prompt_tokens
        if len(ids) > limit:
            raise PromptTooLong(f"the prompt has {len(ids)} tokens; this server's limit is {limit}")
        return Rendered(conv, ids, text)

    def _chat_prompt(
        self, model: Model, conv: Conversation, supplied: str | None, salt: str
    ) -> tuple[str, list[int]]:
        """A chat request's prompt: the model's official encoder when it has one (and the request
        brings no template), else a chat template; text through the prefix cache."""
        encoder = None if supplied else official.encoder_for(model.spec.name)
        if encoder is not None:
            thinking = conv.thinking if conv.thinking is not None else bool(model.spec.thinking)
            encoded = encoder(conv, thinking)
            if not isinstance(encoded, str):  # the encoder tokenized itself
                return model.tokenizer.decode(encoded, skip_special_tokens=False), encoded
            text = encoded
        else:
            text = self._text(self.template(model, conv, supplied), conv, _special_tokens(model))
        return text, self.cache.encode(model.tokenizer, self._boundaries(model), salt, text)


def _completion_prompt(model: Model, conv: Conversation) -> tuple[str | None, list[int]]:
    """A completions prompt: ids as given (checked against the vocabulary), or text encoded with
    the tokenizer's own special tokens (its BOS)."""
    if conv.prompt_ids is not None:
        vocab = model.tokenizer.get_vocab_size(with_added_tokens=True)
        for i, token in enumerate(conv.prompt_ids):
            if token >= vocab:
                raise BadRequest(f"prompt[{i}]", f"token id {token} is outside the vocabulary ({vocab})")
        return None, list(conv.prompt_ids)
    assert conv.prompt_text is not None
    return conv.prompt_text, model.tokenizer.encode(conv.prompt_text, add_special_tokens=True).ids


def _special_tokens(model: Model) -> dict[str, str]:
    """The named special tokens the template sees (none when the model has no template folder:
    a trusted request template on such a model)."""
    try:
        return template_for(model.spec.name, model.spec.tokenizer).special_tokens
    except NoTemplate:
        return {}
