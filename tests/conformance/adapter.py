"""The canitoolcall adapter for parsetier: fixtures replayed through a LIVE gRPC server.

The sans-IO driver in ``canitoolcall_support`` calls the parse core directly; this adapter goes
through everything a serving stack goes through instead — the Python client, protobuf, the
servicer, the session protocol — so the published numbers are the service's, not the library's.

What is sent is what a serving stack would send for the fixture's request:

* the model preset that serves the fixture's reference model (``canitoolcall_support.case_for``);
* the fixture's ``tools`` array verbatim as ``tools_json`` (an OpenAI request forwarded as is);
* ``thinking`` from the fixture, and the prompt tail's token ids from its ``generation_prompt``
  (tokenized by the serving stack's tokenizer, i.e. the preset's);
* finish reason ``length`` (no stop token) for fixtures tagged ``truncated``, else ``stop``.

The non-streaming parse is one unary ``ParseOnce``. A streaming parse is one bidi ``Parse`` stream
with one client message per chunk group (each group one ``Step``), then ``Finish``; the server's
deltas are accumulated exactly as an OpenAI client would (``StreamAccumulator``).

The suite's ``Adapter`` API is synchronous (one parse per call) but a full run wants hundreds of
sessions in flight, so every call runs on one private event loop that owns one channel
(``Connection``); blocking callers wait on it from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import os
import threading
from collections.abc import Awaitable, Collection, Sequence
from typing import Any, ClassVar, TypeVar

import grpc
from canitoolcall.adapters.base import Adapter, AdapterUnavailable, ReplayInput, Support, ToolSpec
from canitoolcall.checks import compare, describe_difference
from canitoolcall.chunking import TokensPerStep
from canitoolcall.fixtures import Fixture
from canitoolcall.results import ParsedToolCall, ParseResult, Status, StreamAccumulator

import canitoolcall_support as support
import parsetier
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import AsyncClient, finish_message, open_message
from parsetier_client.requests import session_messages

T = TypeVar("T")

SERVER_ENV = "PARSETIER_SERVER"
"""``HOST:PORT`` of the server, for when the suite's own tooling instantiates the adapter bare."""
COMPLETE_ENV = "PARSETIER_COMPLETE_TOOL_CALLS"
"""``1`` to replay in ``complete_tool_calls`` mode when instantiated bare."""

HARNESS_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
"""Statuses that say the *run* is broken (server gone, overloaded, wrong model list), not the parse.

Everything else (INTERNAL, INVALID_ARGUMENT, ...) is the service's answer to this fixture and
becomes ``ParseResult.exception``, which the checks judge like any engine exception (adapter
contract rule 4)."""


class HarnessError(RuntimeError):
    """The replay could not be carried out (not a parse outcome); the run records ``error``."""


