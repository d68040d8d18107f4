"""What the blocking and the asyncio clients do alike, written once: their options, the shared
stream of multiplexed sessions, and the unary calls (``parse_once``, ``list_models``, ``render``,
``build_constraint``).

A unary call is its request and what is made of the reply; only the call itself differs. So each
method here builds the request and hands it, with the reply's conversion, to the client's
``_unary``: the blocking client calls the stub and returns the converted reply, the asyncio client
returns an awaitable of it (``await client.render(...)``). The session API is shared the same way
(``session_api``); the client's channel and multiplexer kinds are its ``_channel`` and
``_Multiplexer``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.mux import AsyncMultiplexer, Multiplexer
from parsetier_client.mux_core import MAX_BATCH
from parsetier_client.rendering import RenderResult, render_request
from parsetier_client.requests import open_message, parse_once_request
from parsetier_client.resume import ResumePolicy, policy_of
from parsetier_client.security import Tls, tls_of, token_metadata

Then = Callable[[Any], Any] | None
"""What a unary call's reply is made into (None: the reply itself)."""


class ClientBase:
    """The clients' common part (see the module docstring)."""

    _Multiplexer: type[Multiplexer] | type[AsyncMultiplexer]

    def __init__(
        self,
        target: str,
        *,
        channel: grpc.Channel | grpc.aio.Channel | None = None,
        timeout: float | None = None,
        tls: Tls | bool | None = None,
        token: str | None = None,
        resume: bool | ResumePolicy = True,
        multiplex: bool = False,
        flush_interval: float = 0.0,
        max_batch: int = MAX_BATCH,
    ) -> None:
        """``tls``: ``True`` (system roots) or a ``Tls`` (CA, client certificate for mTLS, server
        name); ``token``: a bearer token sent with every call. ``multiplex``: sessions ride one
        shared ``ParseBatch`` stream (``mux``), their sends coalesced into one message per flush:
        at ``max_batch`` entries, or ``flush_interval`` seconds after the first (0: as soon as the
        sending code yields: the event loop's next turn, or the blocking client's flushing thread
        running)."""
        self.channel = channel or self._channel(target, tls_of(tls))
        self.stub = pb_grpc.ParserServiceStub(self.channel)
        self.timeout = timeout
        self.metadata = token_metadata(token)
        self.resume = policy_of(resume)
        """How streams resume after a break (``ResumePolicy``), or None: resume off."""
        self._mux_options = (flush_interval, max_batch) if multiplex else None
        self._multiplexer: Any = None
        self._making = threading.Lock()

    @staticmethod
    def _channel(target: str, tls: Tls | None) -> Any:
        raise NotImplementedError

    @property
    def multiplexer(self) -> Any:
        """The shared stream of multiplexed sessions (``Multiplexer`` or ``AsyncMultiplexer``, made
        on first use: the asyncio one on the running loop), or None (a ``Parse`` stream per
        session)."""
        if self._mux_options is not None and self._multiplexer is None:
            with self._making:
                if self._multiplexer is None:
                    interval, max_batch = self._mux_options
                    self._multiplexer = self._Multiplexer(
                        self.stub, self.metadata, self.resume, interval, max_batch, self.timeout
                    )
        return self._multiplexer

    def _unary(self, method: Callable[..., Any], request: Any, then: Then = None) -> Any:
        """Call ``method`` with ``request`` (the client's timeout and metadata): the reply, or
        ``then`` of it."""
        raise NotImplementedError

    def parse_once(
        self, model: str, token_ids: Iterable[int] = (), finish_reason: str = "stop", **options: Any
    ) -> Any:
        """The unary call: the whole output in, ``ParseOnceResponse`` (``.final``) out. ``options``
        are ``requests.parse_once_request``'s keywords (``text``, ``text_tokens``, ``matched_stop``,
        ``tools``, ``logprobs``, and ``open_message``'s)."""
        return self._unary(
            self.stub.ParseOnce, parse_once_request(model, token_ids, finish_reason, **options)
        )

    def list_models(self) -> Any:
        """The served models (``ModelInfo``s)."""
        return self._unary(self.stub.ListModels, pb.ListModelsRequest(), _models)

    def render(
        self,
        model: str,
        body: Mapping[str, Any] | str | bytes,
        dialect: str | int = "openai_chat",
        **fields: Any,
    ) -> Any:
        """An API request's body (``dialect``: ``openai_chat``, ``openai_completions``,
        ``openai_responses``, ``anthropic_messages``) rendered for ``model``: the prompt's ids, the
        output session's ``Open`` (pass it to ``open``), sampling and constraint, as a
        ``RenderResult``. ``fields``: ``request_id``, ``response_id``, ``created``,
        ``chat_template``, ``return_prompt_text``."""
        return self._unary(self.stub.Render, render_request(model, body, dialect, **fields), RenderResult.of)

    def build_constraint(self, model: str, **options: Any) -> Any:
        """The decoding constraint for a request with these options (``tools``, ``tool_choice``,
        ``parallel_tool_calls``, ``thinking``, ``prompt_token_ids``...; a tool's
        ``"strict": True`` enforces its schema): a ``BuildConstraintResponse``
        (``.structural_tag_json``, ``.lark_grammar``)."""
        request = pb.BuildConstraintRequest(open=open_message(model, **options))
        return self._unary(self.stub.BuildConstraint, request)


def _models(reply: pb.ListModelsResponse) -> list[pb.ModelInfo]:
    return list(reply.models)
