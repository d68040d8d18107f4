"""One session's protocol, sans-IO: the state machine that applies the rules of a session's
messages (``parsetier.protocol.rules``: order, counting, limits, the plain path, the reply) to
the messages of one session, and answers each with what to send.

A ``SessionProtocol`` never reads, writes, sleeps or loads anything: like h11's ``Connection``
it is a state machine the I/O layer drives::

    protocol = SessionProtocol(limits)
    result = protocol.receive(message)             # a ParseRequest
    if isinstance(result, NeedModel):              # the message opens the session
        result = protocol.supply_model(load(result.name))
    send(result.response)                          # a Reply; response None means "send nothing"
    ...
    protocol.receive_eof()                         # the client closed its side
    protocol.idle()                                # the client went silent too long

Every RPC drives the same object and differs only in framing:

- ``Parse``: one stream, one protocol; each ``ParseRequest`` is passed to ``receive`` (or
  ``receive_serialized``, whose plain messages the core answers as bytes).
- ``ParseOnce``: a one-message session, ``SessionProtocol(limits, unary=True)`` fed
  ``framing.once_request(request)`` (open + one step + finish); ``framing.once_response``
  reshapes its reply. A streamed reply too large for one message goes in parts
  (``framing.in_parts``): framing, not a rule of the session.
- the multiplexed RPC: a table key → protocol (``parsetier.protocol.batch``); each item goes to
  its session's protocol, so a multiplexed session answers byte for byte like a ``Parse`` stream.

Errors are ``ProtocolError`` with a ``Code`` (see ``parsetier.status``); errors from the session
(a bad token id, a call out of order) are translated to it here. After an error the protocol is
``FAILED`` and refuses everything: the caller ends the session with that code.

The two paths (``rules``): a plain message (``rules.plain_ids``) is fed by ``take_ids`` with no
step grouping — or counted, stepped and answered by the core (``receive_serialized``, an opening
entry's step in ``_supplied``, the packed items) when it steps the session (``rules.core_steps``);
every other message is ``_check_order``'d and ``_apply``'d: steps grouped into feed calls
(``step_runs``: the ids of consecutive id steps are concatenated into one ``Session.feed`` call —
parsing is split-invariant, so the output is the same as feeding them one by one — and a text or
logprobs step is fed on its own), the Finish applied. Both end in the same reply path: ``_taken``
picks what the reply carries (``rules.REPLY``) and counts it, ``write`` sets the reply's fields.

Resume (``Open.resume``, ``parsetier.protocol.resume``): counted in tokens
--------------------------------------------------------------------------
The ``ResumePoint`` carries the history the client has the output of, as steps (its answered
ids as one packed run, plus any text or logprobs steps in their places), the ``sequence`` of the
last reply it received and that reply's ``output_digest``. ``_start`` feeds the history right
after the ``Session`` exists and before the opening message's own steps, through the same
``_feed`` as live input (same limits and counting: they are this session's tokens), and renders
it through the session's wire renderer, so the renderer's state goes on as it did on the broken
stream; its outputs are digested and dropped. ``resume.check`` then compares the digest with the
point's (different: ``ResumeMismatch``, FAILED_PRECONDITION), ``sequence`` continues from the
point's, and ``counts.replayed`` records the history's ids. Everything after is live: the client
re-sends its unanswered steps as ordinary messages. ``ParseOnce`` ignores a resume point.

Digest: every reply carries ``output_digest``, the session's running digest of all the output it
produced (``parsetier.engine.digest``), updated wherever output is made, sent or not.

Ledger: the counters above, ``sequence`` and the digest live in the session's ledger
(``parsetier.protocol.ledger``), native for a session on the native core, so the packed ``ParseBatch``
path (``parsetier.protocol.batch``) can step such a session and count it with no Python.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from parsetier import convert, native
from parsetier.completion import CompletionSession
from parsetier.engine import session as core
from parsetier.engine.events import Event
from parsetier.engine.wire import Renderer, WireRequest, renderer
from parsetier.engine.wire.errors import error_bytes, failed_response
from parsetier.messages import Delta, Final, Usage
from parsetier.models import Model
from parsetier.native import open_session
from parsetier.protocol import resume, rules
from parsetier.protocol.ledger import Ledger, new_ledger
from parsetier.protocol.rules import FEED_PIECE, ORDER, Limits, State, moved, only_ids, shape_of
from parsetier.status import Code, ProtocolError, StatusError, error_of, invalid, out_of_order
from parsetier_api.v1 import parsetier_pb2 as pb

Input = pb.ParseRequest | pb.SessionInput
"""A session's client message: a ``Parse`` stream's, or one entry of a ``ParseBatch`` message
(the same fields: ``open``, ``steps``, ``finish``)."""
Output = pb.ParseResponse | pb.SessionOutput
"""A session's reply: a ``ParseResponse``, or one entry of a ``ParseBatchResponse``."""
Into = Callable[[], Output]
"""Makes the message a reply is written into (``pb.ParseResponse``, or a ``ParseBatch`` reply's
``sessions.add``): called only when the reply carries something, so a message answered with
nothing, or with the core's bytes, makes no message."""


