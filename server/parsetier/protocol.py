"""The protocol of one request session, sans-IO: every rule about what may come when, what is
counted, which limits hold and what the server answers lives in this file.

Theory of operation
-------------------
A ``SessionProtocol`` is fed the client's messages of one session, in order, and answers each
with what to send. It never reads, writes, sleeps or loads anything: like h11's ``Connection`` it
is a state machine the I/O layer drives::

    protocol = SessionProtocol(limits)
    result = protocol.receive(message)             # a ParseRequest
    if isinstance(result, NeedModel):              # the message opens the session
        result = protocol.supply_model(load(result.name))
    send(result.response)                          # a Reply; response None means "send nothing"
    ...
    protocol.receive_eof()                         # the client closed its side
    protocol.idle()                                # the client went silent too long

Every RPC drives the same object and differs only in framing:

- ``Parse``: one stream, one protocol; each ``ParseRequest`` is passed to ``receive``.
- ``ParseOnce``: a one-message session, ``SessionProtocol(limits, unary=True)`` fed
  ``once_request(request)`` (open + one step + finish); ``once_response`` reshapes its reply.
- the multiplexed RPC: a table key → protocol; each item's ``ParseRequest`` goes to its
  session's ``receive``, so a multiplexed session answers byte for byte like a ``Parse`` stream.

States (``State``)::

    AWAIT_OPEN ──open──► LOADING ──supply_model──► STREAMING ──finish──► FINISHED
         │                  │                          │
         └───── any ProtocolError or session error ────┴──────────────► FAILED

Errors are ``ProtocolError`` with a ``Code`` (see ``parsetier.status``); errors from the session
(a bad token id, a call out of order) are translated to it here. After an error the protocol is
``FAILED`` and refuses everything: the caller ends the session with that code.

Counting: ``counts.client_messages`` is every message received (empty keep-alives too);
``sequence`` numbers the replies that carried something, 1, 2, 3...; tokens and text bytes count
towards the per-session limits, the prompt tail on its own (it is not output).

Batching: the token ids of consecutive id steps in one message are concatenated into one
``Session.feed`` call — parsing is split-invariant, so the output is the same as feeding them one
by one, at a fraction of the per-call cost — and everything one message produced goes into one
reply.

Resume (the seam for a resume point in ``Open``)
-----------------------------------------------
A resumed session replays a history the client already has output for, silently, then continues
as if the stream had never broken. It belongs here, in ``_start``, after the ``Session`` exists
and before the opening message's own steps are applied:

1. feed the history's steps through ``_feed`` (same limits and counting: they are this session's
   tokens) and drop the outputs — the client has them;
2. set ``self.sequence`` and ``self.counts.client_messages`` from the resume point, so the next
   reply continues the numbering the client saw;
3. return to ``supply_model``, which applies the opening message's steps/finish as usual.

The servicers need no change: they only see ``NeedModel`` and ``Reply`` as today.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from parsetier import convert
from parsetier import session as core
from parsetier.completion import CompletionSession, open_session
from parsetier.engine.events import Event
from parsetier.messages import Delta
from parsetier.models import Model
from parsetier.resume import Replay
from parsetier.status import Code, ProtocolError, error_of, exhausted, invalid, out_of_order
from parsetier_api.v1 import parsetier_pb2 as pb

Input = pb.ParseRequest | pb.SessionInput
"""A session's client message: a ``Parse`` stream's, or one entry of a ``ParseBatch`` message
(the same fields: ``open``, ``steps``, ``finish``)."""
Output = pb.ParseResponse | pb.SessionOutput
"""A session's reply: a ``ParseResponse``, or one entry of a ``ParseBatchResponse``."""


