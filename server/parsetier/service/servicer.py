"""The ``parsetier.v1.ParserService`` servicer: reads client messages, hands them to the session's
``SessionProtocol``, loads the model it asks for, writes the replies, and turns every failure into
the status code the contract names. Every rule about a session is the protocol's, not this file's.

Each stream is one asyncio task with its own session object; an exception in one stream ends
that stream only. Parsing runs inline on the event loop: a step costs microseconds to
milliseconds, less than a thread hop. A large message (a Parse message or a ParseOnce request of
``OFF_LOOP_BYTES`` or more) is parsed in a worker thread, so it cannot stall the other streams; the
stream awaits it before reading its next message, so a session's messages still apply in order. A
ParseBatch message is small for its work (a dozen bytes per one-token session): it is applied in
slices, the loop serving the other streams between two.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from parsetier import native
from parsetier.models import FORMAT_FILE, RESPONSE_TEMPLATE, Model, ModelRegistry, TokenizerState
from parsetier.protocol.batch import (
    BatchHooks,
    BatchProtocol,
    NeedModels,
    Slices,
    to_the_end,
)
from parsetier.protocol.framing import in_parts, once_error, once_request, once_response
from parsetier.protocol.session import NeedModel, SessionCounts, SessionProtocol
from parsetier.render import Renderer, RenderOptions
from parsetier.service import metrics
from parsetier.service.admission import Admission
from parsetier.service.budget import STREAM_WINDOW, BufferBudget, Share
from parsetier.service.constraint import build_constraint
from parsetier.service.decoding import Undecodable, read_batch_request
from parsetier.service.errors import (
    ErrorWire,
    abort,
    fault_trailer,
    grpc_code,
    status_for,
    status_message,
    wire_trailer,
)
from parsetier.service.handoff import HandOff, trailer_for
from parsetier.service.idle import IdleWatch, WriteTimeout
from parsetier.service.limits import Limits, SessionGate
from parsetier.service.logs import MAX_MESSAGE_CHARS, SERVER_LOG, SessionRecord, clip, emit_all
from parsetier.service.render import RenderErrorWire, render_prompt, render_request
from parsetier.status import Code, ProtocolError, StatusError, error_of, internal
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

_TOKENIZER_STATUS = {
    TokenizerState.READY: pb.TOKENIZER_STATUS_READY,
    TokenizerState.NOT_INSTALLED: pb.TOKENIZER_STATUS_NOT_INSTALLED,
    TokenizerState.NOT_CONFIGURED: pb.TOKENIZER_STATUS_NOT_CONFIGURED,
}
_FORMAT_SOURCE = {
    FORMAT_FILE: pb.FORMAT_SOURCE_FORMAT_FILE,
    RESPONSE_TEMPLATE: pb.FORMAT_SOURCE_RESPONSE_TEMPLATE,
}

OFF_LOOP_BYTES = 32 * 1024
"""Client messages at least this large (about 8k token ids) are parsed in a worker thread: a
thread hop costs tens of microseconds, such a message milliseconds to seconds. The GIL is
handed back to the event loop every few milliseconds, so the other streams keep moving."""
RENDER_THREADS = 2
"""Worker threads ``Render`` runs on (templates and tokenization hold the GIL for much of their
time, so more threads than cores buy nothing)."""
CONSTRAINT_THREADS = 2
"""Worker threads ``BuildConstraint`` runs on."""
REFUSAL_READ_TIMEOUT = 1.0
"""Seconds a refused stream waits for the client's first message before the status is sent."""

Status = tuple[grpc.StatusCode, str]
T = TypeVar("T")


def _failure(exc: BaseException, record: SessionRecord) -> Status:
    """The status for an exception, logging server bugs. A bug's status says nothing about the
    exception (its text may hold request data or internals); the server log has the traceback."""
    error = error_of(exc)
    if error is None:
        fields = {"request_id": clip(record.request_id)}
        SERVER_LOG.error("internal error in session", exc_info=exc, extra={"fields": fields})
        error = internal()
    return grpc_code(error), error.message


class ClientGone(Exception):
    """A write failed because the client is no longer there (it cancelled or disconnected)."""


