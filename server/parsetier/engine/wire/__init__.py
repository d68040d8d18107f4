"""Wire dialects: a session's output rendered as the bytes a public API sends.

A gateway in front of parsetier answers its callers in OpenAI chat completions, OpenAI
completions, Anthropic Messages or OpenAI Responses shapes. Each of those has details that are
easy to get subtly wrong (the role in the first chunk only, a call's id and name on its first
fragment only, the finish reason's name, usage in the last chunk, the SSE framing), so the server
renders them once, here, for the sessions that ask (``Open.wire``).

The renderers sit above the assembler and are sans-IO: they consume the ``Delta`` values a session
produced and its ``Final`` — the session contract, whichever engine produced them — and return
bytes. One renderer lives for one session; it is fed every delta of the session, in order
(``step``), then the last deltas and the final result (``finish``), which returns the bytes of the
last reply and the closing bytes (``Final.wire``). Being fed the same deltas, it renders the same
bytes: a resumed session replays its history through it silently, so resume stays byte-identical.
"""

from __future__ import annotations

from parsetier.core_module import core as _core
from parsetier.engine.wire.anthropic import MessagesRenderer
from parsetier.engine.wire.chat import ChatRenderer
from parsetier.engine.wire.completions import CompletionsRenderer
from parsetier.engine.wire.request import DIALECTS, NATIVE_DIALECTS, Dialect, Renderer, WireRequest
from parsetier.engine.wire.responses import ResponsesRenderer

__all__ = [
    "DIALECTS",
    "NATIVE_DIALECTS",
    "Dialect",
    "Renderer",
    "WireRequest",
    "native_renderer",
    "python_renderer",
    "renderer",
]


def renderer(request: WireRequest, session: object = None) -> Renderer:
    """A new renderer for one session. A streamed session on the native core (``session``, a
    ``NativeSession``) gets the native renderer of its dialect, which renders the per-token
    steps from the core's own output; the others, and the Python reference, the classes below."""
    core = getattr(session, "wire_core", None)
    if core is not None and request.stream and request.dialect in NATIVE_DIALECTS and _native_built():
        return native_renderer(request, core())
    return python_renderer(request)


def _native_built() -> bool:
    """The core is there (without it the renderers are Python's)."""
    return _core is not None


def native_renderer(request: WireRequest, core: object = None) -> Renderer:
    """The native renderer (``_core.WireRenderer``); ``core``: the ``_core.Session`` whose steps
    it reads directly."""
    r = request
    native = _core.WireRenderer(
        r.dialect, r.response_id, r.model, r.created, r.include_usage, r.prompt_tokens, r.choice_index, core
    )
    return native  # type: ignore[no-any-return]


def python_renderer(request: WireRequest) -> Renderer:
    """The Python renderer (the reference)."""
    if request.dialect == "openai_chat":
        return ChatRenderer(request)
    if request.dialect == "openai_completions":
        return CompletionsRenderer(request)
    if request.dialect == "anthropic_messages":
        return MessagesRenderer(request)
    if request.dialect == "openai_responses":
        return ResponsesRenderer(request)
    raise ValueError(f"unknown wire dialect {request.dialect!r}")