StreamReply = pb.ParseResponse | pb.ParseBatchResponse
"""A reply of a streaming RPC: one that may be sent in parts."""
PART_OVERHEAD = 32
"""Bytes a reply part's framing adds around its data (tags and two length varints: at most 14)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one client may cost the server. Past a limit the session (or call) ends with
    RESOURCE_EXHAUSTED (idling: DEADLINE_EXCEEDED) and nothing else changes."""

    max_message_bytes: int = 4 * 1024 * 1024
    """Largest client message gRPC accepts (larger ones fail with RESOURCE_EXHAUSTED)."""
    max_steps_per_message: int = 4096
    max_tokens_per_session: int = 1_000_000
    """Output token ids one session may feed (the prompt tail is held to the same number)."""
    max_text_bytes_per_session: int = 16 * 1024 * 1024
    """UTF-8 bytes of already-detokenized text one session may feed."""
    max_sessions: int = 4096
    """Open sessions at once on the server (Parse streams, ParseOnce calls, ParseBatch sessions)."""
    max_sessions_per_stream: int = 2048
    """Open sessions on one ParseBatch stream; an open past it is refused (that session only)."""
    max_items_per_message: int = 2048
    """Session entries and packed items in one ParseBatch message; more end the stream (a framing limit)."""
    idle_timeout: float = 300.0
    """Seconds a stream may stay silent before it is ended with DEADLINE_EXCEEDED."""
    max_reply_bytes: int = 64 * 1024 * 1024
    """Largest message the server sends (grpc's send limit, and what the Python clients accept).
    The session limits keep ordinary replies far below it; a streamed reply that would be larger
    is sent in parts (``in_parts``); a unary one (``ParseOnce``) cannot be, and ends the call with
    RESOURCE_EXHAUSTED instead of a message the client cannot receive."""
    max_loop_lag: float = 0.1
    """Seconds the event loop may run behind before new sessions are refused (0: never)."""
    max_watch_streams: int = 256
    """Health Watch and reflection streams open at once (each kind counted on its own)."""

    def check_steps(self, count: int) -> None:
        if count > self.max_steps_per_message:
            raise exhausted(f"{count} steps in one message; the limit is {self.max_steps_per_message}")

    def check_tokens(self, total: int) -> None:
        if total > self.max_tokens_per_session:
            raise exhausted(f"session exceeds {self.max_tokens_per_session} tokens")

    def check_reply(self, size: int) -> None:
        """A unary reply (one message, no parts) must fit in one message."""
        if size > self.max_reply_bytes:
            raise exhausted(
                f"the reply would be {size} bytes, more than the {self.max_reply_bytes} the server sends "
                "in one message; a Parse stream sends a result this large in parts"
            )

    def in_parts(self, reply: StreamReply) -> list[StreamReply]:
        """The messages that carry one streamed reply: the reply itself when it fits in
        ``max_reply_bytes``, else pieces of its serialized bytes, each a message of the same type
        with only ``part`` set and each within the limit (``ParseResponse.part`` in the proto).
        Nothing is lost, and the cost is one extra copy of only the replies that need it."""
        limit = self.max_reply_bytes
        if reply.ByteSize() <= limit:
            return [reply]
        data = reply.SerializeToString()
        size = max(1, limit - PART_OVERHEAD)
        kind = type(reply)
        return [
            kind(part=pb.ReplyPart(data=data[at : at + size], more=at + size < len(data)))
            for at in range(0, len(data), size)
        ]

    def check_text(self, total_bytes: int) -> None:
        if total_bytes > self.max_text_bytes_per_session:
            raise exhausted(f"session exceeds {self.max_text_bytes_per_session} bytes of text")


@dataclass(slots=True)
class SessionCounts:
    """What a session has received and sent so far (its log line reports these)."""

    model: str = ""
    request_id: str = ""
    choice_index: int = 0
    """Which of the request's choices the session was (``Open.choice_index``)."""
    tokens: int = 0
    """Output token ids received (plus the ``text_tokens`` of text steps)."""
    text_bytes: int = 0
    """Bytes of already-detokenized text received."""
    deltas: int = 0
    events: int = 0
    client_messages: int = 0
    server_messages: int = 0
    finish_reason: str = ""
    replayed: int = 0
    """A resumed session: the client messages it replayed silently (``Open.resume``)."""


class State(enum.Enum):
    AWAIT_OPEN = "await_open"
    LOADING = "loading"
    STREAMING = "streaming"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class NeedModel:
    """The message opens the session: load the model ``name`` and pass it to ``supply_model``."""

    name: str


@dataclass(frozen=True, slots=True)
class Reply:
    """What to send for one client message. ``response`` is None when the message produced
    nothing to send; ``opened`` is True for the message whose Open was just accepted (a stream
    sends its headers then); ``finished`` once the final result is in ``response``."""

    response: pb.ParseResponse | None
    opened: bool = False
    finished: bool = False


_NOTHING = Reply(None)
"""The reply to a message that produced nothing."""


def step_runs(steps: Sequence[pb.Step], per_step: bool = False) -> Iterator[list[int] | pb.Step]:
    """Group steps into feed calls: runs of id steps become one id list; a text-only step, and
    an id step with logprobs (or every id step, ``per_step``: its ids belong on its own delta),
    stays a step of its own. A step with ids ignores its text (see ``Step.text``)."""
    ids: list[int] = []
    for step in steps:
        if step.token_ids and (per_step or step.HasField("logprobs")):
            if ids:
                yield ids
                ids = []
            yield step
        elif step.token_ids:
            ids.extend(step.token_ids)
        elif step.text or step.text_tokens or step.HasField("logprobs"):
            if ids:
                yield ids
                ids = []
            yield step
    if ids:
        yield ids