NOT_READING = "the client read no reply for"
"""How the status of a stream whose client stopped reading begins (``not_reading``)."""


def not_reading(timeout: float) -> ProtocolError:
    """The status of a stream whose client took no reply for the idle timeout."""
    return ProtocolError(Code.DEADLINE_EXCEEDED, f"{NOT_READING} {timeout:g} s; the stream was dropped")


async def _write(idle: IdleWatch, context: grpc.aio.ServicerContext, reply: bytes, share: Share) -> None:
    """Write one serialized reply, within the idle timeout (``IdleWatch.write``), held in the
    stream's ``share`` of the buffer budget until the client has taken it."""
    share.take(len(reply))
    try:
        await idle.write(context, reply)
    except (asyncio.CancelledError, WriteTimeout):
        raise
    except Exception as exc:
        raise ClientGone() from exc
    finally:
        share.give(len(reply))


def _wire_parts(reply: Message | bytes, limit: int, kind: type[Message] = pb.ParseResponse) -> list[bytes]:
    """A streamed reply's messages (``framing.in_parts``), serialized: their sizes are what the
    buffer budget holds while they wait for the client (the serializer passes bytes through)."""
    data = reply if type(reply) is bytes else reply.SerializeToString()  # type: ignore[union-attr]
    return [part if type(part) is bytes else part.SerializeToString() for part in in_parts(data, limit, kind)]


def _decoded(message: T | Undecodable) -> T:
    """The message, or INVALID_ARGUMENT when its bytes did not decode (see ``decoding``): the one
    path every RPC's messages take. The refusal is a ``StatusError`` like any other, so each RPC
    answers it as it answers a bad field (``Parse``, ``ParseBatch``: ending the stream)."""
    if isinstance(message, Undecodable):
        raise message.refusal()
    return message


