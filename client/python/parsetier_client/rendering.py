"""``render``'s request and typed result: an API request's body in, what generation and the parse
need out (docs/render.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.requests import WIRE_DIALECTS, open_message


@dataclass(frozen=True)
class RenderResult:
    """A rendered request. Pass ``open`` straight to ``Client.open`` (or ``choice(i)`` for the
    i-th of ``n`` choices); give ``prompt_token_ids`` and ``sampling`` to the engine, and
    ``constraint`` (None unless the request forces a tool or a JSON format) to its sampler."""

    prompt_token_ids: list[int]
    open: pb.Open
    sampling: pb.SamplingParams
    constraint: pb.BuildConstraintResponse | None
    prompt_text: str
    """Empty unless asked for (``return_prompt_text=True``)."""

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def n(self) -> int:
        return self.sampling.n or 1

    def choice(self, index: int) -> pb.Open:
        """The ``Open`` of choice ``index`` (0 .. n-1): ``open`` with its ``choice_index`` set."""
        if not 0 <= index < self.n:
            raise IndexError(f"choice {index} of a request with n={self.n}")
        open_ = pb.Open()
        open_.CopyFrom(self.open)
        open_.choice_index = index
        return open_

    @classmethod
    def of(cls, reply: pb.RenderResponse) -> RenderResult:
        return cls(
            prompt_token_ids=list(reply.prompt_token_ids),
            open=reply.open,
            sampling=reply.sampling,
            constraint=reply.constraint if reply.HasField("constraint") else None,
            prompt_text=reply.prompt_text,
        )


def render_request(
    model: str,
    body: Mapping[str, Any] | str | bytes,
    dialect: str | int = "openai_chat",
    *,
    request_id: str = "",
    response_id: str = "",
    created: int = 0,
    chat_template: str = "",
    return_prompt_text: bool = False,
) -> pb.RenderRequest:
    """A ``RenderRequest``: ``body`` is the API request (a dict, or its JSON text or bytes as
    received); ``dialect`` ``openai_chat`` (default), ``openai_completions``,
    ``openai_responses`` or ``anthropic_messages``."""
    if isinstance(body, Mapping):
        data = json.dumps(body, ensure_ascii=False).encode()
    else:
        data = body.encode() if isinstance(body, str) else bytes(body)
    if isinstance(dialect, str):
        if dialect not in WIRE_DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; one of {', '.join(WIRE_DIALECTS)}")
        dialect = WIRE_DIALECTS[dialect]
    return pb.RenderRequest(
        model=model,
        dialect=dialect,
        request_json=data,
        request_id=request_id,
        response_id=response_id,
        created=created,
        chat_template=chat_template,
        return_prompt_text=return_prompt_text,
    )


def opened(model: str | pb.Open, options: Mapping[str, Any]) -> pb.Open:
    """``open``'s Open: a given one as it is (with no options beside it), else built from options."""
    if isinstance(model, pb.Open):
        if options:
            raise TypeError(
                f"open() takes a whole Open or a model and options, not both ({', '.join(options)})"
            )
        return model
    return open_message(model, **options)