def _ledger_counter(name: str, doc: str) -> property:
    def get(self: SessionCounts) -> int:
        return getattr(self.ledger, name)

    def put(self: SessionCounts, value: int) -> None:
        setattr(self.ledger, name, value)

    return property(get, put, doc=doc)


@dataclass(slots=True)
class SessionCounts:
    """What a session has received and sent so far (its log line reports these). The counters
    the streaming path updates (tokens, messages, deltas, events) are its ``ledger``'s, shown
    here as attributes."""

    model: str = ""
    request_id: str = ""
    choice_index: int = 0
    """Which of the request's choices the session was (``Open.choice_index``)."""
    text_bytes: int = 0
    """Bytes of already-detokenized text received."""
    finish_reason: str = ""
    replayed: int = 0
    """A resumed session: the history token ids it fed silently (``Open.resume``)."""
    ledger: Ledger = field(default_factory=new_ledger, repr=False, compare=False)
    """The session's counters (``parsetier.protocol.ledger``)."""

    tokens = _ledger_counter("tokens", "Output token ids received (plus the ``text_tokens`` of text steps).")
    deltas = _ledger_counter("deltas", "Deltas sent.")
    events = _ledger_counter("events", "Events sent.")
    client_messages = _ledger_counter("client_messages", "Messages received (empty keep-alives too).")
    server_messages = _ledger_counter("server_messages", "Replies sent.")


@dataclass(frozen=True, slots=True)
class NeedModel:
    """The message opens the session: load the model ``name`` and pass it to ``supply_model``."""

    name: str


class Reply(NamedTuple):
    """What to send for one client message. ``response`` is None when the message produced
    nothing to send, and the ``ParseResponse``'s bytes when the core wrote it
    (``SessionProtocol.receive_serialized``); ``opened`` is True for the message whose Open was
    just accepted (a stream sends its headers then); ``finished`` once the final result is in
    ``response``. A named tuple: one is made per client message, and a tuple is the cheapest
    immutable value to make."""

    response: pb.ParseResponse | bytes | None
    opened: bool = False
    finished: bool = False


_NOTHING = Reply(None)
"""The reply to a message that produced nothing."""
_OPENED = Reply(None, opened=True)
"""The reply to an opening message that produced nothing."""

_step_reply = None if native._core is None else native._core.step_reply
"""``_core.step_reply`` (None without a core)."""

Taken = tuple[Sequence[Delta], Sequence[Event], bytes]
"""What one reply carries (``SessionProtocol._taken``): the deltas and events the client asked
for, and the wire bytes (``Open.wire``); its final result, if any, is the caller's."""


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