def _index(steps: Sequence[pb.Step], step: pb.Step) -> int:
    return next(i for i, s in enumerate(steps) if s is step)


def _feed_step(
    session: core.Session | CompletionSession, step: pb.Step, steps: Sequence[pb.Step]
) -> core.StepOutput:
    """One id step fed on its own, with its logprobs; errors in them name the step."""
    if not step.HasField("logprobs"):
        return session.feed(step.token_ids)
    try:
        return session.feed(step.token_ids, convert.step_logprobs_of(step.logprobs))
    except core.InvalidInput as exc:
        raise invalid(f"steps[{_index(steps, step)}].{exc}") from None


FEED_PIECE = 8192
"""Ids per ``Session.feed`` call. Parsing is split-invariant, so a long run fed in pieces gives
the same output; between pieces the thread that parses a large message (see the servicer) lets
the event loop take the GIL back, which one long call into the tokenizer would not."""


def feed_in_pieces(session: core.Session | CompletionSession, ids: Sequence[int]) -> list[core.StepOutput]:
    return [session.feed(ids[at : at + FEED_PIECE]) for at in range(0, len(ids), FEED_PIECE)]


def _joined(outputs: list[core.StepOutput]) -> core.StepOutput:
    """The outputs of consecutive feeds as one (feeds have no final)."""
    return core.StepOutput([d for o in outputs for d in o.deltas], [e for o in outputs for e in o.events])


