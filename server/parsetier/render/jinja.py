"""A conversation as text, through the model's chat template, exactly as ``transformers`` renders it.

``tokenizer.apply_chat_template`` (transformers 5) drops the messages' keys whose value is None,
passes the tokenizer's named special tokens with the caller's keyword arguments (the caller's win),
and hands everything to ``render_jinja_template``, which compiles the template in its sandboxed
environment (``ImmutableSandboxedEnvironment`` with ``tojson``, ``raise_exception``,
``strftime_now`` and the ``{% generation %}`` tag), rebuilds the inputs from plain JSON types,
aliases the reasoning fields (``reasoning_content`` / ``thinking`` / ``reasoning``) and renders.
``render`` takes those same steps with transformers' own functions, the compiled template
included, and only swaps ``Template.render`` for the ``Template.generate`` it is the join of, so
that the output size and the time spent are checked as the text is produced.

Every failure of the template on a request is the request's (the template is the model's): its
``raise_exception`` is INVALID_ARGUMENT with its message, and so is anything else it raises.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parsetier.render.errors import BadRequest, TemplateLimit, TemplateRaised


@dataclass(frozen=True)
class TemplateLimits:
    """Bounds on one render."""

    max_chars: int = 16 * 1024 * 1024
    """Longest rendered text."""
    max_seconds: float = 10.0
    """Longest a render may take (checked each time the template produces text)."""


def _transformers() -> Any:
    from transformers.utils import chat_template_utils

    return chat_template_utils


def compile_template(template: str) -> Any:
    """The template compiled by transformers (cached there by its text). A template that does
    not compile is INVALID_ARGUMENT (only a request's own template can be one)."""
    try:
        return _transformers()._compile_jinja_template(template)
    except Exception as exc:
        raise BadRequest("chat_template", f"the chat template does not compile: {exc}") from None


def render(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None,
    add_generation_prompt: bool,
    special_tokens: Mapping[str, str],
    kwargs: Mapping[str, Any],
    limits: TemplateLimits,
) -> str:
    """The rendered text (see the module's docstring)."""
    ctu = _transformers()
    compiled = compile_template(template)
    template_kwargs = _plain(ctu, {**special_tokens, **kwargs})
    chat = ctu._normalize_chat_messages(list(messages))
    chat = ctu._alias_reasoning_fields(ctu._plain_template_data(chat))
    tool_schemas = _plain(ctu, list(tools)) if tools is not None else None
    deadline = time.monotonic() + limits.max_seconds
    parts: list[str] = []
    size = 0
    try:
        for part in compiled.generate(
            messages=chat,
            tools=tool_schemas,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **template_kwargs,
        ):
            parts.append(part)
            size += len(part)
            if size > limits.max_chars:
                raise TemplateLimit(f"the chat template's output passed {limits.max_chars} characters")
            if time.monotonic() > deadline:
                raise TemplateLimit(f"the chat template took more than {limits.max_seconds} s")
    except TemplateLimit:
        raise
    except Exception as exc:
        raise _refusal(exc) from None
    return "".join(parts)


def _plain(ctu: Any, value: Any) -> Any:
    return ctu._plain_template_data(value)


def _refusal(exc: BaseException) -> TemplateRaised:
    """A template's failure as the request's error: ``raise_exception``'s message as it is."""
    from jinja2.exceptions import TemplateError

    if type(exc) is TemplateError:  # raise_exception raises exactly this class
        return TemplateRaised(f"the chat template refused the request: {exc}", refused=True)
    return TemplateRaised(
        f"the chat template failed on this request: {type(exc).__name__}: {exc}", refused=False
    )