def feed_in_pieces(session: core.Session | CompletionSession, ids: Sequence[int]) -> list[core.StepOutput]:
    return [session.feed(ids[at : at + FEED_PIECE]) for at in range(0, len(ids), FEED_PIECE)]


def _joined(outputs: list[core.StepOutput]) -> core.StepOutput:
    """The outputs of consecutive feeds as one (feeds have no final)."""
    return core.StepOutput([d for o in outputs for d in o.deltas], [e for o in outputs for e in o.events])


def _wire_kept(open_: pb.Open) -> tuple[WireRequest, bool] | None:
    """What an error needs to render in an Open's dialect: its wire request and ``resumable``
    (None when its dialect is unset: the session is refused for that, in no dialect)."""
    try:
        return convert.wire_request_of(open_), open_.resumable
    except StatusError:
        return None


def refused_wire(open_: pb.Open, code: str, message: str) -> bytes:
    """``SessionProtocol.error_wire`` of a session refused at its Open, before it had a protocol
    (a ``ParseBatch`` stream's limit or admission)."""
    return _error_wire(_wire_kept(open_) if open_.HasField("wire") else None, code, message, None)


def _error_wire(
    kept: tuple[WireRequest, bool] | None, code: str, message: str, renderer: Renderer | None
) -> bytes:
    """``SessionProtocol.error_wire``'s rule, on what ``_wire_kept`` kept: a streamed Responses
    session's renderer writes its error (numbered on, and ``response.failed``), else
    ``error_bytes``."""
    if kept is None or code == "CANCELLED" or (code == "UNAVAILABLE" and kept[1]):
        return b""
    request = kept[0]
    if renderer is not None and request.dialect == "openai_responses" and request.stream:
        data = failed_response(renderer, code, message)
        if data is not None:
            return data
    return error_bytes(request, code, message)