class SessionProtocol:
    """The rules of one session (see the module docstring). Not thread-safe: one caller at a
    time, though that caller may hand a large message to a worker thread."""

    def __init__(self, limits: Limits, counts: SessionCounts | None = None, *, unary: bool = False) -> None:
        self.limits = limits
        self.counts = counts if counts is not None else SessionCounts()
        """Filled in as the session runs; pass the log record to have it counted directly."""
        self.unary = unary
        """ParseOnce: ``Open.output`` unset means FINAL_ONLY instead of DELTAS."""
        self.state = State.AWAIT_OPEN
        self.sequence = 0
        """Number of the last reply that carried something."""
        self.session: core.Session | CompletionSession | None = None
        self.want_deltas = True
        self.want_events = False
        self._pending: pb.ParseRequest | None = None
        self.resumable = False
        """The client can resume elsewhere: a draining server hands the session off."""
        self.replay: Replay | None = None
        """A resumed session's silent history (``parsetier.resume``), until it is replayed."""

    @property
    def finished(self) -> bool:
        return self.state is State.FINISHED

    # ------------------------------------------------------------------ input
    def receive(self, message: Input, into: Output | None = None) -> NeedModel | Reply:
        """One client message: its reply, or ``NeedModel`` when it opens the session.

        ``into`` is the message the reply is written into (a new ``ParseResponse`` when None);
        when nothing came out it is left untouched and ``Reply.response`` is None."""
        self.counts.client_messages += 1
        if self.state is State.STREAMING and self.replay is None and len(message.steps) == 1:
            fast = self._receive_one_step(message, into)
            if fast is not None:
                return fast
        with self._failing():
            self._check_order(message)
            self.limits.check_steps(len(message.steps))
            if message.HasField("open"):
                self.counts.model = message.open.model
                self.counts.request_id = message.open.request_id
                self._pending = message
                self.state = State.LOADING
                return NeedModel(message.open.model)
            return Reply(self._apply(message, into), finished=self.state is State.FINISHED)

    def _receive_one_step(self, message: Input, into: Output | None) -> Reply | None:
        """The engine's usual message, one step of token ids into an open session, without the
        general path's generality (same rules, same output); None when it is not that message."""
        step = message.steps[0]
        ids = step.token_ids
        if not ids or message.HasField("finish") or message.HasField("open") or step.HasField("logprobs"):
            return None
        self.counts.client_messages -= 1  # feed_ids counts it
        reply = pb.ParseResponse() if into is None else into
        return Reply(reply) if self.feed_ids(ids, reply) else _NOTHING

    def feed_ids(self, ids: Sequence[int], into: Output) -> bool:
        """A message of one token-id step for a STREAMING session (the caller has checked that it
        carries nothing else): the same rules and output as ``receive``, written into ``into``;
        whether anything was written. The hot path of both streaming RPCs."""
        taken = self.take_ids(ids)
        if taken is None:
            return False
        self.write(into, *taken)
        return True

    def take_ids(self, ids: Sequence[int]) -> tuple[Sequence[Delta], Sequence[Event]] | None:
        """``feed_ids`` without the writing: the message is counted and its ids fed, and what the
        reply carries (the deltas and events the session asked for) is returned, its ``sequence``
        taken; None when the message produced nothing to send. The caller writes the reply (with
        ``write``, or packed: ``BatchProtocol``)."""
        counts = self.counts
        counts.client_messages += 1
        try:
            counts.tokens += len(ids)
            if counts.tokens > self.limits.max_tokens_per_session:
                self.limits.check_tokens(counts.tokens)
            if len(ids) <= FEED_PIECE:
                out = self.session.feed(ids)  # type: ignore[union-attr]
            else:  # a large message: in pieces, so its thread hands the GIL back between them
                out = _joined(feed_in_pieces(self.session, ids))  # type: ignore[arg-type]
        except Exception as exc:
            error = self.fail(exc)
            if error is None or error is exc:
                raise
            raise error from None
        deltas = out.deltas if self.want_deltas else ()
        events = out.events if self.want_events else ()
        if not deltas and not events:
            return None
        self.sequence += 1
        counts.deltas += len(deltas)
        counts.events += len(events)
        counts.server_messages += 1
        return deltas, events

    def write(self, into: Output, deltas: Sequence[Delta], events: Sequence[Event]) -> None:
        """Write the reply ``take_ids`` returned into ``into``."""
        into.sequence = self.sequence
        into.client_messages = self.counts.client_messages
        if deltas:
            convert.add_deltas(into.deltas, deltas)
        if events:
            into.events.extend([convert.event_to_pb(e) for e in events])

    def supply_model(self, model: Model, into: Output | None = None) -> Reply:
        """The model the opening message named; starts the session and applies that message."""
        if self.state is not State.LOADING or self._pending is None:
            raise RuntimeError(f"supply_model in state {self.state.name}")
        message, self._pending = self._pending, None
        with self._failing():
            self._start(model, message.open)
            self.state = State.STREAMING
            return Reply(self._apply(message, into), opened=True, finished=self.state is State.FINISHED)

    def fail(self, exc: BaseException) -> ProtocolError | None:
        """Mark the session failed by ``exc`` (e.g. the model would not load); its contract
        error, or None when ``exc`` is a server bug."""
        self.state = State.FAILED
        self._pending = None
        return error_of(exc)

    def receive_eof(self) -> None:
        """The client closed its side: fine after Finish, an error before."""
        if self.state is not State.FINISHED:
            self.state = State.FAILED
            raise out_of_order("the stream was closed before Finish")

    def idle(self) -> None:
        """The client sent nothing for ``limits.idle_timeout``: fine once the result is out (the
        client merely did not close), an error before."""
        if self.state is not State.FINISHED:
            self.state = State.FAILED
            raise ProtocolError(
                Code.DEADLINE_EXCEEDED,
                f"no message for {self.limits.idle_timeout:g} s; the session was dropped",
            )

    # ------------------------------------------------------------------ rules
    def _check_order(self, message: Input) -> None:
        """Order errors, checked before anything in the message is applied."""
        state = self.state
        has_data = bool(message.steps) or message.HasField("finish")
        if state is State.FAILED:
            raise out_of_order("the session has already ended with an error")
        if state is State.LOADING:
            raise RuntimeError("receive while the model is loading")
        if state is State.FINISHED and (has_data or message.HasField("open")):
            raise out_of_order("the session is finished; no data may follow Finish")
        if message.HasField("open") and state is not State.AWAIT_OPEN:
            raise out_of_order("the session is already open; Open may only come in the first message")
        if state is State.AWAIT_OPEN and not message.HasField("open") and has_data:
            raise out_of_order("the stream must start with Open before steps or Finish")

    def _start(self, model: Model, open_: pb.Open) -> None:
        """Create the session for an accepted Open. (A resume point would replay here.)"""
        self.want_deltas, self.want_events = convert.wants(open_.output, unary=self.unary)
        options = convert.options_of(open_, collect_in_final=not self.want_deltas)
        self.counts.choice_index = options.choice_index
        self.limits.check_tokens(len(options.prompt_token_ids))
        self.session = open_session(model, options)
        self.resumable = open_.resumable
        if open_.HasField("resume"):  # the resume seam: the history replays silently in _apply
            replay = Replay(open_.resume.client_messages, open_.resume.sequence)  # checks the point
            self.counts.replayed = open_.resume.client_messages
            self.replay = replay if replay.until else None  # at {0, 0} no message is silent

    def _apply(self, message: Input, into: Output | None) -> Output | None:
        replay = self.replay
        silent = replay is not None and replay.silent(self.counts.client_messages)
        finish = message.HasField("finish")
        if not message.steps and not finish:
            if silent:
                self._replayed(False)
            return None  # an Open alone, or an empty keep-alive message
        outputs = self._feed(message.steps)
        if finish:
            assert self.session is not None
            reason, matched = convert.finish_of(message.finish)
            outputs.append(self.session.finish(reason, matched_stop=matched))
            self.state = State.FINISHED
        if silent:
            produced = self._produces(outputs)
            self._replayed(produced)
            self.sequence += produced
            return None
        return self._reply(outputs, into)

    def _replayed(self, produced: bool) -> None:
        """Account for one silent message of a resumed session's history."""
        replay = self.replay
        assert replay is not None
        n = self.counts.client_messages
        replay.replayed(n, produced, self.state is State.FINISHED)
        if n >= replay.until:
            self.replay = None  # the history is replayed: the session goes on as usual

    def _produces(self, outputs: list[core.StepOutput]) -> bool:
        """Whether these outputs make a reply (what ``_reply`` decides, without building it)."""
        return any(
            out.final is not None or (self.want_deltas and out.deltas) or (self.want_events and out.events)
            for out in outputs
        )

    def _feed(self, steps: Sequence[pb.Step]) -> list[core.StepOutput]:
        session, counts, limits = self.session, self.counts, self.limits
        assert session is not None
        outputs: list[core.StepOutput] = []
        for run in step_runs(steps, session.options.return_token_ids):
            if isinstance(run, pb.Step) and run.token_ids:
                counts.tokens += len(run.token_ids)
                limits.check_tokens(counts.tokens)
                outputs.append(_feed_step(session, run, steps))
            elif isinstance(run, pb.Step):
                if run.HasField("logprobs"):
                    raise invalid(f"steps[{_index(steps, run)}].logprobs: a text step has no logprobs")
                counts.text_bytes += len(run.text.encode("utf-8"))
                limits.check_text(counts.text_bytes)
                counts.tokens += run.text_tokens
                limits.check_tokens(counts.tokens)
                outputs.append(session.feed_text(run.text, run.text_tokens))
            else:
                counts.tokens += len(run)
                limits.check_tokens(counts.tokens)
                outputs += feed_in_pieces(session, run)
        return outputs

    def _reply(self, outputs: list[core.StepOutput], into: Output | None) -> Output | None:
        """Fill the reply from the outputs; None (and ``into`` untouched) when there is nothing."""
        want_deltas, want_events = self.want_deltas, self.want_events
        deltas = [d for out in outputs for d in out.deltas] if want_deltas else []
        events = [e for out in outputs for e in out.events] if want_events else []
        final = outputs[-1].final if outputs else None
        if not deltas and not events and final is None:
            return None
        counts = self.counts
        reply = pb.ParseResponse() if into is None else into
        self.sequence += 1
        reply.sequence = self.sequence
        reply.client_messages = counts.client_messages
        if deltas:
            convert.add_deltas(reply.deltas, deltas)
        if events:
            reply.events.extend([convert.event_to_pb(e) for e in events])
        if final is not None:
            convert.fill_final(reply.final, final)
            counts.finish_reason = final.finish_reason
        counts.deltas += len(deltas)
        counts.events += len(events)
        counts.server_messages += 1
        return reply

    def _failing(self) -> _FailOnError:
        return _FailOnError(self)