class Connection:
    """One channel to a parsetier server, driven by a private event loop on its own thread.

    Why a thread: the suite's adapter API and pytest are synchronous, while one asyncio channel
    can carry every concurrent session of a run. ``run`` blocks the caller, ``submit`` does not;
    ``limit`` caps the RPCs in flight so a large run does not open thousands of streams at once.
    """

    def __init__(self, target: str, *, timeout: float = 120.0, limit: int = 64) -> None:
        self.target = target
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="conformance-client", daemon=True)
        self._thread.start()
        self.client: AsyncClient = self.run(self._connect())
        self._gate: asyncio.Semaphore = self.run(self._semaphore(limit))
        self._models: dict[str, pb.ModelInfo] | None = None

    async def _connect(self) -> AsyncClient:
        # grpc.aio channels belong to the loop they are created on.
        return AsyncClient(self.target, timeout=self.timeout)

    @staticmethod
    async def _semaphore(limit: int) -> asyncio.Semaphore:
        return asyncio.Semaphore(limit)

    def run(self, coro: Awaitable[T]) -> T:
        """Run a coroutine on the connection's loop and wait for its result."""
        return self.submit(coro).result()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    async def gated(self, coro: Awaitable[T]) -> T:
        """Await ``coro`` holding one of the ``limit`` in-flight slots."""
        async with self._gate:
            return await coro

    def models(self) -> dict[str, pb.ModelInfo]:
        """The server's ``ListModels`` by name (asked once): what it actually serves."""
        if self._models is None:
            try:
                listed = self.run(self.client.list_models())
            except grpc.RpcError as exc:
                raise AdapterUnavailable(f"no parsetier server at {self.target}: {exc}") from exc
            self._models = {m.name: m for m in listed}
        return self._models

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self.run(self.client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def _fixtures_by_id() -> dict[str, Fixture]:
    return {f.id: f for f in support.fixtures()}


def tools_json(tools: Sequence[ToolSpec]) -> str | None:
    """The request's ``tools`` array as JSON text, or None when the request offered no tools."""
    return json.dumps(list(tools), ensure_ascii=False) if tools else None


def message_result(message: pb.AssistantMessage) -> ParseResult:
    """A final (non-streaming) message as the suite's ``ParseResult``."""
    return ParseResult(
        content=message.content or None,
        reasoning_content=message.reasoning or None,
        tool_calls=tuple(ParsedToolCall(c.name, c.arguments) for c in message.tool_calls),
    )


def _rpc_outcome(exc: grpc.RpcError) -> ParseResult:
    """An error status as a parse outcome, or a ``HarnessError`` when it is the run's problem."""
    code = exc.code() if callable(getattr(exc, "code", None)) else grpc.StatusCode.UNKNOWN
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    if code in HARNESS_CODES:
        raise HarnessError(f"{code.name}: {details}") from exc
    return ParseResult(exception=f"{code.name}: {details}")


class ParsetierAdapter(Adapter):
    """canitoolcall engine ``parsetier``: every parse is an RPC to a running server.

    ``complete_tool_calls`` selects the mode replayed: False (default) streams argument
    fragments as generated; True delivers each call whole once it closed and validated.
    """

    name: ClassVar[str] = "parsetier"
    pinned_version: ClassVar[str] = parsetier.__version__
    tokens_per_step: ClassVar[TokensPerStep] = "many"
    """A serving stack may hand several tokens to one step (speculative decoding, coalescing)."""

    def __init__(
        self,
        target: str | None = None,
        *,
        complete_tool_calls: bool | None = None,
        connection: Connection | None = None,
    ) -> None:
        if connection is None:
            target = target or os.environ.get(SERVER_ENV)
            if not target:
                raise AdapterUnavailable(f"no server: pass target= or set {SERVER_ENV}=HOST:PORT")
            connection = Connection(target)
            self._owns_connection = True
        else:
            self._owns_connection = False
        self.connection = connection
        if complete_tool_calls is None:
            complete_tool_calls = os.environ.get(COMPLETE_ENV, "") not in ("", "0", "false")
        self.complete_tool_calls = complete_tool_calls
        self._cases: dict[str, support.Case | None] = {}
        self._lock = threading.Lock()
        self.service_problems: dict[str, list[str]] = {}
        """Per fixture id: places where the service contradicted itself (a stream's ``Final``
        message differs from its joined deltas, sequence gaps). The suite does not check these;
        the conformance test does."""

    @property
    def mode(self) -> str:
        return "complete" if self.complete_tool_calls else "default"

    # ----------------------------------------------------------------- adapter contract
    def version(self) -> str:
        """The checkout's version; asking the server first makes an absent one ``unavailable``."""
        self.connection.models()
        return parsetier.__version__

    def engine_details(self) -> dict[str, Any]:
        return {"server": self.connection.target, "mode": self.mode}

    def supports(self, family: str, model: str) -> Support:
        preset = support.preset_for_model(model)
        if preset is None:
            return Support(False, f"no parsetier preset serves {model}")
        info = self.connection.models().get(preset)
        if info is None:
            return Support(False, f"the server does not serve preset {preset!r}")
        if not info.tokenizer_available:
            return Support(False, f"the server lacks the tokenizer of preset {preset!r}")
        return Support(True)

    def case(self, fixture: Fixture) -> support.Case:
        """The fixture as a request in this adapter's mode (built once, thread-safe)."""
        with self._lock:
            if fixture.id not in self._cases:
                self._cases[fixture.id] = support.case_for(fixture, self.complete_tool_calls)
            case = self._cases[fixture.id]
        if case is None:
            raise HarnessError(f"{fixture.id}: no preset serves {fixture.models[0]}")
        return case

    def _case(self, raw: ReplayInput) -> support.Case:
        fixture = _fixtures_by_id().get(raw.fixture_id)
        if fixture is None:
            raise HarnessError(f"{raw.fixture_id} is not a fixture of the installed canitoolcall")
        return self.case(fixture)

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        case = self._case(raw)
        return {
            "server": self.connection.target,
            "model": case.preset,
            "complete_tool_calls": self.complete_tool_calls,
            "thinking": case.options.thinking,
            "prompt_token_ids": len(case.options.prompt_token_ids),
            "finish_reason": case.finish_reason,
            "reencoded_from_text": case.reencoded,
        }

    def units(self, raw: ReplayInput) -> list[int]:
        return list(self._case(raw).units)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int] | None:
        return self._case(raw).special_ids

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        return self.connection.run(self.parse_once_async(self._case(raw), tools))

    def parse_stream(
        self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]
    ) -> ParseResult:
        return self.connection.run(self.parse_stream_async(self._case(raw), chunks, tools))

    def close(self) -> None:
        if self._owns_connection:
            self.connection.close()

    # ----------------------------------------------------------------- the RPCs
    def _open_options(self, case: support.Case, tools: Sequence[ToolSpec], label: str) -> dict[str, Any]:
        return {
            "tools": tools_json(tools),
            "thinking": case.options.thinking,
            "prompt_token_ids": case.options.prompt_token_ids,
            "complete_tool_calls": self.complete_tool_calls,
            "request_id": f"{case.fixture.id}#{self.mode}#{label}",
        }

    async def parse_once_async(self, case: support.Case, tools: Sequence[ToolSpec]) -> ParseResult:
        """The non-streaming parse: one ``ParseOnce`` with the whole output."""
        try:
            response = await self.connection.gated(
                self.connection.client.parse_once(
                    case.preset,
                    case.units,
                    case.finish_reason,
                    **self._open_options(case, tools, "nonstream"),
                )
            )
        except grpc.RpcError as exc:
            return _rpc_outcome(exc)
        return message_result(response.final.message)

    async def parse_stream_async(
        self,
        case: support.Case,
        chunks: Sequence[Sequence[int]],
        tools: Sequence[ToolSpec],
        label: str = "stream",
    ) -> ParseResult:
        """One ``Parse`` stream, one client message per chunk group; deltas joined client-style."""
        open_ = open_message(case.preset, **self._open_options(case, tools, label))
        messages = session_messages(open_, [list(c) for c in chunks], finish_message(case.finish_reason), 1)
        acc = StreamAccumulator()
        replies: list[pb.ParseResponse] = []

        async def consume() -> None:
            async for reply in self.connection.client.parse(messages):
                replies.append(reply)
                for delta in reply.deltas:
                    acc.add_reasoning(delta.reasoning)
                    acc.add_content(delta.content)
                    for call in delta.tool_calls:
                        acc.add_tool_call(call.index, call.name, call.arguments)

        try:
            await self.connection.gated(consume())
        except grpc.RpcError as exc:
            return _rpc_outcome(exc)
        result = acc.result()
        self._check_stream(case, label, replies, result)
        return result

    def _check_stream(
        self, case: support.Case, label: str, replies: list[pb.ParseResponse], joined: ParseResult
    ) -> None:
        """Record where the stream contradicts itself: the contract says ``Final.message`` is
        everything the deltas carried, joined, and sequence numbers have no gaps."""
        problems: list[str] = []
        if not replies or not replies[-1].HasField("final"):
            problems.append("the stream ended without a Final message")
        else:
            final = message_result(replies[-1].final.message)
            if compare(final, joined) is not Status.PASS:
                diff = describe_difference(final, joined, want_label="final")
                problems.append(f"Final.message != joined deltas: {diff}")
        sequences = [r.sequence for r in replies]
        if sequences != list(range(1, len(sequences) + 1)):
            problems.append(f"sequence numbers {sequences[:10]}... are not 1, 2, 3, ...")
        if problems:
            with self._lock:
                self.service_problems.setdefault(case.fixture.id, []).extend(
                    f"[{label}] {p}" for p in problems
                )