async def _off_loop_if_large(size: int, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``, in a worker thread when its message's ``size`` is enough to stall the loop."""
    if size >= OFF_LOOP_BYTES:
        return await asyncio.to_thread(work, *args)
    return work(*args)


async def _in_slices(size: int, work: Slices[T]) -> T:
    """Sliced protocol work (``BatchProtocol.receiving``) for a message of ``size`` bytes: on the
    event loop, which serves the other streams between two slices; in a worker thread, whole, when
    the message is large enough for that (as ``_off_loop_if_large``)."""
    if size >= OFF_LOOP_BYTES:
        return await asyncio.to_thread(to_the_end, work)
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value
        await asyncio.sleep(0)


class ParserServicer(pb_grpc.ParserServiceServicer):
    RAW_REQUESTS = frozenset({"ParseBatch"})
    """Methods whose requests come as bytes: ``ParseBatch``'s are read by the native core
    (``decoding.read_batch_request``)."""

    def __init__(self, registry: ModelRegistry, limits: Limits) -> None:
        self.registry = registry
        self.limits = limits
        self.gate = SessionGate(limits.max_sessions)
        self.admission = Admission(limits.max_loop_lag)
        self.budget = BufferBudget(limits.max_buffered_bytes)
        """Client input and unsent replies held across streams (``service/budget.py``)."""
        self._idle = IdleWatch(limits.idle_timeout)
        self.handoff = HandOff(self.gate, self._idle)
        """The drain's hand-off of resumable streams (``service/handoff.py``)."""
        self.renderer = Renderer(
            RenderOptions(
                max_request_bytes=limits.max_message_bytes,
                max_prompt_tokens=limits.max_prompt_tokens,
                trust_request_templates=limits.trust_request_templates,
            )
        )
        """``Render``'s renderer: its prefix cache is shared by every request of this process."""
        self._render_pool = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="parsetier-render")
        """Renders run here, off the event loop; a bounded pool, so a burst of long renders queues
        instead of taking every thread the loop's other work (model loads) also needs."""
        self._constraint_pool = ThreadPoolExecutor(
            CONSTRAINT_THREADS, thread_name_prefix="parsetier-constraint"
        )
        """``BuildConstraint`` runs here, off the event loop; bounded as the render pool is (a build
        past ``--constraint-timeout`` is answered DEADLINE_EXCEEDED, but its thread runs to its
        end: the per-request tool bounds are what bound that)."""
        self._rendered_once: set[str] = set()
        """Models that have rendered in the pool (their template compiled): a short request of
        theirs renders on the loop."""

    # --- Parse -----------------------------------------------------------------------------

    async def Parse(
        self, request_iterator: AsyncIterator[pb.ParseRequest], context: grpc.aio.ServicerContext
    ) -> None:
        record = SessionRecord(rpc="Parse")
        protocol = SessionProtocol(self.limits, record)
        share = self.budget.share()
        try:
            work = self._run_stream(protocol, context, share)
            status = await self._guarded(record, work, context, share)
            if status is not None and record.client_messages == 0:
                first = await self._await_first_message(context)
                if isinstance(first, pb.ParseRequest) and first.HasField("open"):
                    protocol.keep_wire(first.open)  # refused unread: its error in its dialect too
            await _end(record, status, context, protocol)
        finally:
            share.close()  # only now: until its status is out, gRPC still holds the stream's buffers

    @staticmethod
    async def _await_first_message(context: grpc.aio.ServicerContext) -> object:
        """Let a refused client's first write land before the status goes out; the message read
        (None if none came in time).

        grpc's asyncio client reports INTERNAL instead of the server's status when a write is in
        flight as the status arrives (grpc/grpc#36066); clients write Open at once, so waiting
        for it (briefly) lets them see RESOURCE_EXHAUSTED / UNAVAILABLE / NOT_FOUND as sent."""
        with contextlib.suppress(Exception):
            return await asyncio.wait_for(context.read(), REFUSAL_READ_TIMEOUT)
        return None

    async def _run_stream(
        self, protocol: SessionProtocol, context: grpc.aio.ServicerContext, share: Share
    ) -> Status | None:
        while True:
            try:
                message = await self.handoff.next_message(context, protocol)
            except TimeoutError:
                protocol.idle()
                return None  # the client has its result and merely did not close
            if message is grpc.aio.EOF:
                if not protocol.finished and context.cancelled():
                    raise ClientGone()
                protocol.receive_eof()
                return None
            message = _decoded(message)
            size = message.ByteSize()
            share.take(size)
            reply = await _off_loop_if_large(size, protocol.receive_serialized, message)
            if isinstance(reply, NeedModel):
                model = await self._load(protocol, reply)
                reply = await _off_loop_if_large(size, protocol.supply_model, model)
            if reply.opened:
                # Headers go out only once the Open is accepted: a client may wait for them
                # before sending steps, so errors in the Open never race its next writes.
                await context.send_initial_metadata(())
            if reply.response is not None:
                for part in _wire_parts(reply.response, self.limits.max_reply_bytes):
                    try:
                        await _write(self._idle, context, part, share)
                    except WriteTimeout:
                        error = protocol.fail(not_reading(self.limits.idle_timeout))
                        assert error is not None
                        raise error from None
            share.give(size)

    async def _load(self, protocol: SessionProtocol, need: NeedModel) -> Model:
        """The model; a load failure fails the protocol with the contract's error."""
        try:
            return await self._model(need.name)
        except Exception as exc:
            error = protocol.fail(exc)
            if error is None:
                raise
            raise error from None

    # --- ParseOnce -------------------------------------------------------------------------

    async def ParseOnce(
        self, request: pb.ParseOnceRequest, context: grpc.aio.ServicerContext
    ) -> pb.ParseOnceResponse:
        record = SessionRecord(rpc="ParseOnce")
        protocol = SessionProtocol(self.limits, record, unary=True)
        result: list[pb.ParseOnceResponse] = []

        async def run() -> None:
            nonlocal request
            request = _decoded(request)
            size = request.ByteSize()
            share.take(size)
            first = protocol.receive(once_request(request))
            assert isinstance(first, NeedModel)
            model = await self._load(protocol, first)
            try:
                reply = await _off_loop_if_large(size, protocol.supply_model, model)
            except StatusError as exc:
                raise once_error(exc) from None
            response = once_response(reply)
            self.limits.check_reply(response.ByteSize())
            result.append(response)

        share = self.budget.share()
        try:
            status = await self._guarded(record, run(), context)
            if (
                status is not None
                and record.client_messages == 0
                and isinstance(request, pb.ParseOnceRequest)
            ):
                protocol.keep_wire(request.open)  # refused before it was read (the server full)
            await _end(record, status, context, protocol)
        finally:
            share.close()
        return result[0] if result else pb.ParseOnceResponse()  # empty only when the client is gone

    # --- ParseBatch ------------------------------------------------------------------------

    async def ParseBatch(
        self, request_iterator: AsyncIterator[pb.ParseBatchRequest], context: grpc.aio.ServicerContext
    ) -> None:
        try:
            self.gate.check_open()
        except StatusError as exc:
            await self._await_first_message(context)
            await abort(context, exc)
        share = self.budget.share()
        try:
            try:
                share.take(STREAM_WINDOW)
            except StatusError as exc:
                await self._await_first_message(context)
                await abort(context, exc)
            error = await self._run_batch(context, share)
            if error is not None:
                await abort(context, error, trailer_for(error.message))
        finally:
            share.close()  # after the status: until then gRPC still holds the stream's buffers

    async def _run_batch(self, context: grpc.aio.ServicerContext, share: Share) -> StatusError | None:
        """Serve a ``ParseBatch`` stream; the error that ends it, if any (its sessions are closed)."""
        hooks = _GatedSessions(self.gate, self.admission, frozenset(self.registry.names()))
        batch = BatchProtocol(self.limits, hooks)
        error: StatusError | None = None
        try:
            await context.send_initial_metadata(())
            while True:
                try:
                    message = await self.handoff.next_batch_message(context, batch)
                except TimeoutError:
                    batch.idle()
                    return None
                if message is grpc.aio.EOF:
                    batch.receive_eof()
                    return None
                size = len(message)  # the request's bytes (``RAW_REQUESTS``)
                share.take(size)
                request = _decoded(read_batch_request(message))
                reply = await _in_slices(size, batch.receiving(request))
                if isinstance(reply, NeedModels):
                    loaded = {name: await self._model_or_error(name) for name in reply.names}
                    self.handoff.check_batch(batch)  # the drain may have begun meanwhile
                    reply = await _in_slices(size, batch.supplying_models(loaded))
                for part in _wire_parts(reply, self.limits.max_reply_bytes, pb.ParseBatchResponse):
                    try:
                        await _write(self._idle, context, part, share)
                    except WriteTimeout:
                        raise not_reading(self.limits.idle_timeout) from None
                share.give(size)
        except StatusError as exc:
            error = exc
        except asyncio.CancelledError:
            batch.close(ProtocolError(Code.CANCELLED, "the client cancelled the stream"))
            raise
        except ClientGone:
            batch.close(ProtocolError(Code.CANCELLED, "the client went away"))
            return None
        except Exception as exc:
            SERVER_LOG.error("internal error in ParseBatch stream", exc_info=exc)
            error = internal()
        finally:
            if error is not None:
                batch.close(ProtocolError(error.code, f"the stream ended: {error.message}"))
        return error

    async def _model_or_error(self, name: str) -> Model | BaseException:
        try:
            return await self._model(name)
        except Exception as exc:
            return exc

    # --- ListModels ------------------------------------------------------------------------

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        try:
            _decoded(request)
        except StatusError as exc:
            await abort(context, exc)
        return pb.ListModelsResponse(
            models=[
                pb.ModelInfo(
                    name=info.name,
                    format=info.format,
                    tokenizer=info.tokenizer,
                    tokenizer_available=info.tokenizer_available,
                    tokenizer_status=_TOKENIZER_STATUS[info.tokenizer_state],
                    tokenizer_hint=info.tokenizer_hint,
                    description=info.description,
                    capabilities=pb.Capabilities(reasoning=info.reasoning, tool_calls=info.tool_calls),
                    format_source=_FORMAT_SOURCE[info.format_source],
                )
                for info in self.registry.describe()
            ]
        )

    # --- BuildConstraint -------------------------------------------------------------------

    async def BuildConstraint(
        self, request: pb.BuildConstraintRequest, context: grpc.aio.ServicerContext
    ) -> pb.BuildConstraintResponse:
        record = SessionRecord(rpc="BuildConstraint")
        result: list[pb.BuildConstraintResponse] = []
        share = self.budget.share()

        async def run() -> None:
            nonlocal request
            request = _decoded(request)
            share.take(request.ByteSize())  # held while it waits for a thread and is built
            record.model, record.request_id = request.open.model, request.open.request_id
            model = await self._model(request.open.model)
            loop = asyncio.get_running_loop()
            work = loop.run_in_executor(self._constraint_pool, self._constraint, model, request.open)
            try:
                result.append(await asyncio.wait_for(work, self.limits.constraint_timeout))
            except TimeoutError:
                raise ProtocolError(
                    Code.DEADLINE_EXCEEDED,
                    f"the constraint took more than {self.limits.constraint_timeout:g} s to build "
                    "(--constraint-timeout); fewer or simpler tools build faster",
                ) from None

        try:
            status = await self._guarded(record, run(), context)
            await _end(record, status, context)
        finally:
            share.close()
        return result[0] if result else pb.BuildConstraintResponse()  # empty only when the client is gone

    def _constraint(self, model: Model, open_: pb.Open) -> pb.BuildConstraintResponse:
        """A worker thread's job: the request's tool bounds, then the constraint. Deriving it is
        Python, compiling it llguidance, which releases the GIL; in a thread the event loop gets
        the GIL back every few milliseconds (``bench/constraint_stall.py``: a probe stream's p99
        went from the whole build, seconds, to milliseconds)."""
        self.limits.check_tools(open_)
        return build_constraint(model, open_)

    # --- Render ----------------------------------------------------------------------------

    async def Render(self, request: pb.RenderRequest, context: grpc.aio.ServicerContext) -> pb.RenderResponse:
        record = SessionRecord(rpc="Render")
        result: list[pb.RenderResponse] = []

        async def run() -> None:
            nonlocal request
            request = _decoded(request)
            record.model, record.request_id = request.model, request.request_id
            model = await self._model(request.model)
            loop = asyncio.get_running_loop()
            if (
                len(request.request_json) < OFF_LOOP_BYTES
                and not self.limits.trust_request_templates
                and model.name in self._rendered_once
            ):
                # a short request rendered by a model's own template takes about a millisecond,
                # less than the hop; a model's first render (transformers' import, the template's
                # compile), a long request (a long conversation), every render of a server that
                # runs request templates (code of unknown cost) and every constraint (llguidance's
                # compile) go to the pool
                response, constrain = render_prompt(self.renderer, model, request)
                if constrain is not None:
                    await loop.run_in_executor(self._render_pool, constrain)
            else:
                response = await loop.run_in_executor(
                    self._render_pool, render_request, self.renderer, model, request
                )
                self._rendered_once.add(model.name)
            self.limits.check_reply(response.ByteSize())
            result.append(response)

        status = await self._guarded(record, run(), context)
        dialect = request.dialect if isinstance(request, pb.RenderRequest) else 0  # undecodable: none
        await _end(record, status, context, RenderErrorWire(dialect))
        return result[0] if result else pb.RenderResponse()  # empty only when the client is gone

    # --- shared ----------------------------------------------------------------------------

    async def _model(self, name: str) -> Model:
        """The model: one already loaded, its native parts built, at once; else loaded and
        prepared in a worker thread, which keeps the event loop free meanwhile (a tokenizer and
        a vocabulary's tables take a while the first time). The thread hop costs ~45 us of CPU
        and a millisecond of wall time, so a ready model skips it."""
        model = self.registry.loaded(name)
        if model is not None and native.prepared(model):
            return model
        return await asyncio.to_thread(self._prepared_model, name)

    def _prepared_model(self, name: str) -> Model:
        """The model loaded and its native parts built (a worker thread's job: both take long
        enough to stall every other session if the event loop did them)."""
        return native.prepare(self.registry.get(name))

    async def _guarded(
        self, record: SessionRecord, work, context: grpc.aio.ServicerContext, window: Share | None = None
    ) -> Status | None:
        """Run one session's work inside the session gate; return its error status (``_end``
        sends it and logs the session). ``window``: a stream's share of the buffer budget, which
        takes the stream's window first (the caller closes it).

        Every exception stays inside this session: callers only ever abort their own RPC. A
        client that went away is recorded as CANCELLED, whatever the work was doing then."""
        try:
            self.gate.check_open()
            self.admission.check(record.rpc)
            if window is not None:
                window.take(STREAM_WINDOW)
            self.gate.enter()
        except StatusError as exc:
            work.close()
            return status_for(exc)
        try:
            return await work
        except asyncio.CancelledError:
            record.outcome = "CANCELLED"
            record.emit()
            raise
        except Exception as exc:
            if isinstance(exc, ClientGone) or context.cancelled():
                record.outcome = "CANCELLED"
                return None
            return _failure(exc, record)
        finally:
            self.gate.leave()


