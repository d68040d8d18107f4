"""The values every wire dialect shares: the dialect names, the request-level values a dialect's
bodies hold, and what a renderer is (the package face, ``wire/__init__.py``, picks one)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from parsetier.messages import Delta, Final

Dialect = Literal["openai_chat", "openai_completions", "anthropic_messages", "openai_responses"]
DIALECTS: tuple[Dialect, ...] = (
    "openai_chat",
    "openai_completions",
    "anthropic_messages",
    "openai_responses",
)


@dataclass(frozen=True, slots=True)
class WireRequest:
    """The request-level values a dialect's bodies hold (``Open.wire``, plus the choice index)."""

    dialect: Dialect
    response_id: str = ""
    model: str = ""
    created: int = 0
    stream: bool = True
    include_usage: bool = False
    prompt_tokens: int = 0
    choice_index: int = 0


class Renderer(Protocol):
    """One session's renderer (see the package docstring)."""

    def step(self, deltas: Sequence[Delta]) -> bytes:
        """The bytes of one reply's deltas (b"" when there is nothing to forward yet)."""
        ...

    def finish(self, deltas: Sequence[Delta], final: Final, stop_string: str | None) -> tuple[bytes, bytes]:
        """The last reply's bytes (its deltas, up to the finish event) and the closing bytes or the
        whole body (``Final.wire``). ``stop_string`` is the stop string that ended the output."""
        ...


NATIVE_DIALECTS: tuple[Dialect, ...] = ("openai_chat", "anthropic_messages", "openai_responses")
"""The dialects the native core renders, streamed (``_core.WireRenderer``)."""