class _FailOnError:
    """Context manager: any exception marks the protocol FAILED; session errors become
    ``ProtocolError`` (server bugs pass through unchanged, for the servicer to log)."""

    __slots__ = ("protocol",)

    def __init__(self, protocol: SessionProtocol) -> None:
        self.protocol = protocol

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None:
            return False
        error = self.protocol.fail(exc)
        if error is not None and error is not exc:
            raise error from None
        return False


# ---------------------------------------------------------------------- ParseBatch framing
@dataclass(frozen=True, slots=True)
class NeedModels:
    """The message opens sessions of models this stream has not used yet: load each and pass
    them (or the exception its load raised) to ``BatchProtocol.supply_models``."""

    names: tuple[str, ...]


class BatchHooks:
    """What a ``BatchProtocol`` asks of its host when sessions begin and end; the defaults
    admit everything and forget. The servicer's hooks count sessions in the server's gate and
    log each session's end."""

    def new_counts(self) -> SessionCounts:
        return SessionCounts()

    def admit(self) -> None:
        """Raise ``ProtocolError`` to refuse a new session (the server is full or draining)."""

    def ended(self, counts: SessionCounts, error: ProtocolError | None, admitted: bool) -> None:
        """A session ended: finished (``error`` None), failed, cancelled or cut with its stream."""