async def _end(
    record: SessionRecord,
    status: Status | None,
    context: grpc.aio.ServicerContext,
    protocol: ErrorWire | None = None,
) -> None:
    """Send the session's error status, if any, and log its end. With ``protocol`` (a session
    that asked for wire bytes, or a ``Render``), the status's trailer carries them in its dialect
    (``wire_trailer``).

    grpc reports a client that cancelled while the server waited for its next message as an
    ordinary end of stream; only sending the status then shows that nobody is listening (the
    send fails). Such a session is logged as CANCELLED, not as the status it could not get.
    A stream ended because its client stopped reading is logged before its status is sent:
    the status waits behind the replies the client has not read, maybe for good."""
    logged = False
    try:
        if status is not None:
            record.outcome, record.error = status[0].name, status[1]
            if status[1].startswith(NOT_READING):
                record.emit()
                logged = True
            message = status_message(clip(status[1], MAX_MESSAGE_CHARS))
            trailer = (
                trailer_for(status[1])
                + fault_trailer(status[0])
                + wire_trailer(protocol, status[0].name, message)
            )
            await context.abort(status[0], message, trailing_metadata=trailer)
    except grpc.aio.AbortError:
        raise  # the status is on its way: this is how grpc.aio ends a call with a status
    except Exception:
        record.outcome, record.error = "CANCELLED", ""
    finally:
        if not logged:
            record.emit()


