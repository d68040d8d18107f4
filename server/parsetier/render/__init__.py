"""Render: an API request in, the prompt's token ids and what the output session needs out.

One job per module: ``fields`` (typed reads of a JSON body, errors naming the path), ``content``
(message content as text), ``tools`` (every dialect's tool shape as OpenAI chat's), one reader per
dialect (``openai_chat``, ``openai_completions``, ``openai_responses``, ``anthropic_messages``:
body → ``conversation.Conversation``), ``templates`` (where a model's chat template is), ``jinja``
(conversation → text, as transformers renders it, bounded), ``encode`` (text → ids, with the
prefix cache), ``renderer`` (the whole, sans-IO). The service turns a ``Rendered`` into the
``RenderResponse`` (``parsetier.service.render``). See docs/render.md.
"""

from __future__ import annotations

from parsetier.render.conversation import Conversation, Sampling
from parsetier.render.renderer import READERS, Rendered, Renderer, RenderOptions

__all__ = ["READERS", "Conversation", "RenderOptions", "Rendered", "Renderer", "Sampling"]