CANCELLED_BY_CLIENT = "the client cancelled the session"
INTERNAL_MESSAGE = "internal server error; the server log has the details"
"""A server bug's status says nothing about the exception (its text may hold request data)."""


class BatchProtocol:
    """The rules of one ``ParseBatch`` stream: a table of key → ``SessionProtocol``, one reply per
    client message. Each entry goes to its session's protocol exactly as a ``Parse`` message
    would, so a multiplexed session answers byte for byte like a stream.

    Errors: a session's error (anything its protocol raises, a refused open, a server bug in its
    parsing) ends that session — its entry in the reply carries the status — and the stream goes
    on. Malformed framing (an entry without a key) and the stream's own limit on entries per
    message raise ``ProtocolError``: the stream ends, and ``close`` ends its sessions.
    """

    def __init__(self, limits: Limits, hooks: BatchHooks | None = None) -> None:
        self.limits = limits
        self.hooks = hooks or BatchHooks()
        self.sessions: dict[str, SessionProtocol] = {}
        self.models: dict[str, Model] = {}
        """Models this stream's sessions use, looked up once per stream."""
        self.client_messages = 0
        self._pending: pb.ParseBatchRequest | None = None
        self._load_errors: dict[str, BaseException] = {}

    # ------------------------------------------------------------------ input
    def receive(self, message: pb.ParseBatchRequest) -> NeedModels | pb.ParseBatchResponse:
        """One client message (one engine step): the reply, or the models to load first."""
        self.client_messages += 1
        entries = list(message.sessions)
        items = len(entries) + len(message.packed.keys)
        if items > self.limits.max_items_per_message:
            limit = self.limits.max_items_per_message
            raise exhausted(f"{items} session entries in one message; the limit is {limit}")
        models, sessions = self.models, self.sessions
        # Only an entry of a key with no open session can open one (an Open for an open session
        # is refused before it needs a model; a packed item never opens), so the usual entry
        # costs no Open check here.
        missing = {
            e.open.model
            for e in entries
            if e.HasField("open") and e.open.model not in models and e.key not in sessions
        }
        if missing:
            self._pending = message
            return NeedModels(tuple(sorted(missing)))
        return self._apply(message, entries)

    def supply_models(self, loaded: dict[str, Model | BaseException]) -> pb.ParseBatchResponse:
        """The models ``NeedModels`` named, or the exception each load raised (that name's opens
        fail with its status; nothing else does)."""
        message, self._pending = self._pending, None
        if message is None:
            raise RuntimeError("supply_models without a pending message")
        for name, model in loaded.items():
            if isinstance(model, BaseException):
                self._load_errors[name] = model
            else:
                self.models[name] = model
        try:
            return self._apply(message, list(message.sessions))
        finally:
            self._load_errors.clear()

    def receive_eof(self) -> None:
        """The client closed its side: sessions still open are dropped; the stream ends OK."""
        self.close(ProtocolError(Code.CANCELLED, "the stream was closed before the session finished"))

    def idle(self) -> None:
        """No message for ``limits.idle_timeout``: fine with no session open, else the stream ends."""
        if self.sessions:
            raise ProtocolError(
                Code.DEADLINE_EXCEEDED,
                f"no message for {self.limits.idle_timeout:g} s with {len(self.sessions)} sessions open",
            )

    def close(self, error: ProtocolError) -> None:
        """The stream is over: end every session still open with ``error``."""
        sessions, self.sessions = self.sessions, {}
        for protocol in sessions.values():
            protocol.state = State.FAILED
            self.hooks.ended(protocol.counts, error, True)

    # ------------------------------------------------------------------ rules
    def _apply(self, message: pb.ParseBatchRequest, entries: list[pb.SessionInput]) -> pb.ParseBatchResponse:
        keys = [entry.key for entry in entries]
        packed = Packed.of(message.packed) if message.HasField("packed") else None
        every_key = keys + packed.keys if packed is not None else keys
        if not all(every_key):
            raise invalid("every session entry needs a non-empty key")
        response = pb.ParseBatchResponse(client_messages=self.client_messages)
        outputs = response.sessions
        if len(set(every_key)) == len(every_key):
            for key, entry in zip(keys, entries, strict=True):
                self._entry(outputs, key, entry)
            if packed is not None:
                self._apply_packed(response, packed)
            return response
        # A key repeats: its first entry applies and every later one ends the session (packed
        # items then go as the entries they stand for, to be held to the same rule).
        seen: set[str] = set()
        items = zip(keys, entries, strict=True)
        if packed is not None:
            pairs = zip(packed.keys, packed.steps(), strict=True)
            items = itertools.chain(items, ((key, _entry_of(key, ids)) for key, ids in pairs))
        for key, entry in items:
            if key in seen:
                error = invalid(f"session {key!r} appears twice in one message")
                self._end_with(outputs, key, self.sessions.get(key), error)
                continue
            seen.add(key)
            self._entry(outputs, key, entry)
        return response

    def _entry(self, outputs, key: str, entry: pb.SessionInput) -> None:
        """Apply one session's entry; its output (or the status that ended it) goes in ``outputs``."""
        sessions = self.sessions
        protocol = sessions.get(key)
        if protocol is not None and protocol.state is State.STREAMING and protocol.replay is None:
            # The usual entry: one token-id step for an open session, nothing else.
            steps = entry.steps
            plain = not (entry.cancel or entry.HasField("finish") or entry.HasField("open"))
            if plain and len(steps) == 1 and not steps[0].HasField("logprobs"):
                ids = steps[0].token_ids
                if ids:
                    output = outputs.add()
                    try:
                        if protocol.feed_ids(ids, output):
                            output.key = key
                        else:
                            del outputs[-1]
                    except Exception as exc:
                        del outputs[-1]
                        self._end_with(outputs, key, protocol, _session_error(exc))
                    return
        if entry.cancel:
            if protocol is not None:
                self._end_with(outputs, key, protocol, ProtocolError(Code.CANCELLED, CANCELLED_BY_CLIENT))
            return  # cancelling a session that already ended is a harmless race
        if protocol is None:
            protocol = self._open(outputs, key, entry)
            if protocol is None:
                return
        output = outputs.add()
        try:
            reply = protocol.receive(entry, output)
            if isinstance(reply, NeedModel):
                reply = protocol.supply_model(self._model(reply.name), output)
        except Exception as exc:
            del outputs[-1]
            self._end_with(outputs, key, protocol, _session_error(exc))
            return
        if reply.response is None:
            del outputs[-1]
        else:
            output.key = key
        if reply.finished:
            del sessions[key]
            self.hooks.ended(protocol.counts, None, True)

    def _apply_packed(self, response: pb.ParseBatchResponse, packed: Packed) -> None:
        """The packed items of a message whose keys are all distinct: each exactly as the entry
        it stands for, with replies that are one plain text delta written packed."""
        outputs = response.sessions
        sessions, streaming = self.sessions, State.STREAMING
        keys: list[str] = []
        sequences: list[int] = []
        messages: list[int] = []
        texts: list[str] = []
        reasoning: list[bool] = []
        for key, ids in zip(packed.keys, packed.steps(), strict=True):
            protocol = sessions.get(key)
            if protocol is None or protocol.state is not streaming or protocol.replay is not None or not ids:
                self._entry(outputs, key, _entry_of(key, ids))  # the rules' other cases
                continue
            try:
                taken = protocol.take_ids(ids)
            except Exception as exc:
                self._end_with(outputs, key, protocol, _session_error(exc))
                continue
            if taken is None:
                continue
            deltas, events = taken
            if not events and len(deltas) == 1:
                delta = deltas[0]
                if not (
                    delta.tool_calls
                    or delta.logprobs
                    or delta.token_ids
                    or (delta.reasoning and delta.content)
                ):
                    keys.append(key)
                    sequences.append(protocol.sequence)
                    messages.append(protocol.counts.client_messages)
                    texts.append(delta.reasoning or delta.content)
                    reasoning.append(bool(delta.reasoning))
                    continue
            protocol.write(outputs.add(key=key), deltas, events)
        if keys:
            out = response.packed
            out.keys.extend(keys)
            out.sequences.extend(sequences)
            out.client_messages.extend(messages)
            out.texts.extend(texts)
            out.reasoning.extend(reasoning)

    def _open(self, outputs, key: str, entry: pb.SessionInput) -> SessionProtocol | None:
        """A new session for ``key``, or None when its first entry is refused (answered in
        ``outputs``)."""
        if not entry.HasField("open"):
            _status(outputs, key, out_of_order(f"no open session {key!r}: its first entry must carry open"))
            return None
        counts = self.hooks.new_counts()
        counts.model, counts.request_id = entry.open.model, entry.open.request_id
        if len(self.sessions) >= self.limits.max_sessions_per_stream:
            error = exhausted(
                f"the stream has {len(self.sessions)} open sessions; the limit is "
                f"{self.limits.max_sessions_per_stream}"
            )
            return self._refuse(outputs, key, counts, error)
        try:
            self.hooks.admit()
        except ProtocolError as error:
            return self._refuse(outputs, key, counts, error)
        protocol = SessionProtocol(self.limits, counts)
        self.sessions[key] = protocol
        return protocol

    def _refuse(self, outputs, key: str, counts: SessionCounts, error: ProtocolError) -> None:
        counts.client_messages += 1
        _status(outputs, key, error)
        self.hooks.ended(counts, error, False)
        return None

    def _model(self, name: str) -> Model:
        error = self._load_errors.get(name)
        if error is not None:
            raise error
        return self.models[name]

    def _end_with(self, outputs, key: str, protocol: SessionProtocol | None, error: ProtocolError) -> None:
        """End a session with ``error`` and say so in the reply."""
        _status(outputs, key, error)
        if protocol is not None and self.sessions.get(key) is protocol:
            del self.sessions[key]
            protocol.state = State.FAILED
            self.hooks.ended(protocol.counts, error, True)