class SessionProtocol:
    """The rules of one session (see the module docstring). Not thread-safe: one caller at a
    time, though that caller may hand a large message to a worker thread."""

    __slots__ = (
        "_pending",
        "counts",
        "ledger",
        "limits",
        "renderer",
        "resumable",
        "session",
        "state",
        "unary",
        "want_deltas",
        "want_events",
        "wire_error",
    )
    """One per session, made and dropped with it: no instance dict to build and free."""

    def __init__(self, limits: Limits, counts: SessionCounts | None = None, *, unary: bool = False) -> None:
        self.limits = limits
        self.counts = counts if counts is not None else SessionCounts()
        """Filled in as the session runs; pass the log record to have it counted directly."""
        self.unary = unary
        """ParseOnce: ``Open.output`` unset means FINAL_ONLY instead of DELTAS."""
        self.state = State.AWAIT_OPEN
        self.ledger = self.counts.ledger
        """The session's counters, sequence and output digest (``parsetier.protocol.ledger``)."""
        self.session: core.Session | CompletionSession | None = None
        self.want_deltas = True
        self.want_events = False
        self._pending: pb.ParseRequest | None = None
        self.resumable = False
        """The client can resume elsewhere: a draining server hands the session off."""
        self.renderer: Renderer | None = None
        """The session's wire dialect (``Open.wire``), fed every delta; None when not asked for."""
        self.wire_error: tuple[WireRequest, bool] | None = None
        """The Open's wire request and ``resumable``, when it asked for wire bytes in a dialect:
        an error that ends the session renders in it (``error_wire``), even one raised before
        the session started (copied out: the Open's message is not kept alive)."""

    @property
    def finished(self) -> bool:
        return self.state is State.FINISHED

    @property
    def sequence(self) -> int:
        """Number of the last reply that carried something."""
        return self.ledger.sequence

    # ------------------------------------------------------------------ input
    def receive(self, message: Input, into: Into = pb.ParseResponse) -> NeedModel | Reply:
        """One client message: its reply, or ``NeedModel`` when it opens the session.

        ``into`` makes the message the reply is written into (``Into``); when nothing came out
        it is not called and ``Reply.response`` is None."""
        ids = rules.plain_ids(self.state, message)
        if ids is not None:
            return self._plain_reply(self.take_ids(ids), into)
        self.ledger.count_message(0)  # its tokens as its steps are fed (``_feed``)
        with self._failing():
            self._check_order(message)
            self.limits.check_steps(len(message.steps))
            if message.HasField("open"):
                self.keep_wire(message.open)
                self.counts.model = message.open.model
                self.counts.request_id = message.open.request_id
                self._pending = message
                self.state = moved(self.state, "open")
                return NeedModel(message.open.model)
            return Reply(self._apply(message, into), finished=self.state is State.FINISHED)

    def receive_serialized(self, message: pb.ParseRequest) -> NeedModel | Reply:
        """``receive`` for a caller that sends the reply's bytes (the ``Parse`` stream): a plain
        message of a session on the native core is counted, stepped and answered by the core in
        one call (``_core.step_reply``, the same rules and reply as ``take_ids`` and ``write``),
        ``Reply.response`` then the ``ParseResponse``'s bytes; any other message, and one the
        core leaves to Python (a bad id, a limit), is ``receive``'s."""
        if _step_reply is not None:
            ids = rules.plain_ids(self.state, message)
            if ids is not None:
                try:
                    data = _step_reply(self.ledger, ids, self.limits.max_tokens_per_session)
                except Exception as exc:
                    self.fail(exc)  # a server bug in the core: the session is over
                    raise
                if data is not None:
                    return Reply(data) if data else _NOTHING
        data = self.finish_serialized(message)
        return Reply(data, finished=True) if data is not None else self.receive(message)

    def finish_serialized(self, message: Input, key: str | None = None) -> bytes | None:
        """A plain Finish answered by the core: the message counted, the session finished and
        its reply written as ``_apply`` and ``write`` would (``NativeSession.finish_reply``):
        the reply's bytes, a ``ParseResponse``'s or with ``key`` a ``ParseBatchResponse``'s
        holding that session's ``SessionOutput`` (bytes, not a ``Reply``: such a message always
        finishes). None, nothing done, for any other message (``receive`` applies it). Plain
        is a message carrying a Finish and nothing else (a reason it takes, no matched stop the
        final result would show) for a STREAMING session the core steps alone (its ledger
        bound: parse-only, no wire dialect); ``other_choices_usage`` only shows in wire bytes,
        which such a session has none of."""
        session = self.session
        reason = rules.plain_finish(self.state, message, session)
        if reason is None or self.renderer is not None:
            return None
        try:
            done = session.finish_reply(self.ledger, reason, key)
        except Exception as exc:
            self.fail(exc)  # a server bug in the core: the session is over
            raise
        if done is None:
            return None
        data, self.counts.finish_reason = done
        self._leave(moved(self.state, "finish"))
        return data

    def plain_ids(self, message: Input) -> Sequence[int] | None:
        """The token ids of a plain message, None for any other (``rules.plain_ids``)."""
        return rules.plain_ids(self.state, message)

    def takes_ids(self, ids: Sequence[int]) -> bool:
        """A message of one step of these ids and nothing else takes the plain path
        (``rules.takes_ids``): a packed ``ParseBatch`` item stands for such a message."""
        return rules.takes_ids(self.state, ids)

    def take_ids(self, ids: Sequence[int]) -> Taken | None:
        """The plain path (``plain_ids``): the message is counted and its ids fed, and what the
        reply carries is returned (``_taken``; its ``sequence`` taken), None when nothing is to
        be sent. The caller writes the reply (with ``write``, or packed: ``BatchProtocol``)."""
        return self._take_counted(ids, self.ledger.count_message(len(ids)))

    def _take_counted(self, ids: Sequence[int], tokens: int) -> Taken | None:
        """``take_ids`` once the message is counted (``tokens``: the session's tokens so far)."""
        try:
            if tokens > self.limits.max_tokens_per_session:
                self.limits.check_tokens(tokens)
            if len(ids) <= FEED_PIECE:
                # As a list: the core's ``step`` (a native session's ``feed``) takes a list or a
                # tuple, and hands a message's repeated field to its Python fallback.
                out = self.session.feed(ids if type(ids) is list else list(ids))  # type: ignore[union-attr]
            else:  # a large message: in pieces, so its thread hands the GIL back between them
                out = _joined(feed_in_pieces(self.session, ids))  # type: ignore[arg-type]
        except Exception as exc:
            error = self.fail(exc)
            if error is None or error is exc:
                raise
            raise error from None
        if out.deltas:
            self.ledger.digest_deltas(out.deltas)
        wire = self.renderer.step(out.deltas) if self.renderer is not None and out.deltas else b""
        return self._taken(out.deltas, out.events, wire)

    def _taken(
        self, deltas: Sequence[Delta], events: Sequence[Event], wire: bytes, final: Final | None = None
    ) -> Taken | None:
        """What a reply carries of what a message produced: the deltas and events the client
        asked for, the wire bytes and the final result; None when that is nothing. A reply that
        carries something takes the next ``sequence`` and is counted here."""
        deltas = deltas if self.want_deltas else ()
        events = events if self.want_events else ()
        if not deltas and not events and not wire and final is None:
            return None
        self.ledger.count_reply(len(deltas), len(events))
        return deltas, events, wire

    def write(
        self,
        into: Output,
        deltas: Sequence[Delta],
        events: Sequence[Event],
        wire: bytes = b"",
        final: Final | None = None,
        final_wire: bytes = b"",
    ) -> None:
        """Write a reply into ``into`` (what ``take_ids`` or ``_taken`` returned, and the final
        result of a Finish with its ``Final.wire``): the one place a reply's fields are set."""
        ledger = self.ledger
        into.sequence = ledger.sequence
        into.client_messages = ledger.client_messages
        into.output_digest = ledger.digest
        if deltas:
            convert.add_deltas(into.deltas, deltas)
        if events:
            into.events.extend([convert.event_to_pb(e) for e in events])
        if wire:
            into.wire = wire
        if final is not None:
            convert.fill_final(into.final, final)
            if final_wire:
                into.final.wire = final_wire
            self.counts.finish_reason = final.finish_reason

    def receive_with(
        self,
        message: Input,
        models: Callable[[str], Model],
        into: Into = pb.ParseResponse,
        key: str | None = None,
    ) -> Reply:
        """``receive``, and for a message that opens the session ``supply_model`` of the model
        ``models(name)`` gives at once: for a caller with its models at hand (a ``ParseBatch``
        stream loads them before it applies a message). The opening message takes a short way
        to the same checks, counts, errors and reply: in AWAIT_OPEN every order rule holds for
        it (``_check_order``), so it is counted, its steps' number checked, then the model taken
        (an error from ``models`` is the caller's, as after ``NeedModel``) and supplied. With
        ``key`` (a ``ParseBatch`` session's) the opening message's plain step may be answered by
        the core: ``Reply.response`` is then a ``ParseBatchResponse``'s bytes holding that
        session's ``SessionOutput``, and ``into`` is not called."""
        if self.state is not State.AWAIT_OPEN or not message.HasField("open"):
            reply = self.receive(message, into)
            return self.supply_model(models(reply.name), into) if isinstance(reply, NeedModel) else reply
        return self.open_with(message, message.open, models, into, key)

    def open_with(
        self,
        message: Input,
        open_: pb.Open,
        models: Callable[[str], Model],
        into: Into = pb.ParseResponse,
        key: str | None = None,
    ) -> Reply:
        """``receive_with`` of a message that opens the session (in AWAIT_OPEN), its ``Open``
        (``open_``) read by the caller: a ``ParseBatch`` stream reads an entry's Open to open
        its session and hands it on, rather than have it read again (a field read is a lookup
        in the message, each time)."""
        self.ledger.count_message(0)  # its tokens as its steps are fed
        steps = message.steps
        if len(steps) > self.limits.max_steps_per_message:
            with self._failing():
                self.limits.check_steps(len(steps))
        self.keep_wire(open_)
        counts = self.counts
        counts.model = name = open_.model
        counts.request_id = request_id = open_.request_id
        self.state = moved(self.state, "open")
        return self._supplied(models(name), message, open_, into, key, steps, request_id)

    def supply_model(self, model: Model, into: Into = pb.ParseResponse) -> Reply:
        """The model the opening message named; starts the session and applies that message."""
        if self.state is not State.LOADING or self._pending is None:
            raise RuntimeError(f"supply_model in state {self.state.name}")
        message, self._pending = self._pending, None
        return self._supplied(model, message, message.open, into)

    def _supplied(
        self,
        model: Model,
        message: Input,
        open_: pb.Open,
        into: Into,
        key: str | None = None,
        steps: Sequence[pb.Step] | None = None,
        request_id: str | None = None,
    ) -> Reply:
        """``supply_model`` of the opening ``message`` (its ``open_``); ``key``: ``receive_with``'s;
        ``steps`` and ``request_id``: the message's and the Open's, when the caller read them."""
        try:  # ``_failing``, spelled out: no context manager made per open
            self._start(model, open_, request_id)
            self.state = moved(self.state, "model")
            ids = only_ids(message, steps)
            if not ids:  # steps of the general path, a Finish, or nothing
                return Reply(self._apply(message, into), opened=True, finished=self.state is State.FINISHED)
        except BaseException as exc:
            self._failed(exc)
            raise
        # The opening message's only step goes the plain way (the message is counted already):
        # the same reply as the general path's, without its step grouping.
        ledger = self.ledger
        if key is not None and _step_reply is not None:
            # The core's plain step (``receive_serialized``'s), told the message is counted
            # (``counted``); when it declines (nothing done: an unbound ledger, a bad id, the
            # token limit) Python applies the step by the same rules. The ids go as a list made
            # by slicing: the core reads a list directly and a repeated field id by id through
            # the sequence protocol (``list()`` of it too), each several times slower.
            try:
                data = _step_reply(ledger, ids[:], self.limits.max_tokens_per_session, key, True)
            except Exception as exc:
                self.fail(exc)  # a server bug in the core: the session is over
                raise
            if data is not None:
                return Reply(data, True) if data else _OPENED
        return self._plain_reply(self._take_counted(ids, ledger.count_tokens(len(ids))), into, opened=True)

    def _plain_reply(self, taken: Taken | None, into: Into, opened: bool = False) -> Reply:
        """The reply of a plain step: nothing to send when ``taken`` is None, else ``taken``
        written into the message ``into`` makes."""
        if taken is None:
            return _OPENED if opened else _NOTHING
        reply = into()
        self.write(reply, *taken)
        return Reply(reply, opened=opened)

    def _leave(self, state: State) -> None:
        """The session ends (``FINISHED`` or ``FAILED``): the one way out of STREAMING, so no
        path takes a plain message for it afterwards, the packed ``ParseBatch`` path included
        (its ledger lets go of the native session the core steps)."""
        self.state = state
        self.ledger.unbind()

    def fail(self, exc: BaseException) -> StatusError | None:
        """Mark the session failed by ``exc`` (e.g. the model would not load); its contract
        error, or None when ``exc`` is a server bug."""
        self._leave(State.FAILED)  # from any state: ``rules.TRANSITIONS``' errors, FINISHED too
        self._pending = None
        return error_of(exc)

    def keep_wire(self, open_: pb.Open) -> None:
        """Keep what ``error_wire`` needs of ``open_`` if it asks for wire bytes (the service
        calls it too, with the Open of a stream refused before its first message was applied)."""
        if open_.HasField("wire"):
            self.wire_error = _wire_kept(open_)

    def error_wire(self, code: str, message: str) -> bytes:
        """The bytes that end the session's response with the status ``code`` (its name) and
        ``message`` in its wire dialect (``dialects.errors``); b"" when the Open asked for none,
        for a cancel (the client's own), and for a resumable session ended UNAVAILABLE (handed
        off: its client resumes it elsewhere)."""
        return _error_wire(self.wire_error, code, message, self.renderer)

    def receive_eof(self) -> None:
        """The client closed its side: fine after Finish, an error before."""
        if self.state is not State.FINISHED:
            self._leave(moved(self.state, "error"))
            raise out_of_order("the stream was closed before Finish")

    def idle(self) -> None:
        """The client sent nothing for ``limits.idle_timeout``: fine once the result is out (the
        client merely did not close), an error before."""
        if self.state is not State.FINISHED:
            self._leave(moved(self.state, "error"))
            raise ProtocolError(
                Code.DEADLINE_EXCEEDED,
                f"no message for {self.limits.idle_timeout:g} s; the session was dropped",
            )

    # ------------------------------------------------------------------ rules
    def _check_order(self, message: Input) -> None:
        """Order errors (``rules.ORDER``), checked before anything in the message is applied."""
        refused = ORDER[(self.state, shape_of(message))]
        if refused is not None:
            if refused is rules.LOADING_BUG:
                raise RuntimeError(refused)
            raise out_of_order(refused)

    def _start(self, model: Model, open_: pb.Open, request_id: str | None = None) -> None:
        """Create the session for an accepted Open; a resumed one feeds its history silently here.
        Each per-session field of the Open is read once (``request_id``: when the caller read
        it); an Open that sets none but the model shares its ``Opening`` by its bytes
        (``convert.opening_of``'s ``shared_only``)."""
        self.limits.check_tools(open_)
        if request_id is None:
            request_id = open_.request_id
        prompt, choice = open_.prompt_token_ids, open_.choice_index
        wire, resumable, resuming = open_.HasField("wire"), open_.resumable, open_.HasField("resume")
        own = bool(request_id or prompt or choice)
        shared_only = not (own or wire or resumable or resuming)
        opening = convert.opening_of(open_, unary=self.unary, shared_only=shared_only)
        self.want_deltas, self.want_events = opening.want_deltas, opening.want_events
        options = convert.session_options(opening, request_id, prompt, choice) if own else opening.options
        self.counts.choice_index = choice
        self.limits.check_tokens(len(options.prompt_token_ids))
        self.session = open_session(model, options, opening.options)
        if wire:
            self.renderer = renderer(convert.wire_request_of(open_), self.session)
        self.resumable = resumable
        if resuming and not self.unary:  # ParseOnce ignores a resume point
            point = open_.resume
            history = self._feed(point.history)  # silent: the client has this output
            self._digest(history)
            self._render(history, None)
            resume.check(point, self.ledger.digest)
            self.ledger.sequence = point.sequence
            self.counts.replayed = resume.history_tokens(point)
        if rules.core_steps(self.ledger, self.session, self.renderer):
            self.ledger.bind(self.session.wire_core(), self.want_deltas, self.want_events)  # type: ignore[union-attr]

    def _apply(self, message: Input, into: Into) -> Output | None:
        """A message of the general path, checked, to an open session: fed step by step, its
        Finish applied; the one reply for all it produced (written into the message ``into``
        makes), or None and ``into`` not called when there is nothing to send."""
        finish = message.HasField("finish")
        if not message.steps and not finish:
            return None  # an Open alone, or an empty keep-alive message
        outputs = self._feed(message.steps)
        matched: int | str | None = None
        if finish:
            assert self.session is not None
            reason, matched = convert.finish_of(message.finish)
            outputs.append(self.session.finish(reason, matched_stop=matched))
            self._leave(moved(self.state, "finish"))
        self._digest(outputs)
        others = message.finish.other_choices_usage if finish else None
        wire, final_wire = self._render(outputs, matched if isinstance(matched, str) else None, others)
        final = outputs[-1].final if outputs else None
        deltas = [d for out in outputs for d in out.deltas] if self.want_deltas else ()
        events = [e for out in outputs for e in out.events] if self.want_events else ()
        taken = self._taken(deltas, events, wire, final)
        if taken is None:
            return None
        reply = into()
        self.write(reply, *taken, final, final_wire)
        return reply

    def _render(
        self, outputs: list[core.StepOutput], stop_string: str | None, others: pb.Usage | None = None
    ) -> tuple[bytes, bytes]:
        """The wire bytes of these outputs (``Open.wire``): the reply's, and ``Final.wire``. A
        resumed session's silent history renders too (the bytes dropped), so the renderer's state
        goes on as it did on the broken stream. ``others``: ``Finish.other_choices_usage``, added
        to the usage the bytes show (``n`` > 1: the APIs report the usage of every choice)."""
        renderer = self.renderer
        if renderer is None or not outputs:
            return b"", b""
        last = outputs[-1] if outputs[-1].final is not None else None
        parts = [renderer.step(out.deltas) for out in outputs if out is not last and out.deltas]
        closing = b""
        if last is not None:
            final = last.final
            assert final is not None
            if others is not None and (others.completion_tokens or others.reasoning_tokens):
                usage = Usage(
                    final.usage.completion_tokens + others.completion_tokens,
                    final.usage.reasoning_tokens + others.reasoning_tokens,
                )
                final = replace(final, usage=usage)
            tail, closing = renderer.finish(last.deltas, final, stop_string)
            parts.append(tail)
        return b"".join(parts), closing

    def _digest(self, outputs: list[core.StepOutput]) -> None:
        """Account for produced output in the digest, whether it is sent or not."""
        ledger = self.ledger
        for out in outputs:
            if out.deltas:
                ledger.digest_deltas(out.deltas)
            if out.final is not None:
                ledger.digest_finish(out.final.finish_reason)

    def _feed(self, steps: Sequence[pb.Step]) -> list[core.StepOutput]:
        session, counts, ledger, limits = self.session, self.counts, self.ledger, self.limits
        assert session is not None
        outputs: list[core.StepOutput] = []
        for run in step_runs(steps, session.options.return_token_ids):
            if isinstance(run, pb.Step) and run.token_ids:
                limits.check_tokens(ledger.count_tokens(len(run.token_ids)))
                outputs.append(_feed_step(session, run, steps))
            elif isinstance(run, pb.Step):
                if run.HasField("logprobs"):
                    raise invalid(f"steps[{_index(steps, run)}].logprobs: a text step has no logprobs")
                counts.text_bytes += len(run.text.encode("utf-8"))
                limits.check_text(counts.text_bytes)
                limits.check_tokens(ledger.count_tokens(run.text_tokens))
                outputs.append(session.feed_text(run.text, run.text_tokens))
            else:
                limits.check_tokens(ledger.count_tokens(len(run)))
                outputs += feed_in_pieces(session, run)
        return outputs

    def _failing(self) -> _FailOnError:
        return _FailOnError(self)

    def _failed(self, exc: BaseException) -> None:
        """``exc`` ends the session (``FAILED``): a session error is raised as its
        ``StatusError``; anything else (a server bug) returns, for the caller to re-raise."""
        error = self.fail(exc)
        if error is not None and error is not exc:
            raise error from None


class _FailOnError:
    """Context manager: any exception marks the protocol FAILED; session errors become
    their ``StatusError`` (server bugs pass through unchanged, for the servicer to log)."""

    __slots__ = ("protocol",)

    def __init__(self, protocol: SessionProtocol) -> None:
        self.protocol = protocol

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is not None:
            self.protocol._failed(exc)
        return False