class _GatedSessions(BatchHooks):
    """A ParseBatch stream's sessions pass the admission a ``Parse`` stream passes (drain, load,
    ``--max-sessions``, in that order), count in the server's session gate (so drain waits for
    them and ``--max-sessions`` holds across RPCs), and each gets its ``session_end`` log line.
    The gate is left as a session ends (a later open in the same message may take its place);
    the lines and metrics of the sessions one message ended go out together at its end
    (``flush``: one write, each labelled series touched once)."""

    def __init__(self, gate: SessionGate, admission: Admission, models: frozenset[str]) -> None:
        self.gate = gate
        self.admission = admission
        self.models = models
        self._ended: list[SessionRecord] = []

    def new_counts(self) -> SessionCounts:
        return SessionRecord(rpc="ParseBatch")

    def admit(self) -> None:
        self.gate.check_open()
        self.admission.check("ParseBatch")
        self.gate.enter()

    def ended(self, counts: SessionCounts, error: ProtocolError | None, admitted: bool) -> None:
        if admitted:
            self.gate.leave()
        assert isinstance(counts, SessionRecord)
        if error is not None:
            if error.code is Code.INTERNAL:
                SERVER_LOG.error(
                    "internal error in session",
                    exc_info=error.__cause__,
                    extra={"fields": {"request_id": counts.request_id}},
                )
            counts.outcome, counts.error = error.code.name, error.message
        counts.ended_at = time.monotonic()
        self._ended.append(counts)

    def flush(self) -> None:
        if not self._ended:
            return
        ended, self._ended = self._ended, []
        emit_all(ended)
        if metrics.active() is None:  # metrics off: nothing to count (``sessions_ended`` would return)
            return
        models = self.models  # bounded label values: a name the server does not serve is "other"
        counts = []
        for record in ended:
            model = record.model if record.model in models else "other"
            seconds = record.ended_at - record.started
            counts.append((model, record.outcome, record.tokens, record.deltas, seconds))
        metrics.sessions_ended("ParseBatch", counts)