class Packed:
    """A message's packed items (``PackedSteps``), checked as framing: their keys and, per key,
    its token ids."""

    __slots__ = ("counts", "ids", "keys")

    def __init__(self, keys: list[str], counts: list[int], ids: list[int]) -> None:
        self.keys, self.counts, self.ids = keys, counts, ids

    @classmethod
    def of(cls, packed: pb.PackedSteps) -> Packed:
        keys, counts, ids = list(packed.keys), list(packed.token_counts), list(packed.token_ids)
        if counts and len(counts) != len(keys):
            raise invalid(f"packed: {len(counts)} token_counts for {len(keys)} keys")
        expected = sum(counts) if counts else len(keys)
        if expected != len(ids):
            raise invalid(f"packed: the items take {expected} token_ids, and {len(ids)} came")
        return cls(keys, counts, ids)

    def steps(self) -> list[list[int]]:
        """Each item's token ids."""
        ids = self.ids
        if not self.counts:
            return [ids[i : i + 1] for i in range(len(ids))]
        steps, at = [], 0
        for n in self.counts:
            steps.append(ids[at : at + n])
            at += n
        return steps


def _entry_of(key: str, ids: list[int]) -> pb.SessionInput:
    """A packed item as the entry it stands for."""
    entry = pb.SessionInput(key=key)
    if ids:
        entry.steps.add().token_ids.extend(ids)
    return entry


def _session_error(exc: Exception) -> ProtocolError:
    """The error that ends a multiplexed session; a server bug becomes INTERNAL for that session
    alone (``__cause__`` keeps the exception for the host's log)."""
    error = error_of(exc)
    if error is None:
        error = ProtocolError(Code.INTERNAL, INTERNAL_MESSAGE)
        error.__cause__ = exc
    return error


def _status(outputs, key: str, error: ProtocolError) -> None:
    output = outputs.add(key=key)
    output.status.code = int(error.code)
    output.status.message = error.message


# ---------------------------------------------------------------------- ParseOnce framing
def once_request(request: pb.ParseOnceRequest) -> pb.ParseRequest:
    """A ParseOnce call as the one message of a session: open, the whole output as one step,
    finish. Limits then hold exactly as for a ``Parse`` stream sent that message."""
    if request.HasField("logprobs") and not request.token_ids:
        raise invalid("logprobs: they need token_ids (text has no logprobs)")
    message = pb.ParseRequest(open=request.open, finish=request.finish)
    if request.token_ids or request.text or request.text_tokens:
        step = message.steps.add(text=request.text, text_tokens=request.text_tokens)
        step.token_ids.extend(request.token_ids)
        if request.HasField("logprobs"):
            step.logprobs.CopyFrom(request.logprobs)
    return message


def once_error(error: ProtocolError) -> ProtocolError:
    """An error of the one step ``once_request`` made, naming the ParseOnceRequest's own fields
    (``logprobs.top_token_ids``, not ``steps[0].logprobs.top_token_ids``)."""
    if error.message.startswith("steps[0]."):
        return ProtocolError(error.code, error.message.removeprefix("steps[0]."))
    return error


def once_response(reply: Reply) -> pb.ParseOnceResponse:
    """The unary response for the one reply of a ParseOnce session."""
    response = pb.ParseOnceResponse()
    if reply.response is not None:
        response.final.CopyFrom(reply.response.final)
        response.deltas.extend(reply.response.deltas)
        response.events.extend(reply.response.events)
    return response
