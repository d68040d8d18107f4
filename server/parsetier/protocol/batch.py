"""The rules of one ``ParseBatch`` stream, sans-IO: many sessions over one stream, each driven by
its own ``SessionProtocol`` (``parsetier.protocol.session``), one reply per client message.

A message's entries (``SessionInput``) and packed items (``PackedSteps``) go, each, to its
session's protocol exactly as a ``Parse`` message would; what this file adds is the stream's own
framing: keys, the table of open sessions, the stream's limits, where each session's output or
status goes in the reply, and the packed form of both. The servicer drives it as it drives a
``SessionProtocol``: ``receive`` returns the reply, or ``NeedModels`` to load first.

A step of a thousand sessions is tens of milliseconds of parsing. ``receiving`` (and
``supplying_models``) apply a message in slices of ``SLICE_ITEMS`` items, pausing between two (a
generator that yields), so a host on an event loop can serve its other streams in between: a
stream's large step then delays the others by one slice, not by the whole step.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from dataclasses import dataclass
from typing import TypeVar

from parsetier import native
from parsetier.messages import Delta
from parsetier.models import Model
from parsetier.protocol import rules
from parsetier.protocol.rules import Limits
from parsetier.protocol.session import SessionCounts, SessionProtocol, refused_wire
from parsetier.status import (
    INTERNAL_MESSAGE,
    Code,
    ProtocolError,
    StatusError,
    error_of,
    exhausted,
    invalid,
    out_of_order,
)
from parsetier_api.v1 import parsetier_pb2 as pb


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """A ``ParseBatchRequest`` the native core read from its bytes (``service/decoding.py``,
    ``read_batch_request``): its entries as a message, its packed items as ``_core.PackedSteps``
    (framing already checked), never Python lists of ids."""

    entries: pb.ParseBatchRequest
    """The request's ``sessions`` (nothing else set)."""
    packed: object | None
    """``_core.PackedSteps``, or None when the request has no ``packed``."""
    size: int
    """The request's size in bytes."""
    stepped: object | None = None
    """The entries again, as the core steps them (``_core.PackedSteps`` of the entries: their
    keys, and the ids of each entry that is nothing but steps of token ids), or None (no
    entries, or one the core's reader left to protobuf): ``BatchProtocol._apply_entries``."""

    @property
    def sessions(self):
        return self.entries.sessions


BatchRequest = pb.ParseBatchRequest | ReadBatch


@dataclass(frozen=True, slots=True)
class NeedModels:
    """The message opens sessions of models this stream has not used yet: load each and pass
    them (or the exception its load raised) to ``BatchProtocol.supply_models``."""

    names: tuple[str, ...]


class BatchHooks:
    """What a ``BatchProtocol`` asks of its host when sessions begin and end; the defaults
    admit everything and forget. The servicer's hooks count sessions in the server's gate and
    log each session's end (written at ``flush``)."""

    def new_counts(self) -> SessionCounts:
        return SessionCounts()

    def admit(self) -> None:
        """Raise ``ProtocolError`` to refuse a new session (the server is full or draining)."""

    def ended(self, counts: SessionCounts, error: ProtocolError | None, admitted: bool) -> None:
        """A session ended: finished (``error`` None), failed, cancelled or cut with its stream."""

    def flush(self) -> None:
        """A client message was applied (or the stream closed): what ``ended`` put off may go out
        now, once per message rather than per session (the servicer's ``session_end`` lines and
        metrics), before the message's reply is returned."""


SLICE_ITEMS = 64
"""Items (entries and packed steps) applied between two pauses of ``receiving``: about a
millisecond of parsing at one token each."""

BatchReply = pb.ParseBatchResponse | bytes
"""A message's reply: a ``ParseBatchResponse``, or its serialized bytes when the core wrote part
of it (the core's bytes go to the wire as they are: ``service/decoding.py``'s serializer passes
bytes through)."""

T = TypeVar("T")
Slices = Generator[None, None, T]
"""Work done in slices: each ``next`` applies one, and the generator returns the result."""


def to_the_end(work: Slices[T]) -> T:
    """Run sliced work with no pause: its result."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value


CANCELLED_BY_CLIENT = "the client cancelled the session"


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
        """The open sessions: ``_open`` adds one and ``_drop`` removes it, ``table`` with them."""
        self.table = None if native._core is None else native._core.SessionTable()
        """The same sessions as the native core finds them (``_core.SessionTable``: key bytes →
        native ledger) for the packed path; None without a core."""
        self.models: dict[str, Model] = {}
        """Models this stream's sessions use, looked up once per stream."""
        self.client_messages = 0
        self._pending: BatchRequest | None = None
        self._load_errors: dict[str, BaseException] = {}

    # ------------------------------------------------------------------ input
    def receive(self, message: BatchRequest) -> NeedModels | pb.ParseBatchResponse:
        """One client message (one engine step): the reply, or the models to load first."""
        reply = to_the_end(self.receiving(message))
        return reply if isinstance(reply, NeedModels) else as_message(reply)

    def supply_models(self, loaded: dict[str, Model | BaseException]) -> pb.ParseBatchResponse:
        """The models ``NeedModels`` named, or the exception each load raised (that name's opens
        fail with its status; nothing else does)."""
        return as_message(to_the_end(self.supplying_models(loaded)))

    def receiving(self, message: BatchRequest) -> Slices[NeedModels | BatchReply]:
        """``receive``, applied in slices of ``SLICE_ITEMS`` (nothing else may drive this
        protocol until the work is done); the reply may be its bytes (``BatchReply``)."""
        try:
            return (yield from self._receiving(message))
        finally:
            self.hooks.flush()

    def _receiving(self, message: BatchRequest) -> Slices[NeedModels | BatchReply]:
        self.client_messages += 1
        entries = self._entries_of(message)
        items = len(entries) + _packed_items(message)
        if items > self.limits.max_items_per_message:
            limit = self.limits.max_items_per_message
            raise exhausted(f"{items} session entries in one message; the limit is {limit}")
        models, sessions = self.models, self.sessions
        # Only an entry of a key with no open session can open one (an Open for an open session
        # is refused before it needs a model; a packed item never opens), so the usual entry
        # costs no Open check here (its key is read first); with the core's reading of the
        # entries, only those that carry an Open are looked at.
        stepped = self._stepped(message)
        opening = entries if stepped is None else (entries[i] for i in stepped.opening)
        missing = {
            name
            for e in opening
            if e.key not in sessions and e.HasField("open") and (name := e.open.model) not in models
        }
        if missing:
            self._pending = message
            return NeedModels(tuple(sorted(missing)))
        return (yield from self._apply(message, entries))

    def supplying_models(self, loaded: dict[str, Model | BaseException]) -> Slices[BatchReply]:
        """``supply_models``, applied in slices of ``SLICE_ITEMS``."""
        message, self._pending = self._pending, None
        if message is None:
            raise RuntimeError("supply_models without a pending message")
        for name, model in loaded.items():
            if isinstance(model, BaseException):
                self._load_errors[name] = model
            else:
                self.models[name] = model
        try:
            return (yield from self._apply(message, self._entries_of(message)))
        finally:
            self._load_errors.clear()
            self.hooks.flush()

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
        if self.table is not None:
            self.table.clear()
        for protocol in sessions.values():
            protocol.fail(error)
            self.hooks.ended(protocol.counts, error, True)
        self.hooks.flush()

    # ------------------------------------------------------------------ rules
    def _stepped(self, message: BatchRequest):
        """The message's entries as the core steps them (``ReadBatch.stepped``), when this
        stream's sessions are the core's to step; else None (Python applies every entry)."""
        if type(message) is not ReadBatch or not rules.core_batches():
            return None
        return message.stepped

    def _entries_of(self, message: BatchRequest):
        """The message's entries: a list, or the message's own repeated field when the core
        steps them (``_stepped``: Python then reads only the entries it applies, by index)."""
        return list(message.sessions) if self._stepped(message) is None else message.sessions

    def _apply(self, message: BatchRequest, entries) -> Slices[BatchReply]:
        packed = _packed_of(message)
        stepped = self._stepped(message)
        keys: list[str] | None = None
        if stepped is not None:  # the core checks the entries' keys with the items' on their bytes
            distinct = stepped.distinct_with_items(None if packed is None else packed.stepper)
        else:
            keys = [entry.key for entry in entries]
            distinct = _distinct(keys) if packed is None else packed.distinct_with(keys)
        if distinct is None:
            raise invalid("every session entry needs a non-empty key")
        response = pb.ParseBatchResponse(client_messages=self.client_messages)
        outputs = response.sessions
        if distinct:
            reply = _Reply(response)
            if stepped is not None:
                yield from self._apply_entries(reply, entries, stepped)
            else:
                for done, (key, entry) in enumerate(zip(keys, entries, strict=True), 1):  # type: ignore[arg-type]
                    self._entry(reply.message.sessions, key, entry, reply)
                    if not done % SLICE_ITEMS:
                        yield
            if packed is not None:
                yield from self._apply_packed(reply, packed)
            return reply.done()
        # A key repeats: its first entry applies and every later one ends the session (packed
        # items then go as the entries they stand for, to be held to the same rule).
        if keys is None:
            entries = list(entries)
            keys = [entry.key for entry in entries]
        seen: set[str] = set()
        items = zip(keys, entries, strict=True)
        if packed is not None:
            pairs = zip(packed.keys, packed.steps(), strict=True)
            items = itertools.chain(items, ((key, _entry_of(key, ids)) for key, ids in pairs))
        for done, (key, entry) in enumerate(items, 1):
            if key in seen:
                error = invalid(f"session {key!r} appears twice in one message")
                self._end_with(outputs, key, self.sessions.get(key), error)
            else:
                seen.add(key)
                self._entry(outputs, key, entry)
            if not done % SLICE_ITEMS:
                yield
        return response

    def _entry(self, outputs, key: str, entry: pb.SessionInput, reply: _Reply | None = None) -> None:
        """Apply one session's entry; its output (or the status that ended it) goes in ``outputs``
        (the reply's message), or with ``reply``, a plain Finish's or an opening entry's plain
        step's as the core's bytes (``SessionProtocol.finish_serialized``, ``receive_with``)."""
        sessions = self.sessions
        protocol = sessions.get(key)
        if entry.cancel:
            if protocol is not None:
                self._end_with(outputs, key, protocol, ProtocolError(Code.CANCELLED, CANCELLED_BY_CLIENT))
            return  # cancelling a session that already ended is a harmless race
        opening = None
        if protocol is None:
            if not entry.HasField("open"):
                error = out_of_order(f"no open session {key!r}: its first entry must carry open")
                _status(outputs, key, error)
                return
            opening = entry.open
            protocol = self._open(outputs, key, opening)
            if protocol is None:
                return
        elif reply is not None:
            try:
                finished = protocol.finish_serialized(entry, key)
            except Exception as exc:
                self._end_with(outputs, key, protocol, _session_error(exc))
                return
            if finished is not None:
                reply.add(finished)
                self._drop(key)
                self.hooks.ended(protocol.counts, None, True)
                return
        # The session's output is added only when Python writes one (``Into``): not for a reply
        # of nothing or of the core's bytes.
        written = len(outputs)
        try:
            # With ``reply``, an opening entry's plain step may be answered by the core (its bytes).
            answer = None if reply is None else key
            if opening is None:
                done = protocol.receive_with(entry, self._model, outputs.add, answer)
            else:  # the session's protocol is new: the Open read above opens it
                done = protocol.open_with(entry, opening, self._model, outputs.add, answer)
        except Exception as exc:
            del outputs[written:]  # an output begun before the error
            self._end_with(outputs, key, protocol, _session_error(exc))
            return
        response = done.response
        if type(response) is bytes:
            reply.add(response)  # type: ignore[union-attr]  # bytes come only with ``reply``
        elif response is not None:
            response.key = key
        if done.finished:
            self._drop(key)
            self.hooks.ended(protocol.counts, None, True)

    def _apply_entries(self, reply: _Reply, entries, stepped) -> Slices[None]:
        """The entries of a message whose keys are all distinct, in order, when the core read
        them (``ReadBatch.stepped``): a run of entries that are nothing but steps of token ids,
        for sessions the core steps, is one call (each entry the plain message of its ids
        concatenated, as ``SessionProtocol``'s general path feeds them, answered with a whole
        ``SessionOutput`` in its place); every other entry, and one the core leaves (an unknown
        key, a bad id, a limit...), is ``_entry``'s, read from the message by its index."""
        table, limits = self.table, self.limits
        n = len(stepped)
        at = 0
        for lo in range(0, n, SLICE_ITEMS):
            hi = min(n, lo + SLICE_ITEMS)
            while at < hi:
                at, why, replies = stepped.step(
                    table, at, hi, limits.max_tokens_per_session, limits.max_steps_per_message
                )
                if replies:
                    reply.add(replies)
                if at == hi:
                    break
                entry = entries[at]
                key = entry.key
                if why == _CORE_FAILED:
                    error = ProtocolError(Code.INTERNAL, INTERNAL_MESSAGE)
                    self._end_with(reply.message.sessions, key, self.sessions.get(key), error)
                else:
                    self._entry(reply.message.sessions, key, entry, reply)
                at += 1
            if hi < n:
                yield

    def _apply_packed(self, reply: _Reply, packed: Packed) -> Slices[None]:
        """The packed items of a message whose keys are all distinct (after its entries):
        each exactly as the entry it stands for, with replies that are one plain text delta
        written packed. Sessions on the native core are stepped by it, a slice's items in one
        call (``_core.PackedSteps``: no Python per item); the items it leaves (any other
        session, an unknown key, a bad id, a limit...) take ``_packed_item`` in their turn."""
        stepper = packed.native() if rules.core_batches() else None
        plain = _PlainOutputs()
        n = len(packed)
        for lo in range(0, n, SLICE_ITEMS):
            hi = min(n, lo + SLICE_ITEMS)
            if stepper is None:
                for at in range(lo, hi):
                    self._packed_item(reply.message, plain, packed.key(at), packed.ids_of(at))
            else:
                self._packed_native(reply, plain, packed, stepper, lo, hi)
            if hi < n:
                yield
        plain.flush(reply.message)

    def _packed_native(
        self, reply: _Reply, plain: _PlainOutputs, packed: Packed, stepper, lo: int, hi: int
    ) -> None:
        """Items ``lo..hi``: runs stepped natively, each item the core leaves applied in Python."""
        table, max_tokens = self.table, self.limits.max_tokens_per_session
        at = lo
        while at < hi:
            at, why, replies = stepper.step(table, at, hi, max_tokens)
            if replies:
                plain.flush(reply.message)  # the Python path's packed outputs came first
                reply.add(replies)
            if at == hi:
                return
            key = packed.key(at)
            if why == _CORE_FAILED:
                error = ProtocolError(Code.INTERNAL, INTERNAL_MESSAGE)
                self._end_with(reply.message.sessions, key, self.sessions.get(key), error)
            else:
                self._packed_item(reply.message, plain, key, packed.ids_of(at))
            at += 1

    def _packed_item(
        self, response: pb.ParseBatchResponse, plain: _PlainOutputs, key: str, ids: list[int]
    ) -> None:
        """One packed item by the Python path: exactly the entry it stands for, its reply packed
        into ``plain`` when it is one plain text delta."""
        outputs = response.sessions
        protocol = self.sessions.get(key)
        if protocol is None or not protocol.takes_ids(ids):
            self._entry(outputs, key, _entry_of(key, ids))  # the rules' other cases
            return
        try:
            taken = protocol.take_ids(ids)
        except Exception as exc:
            self._end_with(outputs, key, protocol, _session_error(exc))
            return
        if taken is None:
            return
        deltas, events, wire = taken
        delta = rules.packed_delta(deltas, events, wire)
        if delta is not None:
            ledger = protocol.ledger
            plain.add(key, ledger.sequence, ledger.client_messages, delta, ledger.digest)
            return
        protocol.write(outputs.add(key=key), deltas, events, wire)

    def _open(self, outputs, key: str, open_: pb.Open) -> SessionProtocol | None:
        """A new session for ``key`` (its first entry's Open: ``open_``), or None when it is
        refused (answered in ``outputs``)."""
        counts = self.hooks.new_counts()
        if len(self.sessions) >= self.limits.max_sessions_per_stream:
            error = exhausted(
                f"the stream has {len(self.sessions)} open sessions; the limit is "
                f"{self.limits.max_sessions_per_stream}"
            )
            return self._refuse(outputs, key, open_, counts, error)
        try:
            self.hooks.admit()
        except ProtocolError as error:
            return self._refuse(outputs, key, open_, counts, error)
        protocol = SessionProtocol(self.limits, counts)
        self.sessions[key] = protocol
        if self.table is not None:
            self.table.add(key, protocol.ledger)
        return protocol

    def _refuse(self, outputs, key: str, open_: pb.Open, counts: SessionCounts, error: ProtocolError) -> None:
        """A refused open: its status, and its ``session_end`` with the model and request id it
        named (an accepted one's protocol reads them: ``open_with``)."""
        counts.model, counts.request_id = open_.model, open_.request_id
        counts.ledger.count_message(0)
        _status(outputs, key, error, refused_wire(open_, error.code.name, error.message))
        self.hooks.ended(counts, error, False)
        return None

    def _model(self, name: str) -> Model:
        error = self._load_errors.get(name)
        if error is not None:
            raise error
        return self.models[name]

    def _end_with(self, outputs, key: str, protocol: SessionProtocol | None, error: ProtocolError) -> None:
        """End a session with ``error`` and say so in the reply (in its wire dialect too, if it
        asked for one)."""
        wire = protocol.error_wire(error.code.name, error.message) if protocol is not None else b""
        _status(outputs, key, error, wire)
        if protocol is not None and self.sessions.get(key) is protocol:
            self._drop(key)
            protocol.fail(error)
            self.hooks.ended(protocol.counts, error, True)

    def _drop(self, key: str) -> None:
        """``key``'s session leaves the stream, and the core's table with it."""
        del self.sessions[key]
        if self.table is not None:
            self.table.remove(key)


def _distinct(keys: list[str]) -> bool | None:
    """None when a key is empty, else whether no key repeats."""
    if not all(keys):
        return None
    return len(set(keys)) == len(keys)


def _packed_items(message: BatchRequest) -> int:
    if isinstance(message, ReadBatch):
        return 0 if message.packed is None else len(message.packed)
    return len(message.packed.keys)


def _packed_of(message: BatchRequest) -> Packed | None:
    if isinstance(message, ReadBatch):
        return None if message.packed is None else Packed.read(message.packed)
    return Packed.of(message.packed) if message.HasField("packed") else None


class Packed:
    """A message's packed items (``PackedSteps``), checked as framing: their keys and, per key,
    its token ids."""

    __slots__ = ("_keys", "counts", "ids", "offsets", "stepper")

    def __init__(self, keys: list[str] | None, counts: list[int], ids: list[int]) -> None:
        self._keys, self.counts, self.ids = keys, counts, ids
        self.offsets: list[int] | None = None
        """Item ``i``'s ids are ``ids[offsets[i]:offsets[i + 1]]`` (made when first needed)."""
        self.stepper = None
        """The items as ``_core.PackedSteps`` when the core read them (then ``counts`` and ``ids``
        are empty: ``ids_of`` and ``key`` ask the core, and the keys are Python ``str``s only
        for the items Python applies)."""

    @classmethod
    def read(cls, stepper) -> Packed:
        """The items the core read (``ReadBatch.packed``)."""
        packed = cls(None, [], [])
        packed.stepper = stepper
        return packed

    def __len__(self) -> int:
        return len(self.stepper) if self._keys is None else len(self._keys)

    @property
    def keys(self) -> list[str]:
        """Every item's key (made once, when first needed, for items the core read)."""
        if self._keys is None:
            self._keys = self.stepper.keys
        return self._keys

    def key(self, item: int) -> str:
        """Item ``item``'s key."""
        return self.stepper.key(item) if self._keys is None else self._keys[item]

    def distinct_with(self, keys: list[str]) -> bool | None:
        """``_distinct`` of ``keys`` (the entries') and the items' keys; the core checks the keys
        it read, with no ``str`` per item."""
        if self._keys is None:
            return self.stepper.distinct(keys)
        return _distinct(keys + self._keys)

    @classmethod
    def of(cls, packed: pb.PackedSteps) -> Packed:
        keys, counts, ids = list(packed.keys), list(packed.token_counts), list(packed.token_ids)
        if counts and len(counts) != len(keys):
            raise invalid(f"packed: {len(counts)} token_counts for {len(keys)} keys")
        expected = sum(counts) if counts else len(keys)
        if expected != len(ids):
            raise invalid(f"packed: the items take {expected} token_ids, and {len(ids)} came")
        return cls(keys, counts, ids)

    def ids_of(self, item: int) -> list[int]:
        """Item ``item``'s token ids."""
        if self.stepper is not None:
            return self.stepper.ids_of(item)
        if not self.counts:
            return self.ids[item : item + 1]
        if self.offsets is None:
            self.offsets = list(itertools.accumulate(self.counts, initial=0))
        return self.ids[self.offsets[item] : self.offsets[item + 1]]

    def steps(self) -> list[list[int]]:
        """Each item's token ids."""
        return [self.ids_of(i) for i in range(len(self))]

    def native(self):
        """The items as the native core steps them (``_core.PackedSteps``); None without a core."""
        if self.stepper is not None:
            return self.stepper
        core = native._core
        return None if core is None else core.PackedSteps(self.keys, self.ids, self.counts)


class _Reply:
    """A reply made of the core's bytes and Python's message, in the items' order: the
    concatenation of serialized messages is their merge (repeated fields append, ``packed``'s
    arrays too), so the core's bytes are never parsed into Python and serialized again."""

    __slots__ = ("chunks", "message")

    def __init__(self, message: pb.ParseBatchResponse) -> None:
        self.message = message
        """What Python adds next (outputs, statuses, ``_PlainOutputs.flush``)."""
        self.chunks: list[bytes] = []

    def add(self, data: bytes) -> None:
        """The core's bytes, after what Python wrote so far (a message Python wrote nothing in
        stays the one it writes in next: consecutive core replies cost no message each)."""
        message = self.message
        if message.ListFields():  # anything written (``ByteSize`` would encode it to count)
            self.chunks.append(message.SerializeToString())
            self.message = pb.ParseBatchResponse()
        self.chunks.append(data)

    def done(self) -> BatchReply:
        if not self.chunks:
            return self.message
        self.chunks.append(self.message.SerializeToString())
        return b"".join(self.chunks)


def as_message(reply: BatchReply) -> pb.ParseBatchResponse:
    """The reply as a message (sans-IO callers, tests; the servicer sends bytes as they are)."""
    return pb.ParseBatchResponse.FromString(reply) if isinstance(reply, bytes) else reply


class _PlainOutputs:
    """Packed outputs the Python path made (``PackedOutputs``' arrays), written in order with the
    core's: ``flush`` before the core's replies are merged, and at the end."""

    __slots__ = ("digests", "keys", "messages", "reasoning", "sequences", "texts")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.sequences: list[int] = []
        self.messages: list[int] = []
        self.texts: list[str] = []
        self.reasoning: list[bool] = []
        self.digests: list[int] = []

    def add(self, key: str, sequence: int, client_messages: int, delta: Delta, digest: int) -> None:
        self.keys.append(key)
        self.sequences.append(sequence)
        self.messages.append(client_messages)
        self.texts.append(delta.reasoning or delta.content)
        self.reasoning.append(bool(delta.reasoning))
        self.digests.append(digest)

    def flush(self, response: pb.ParseBatchResponse) -> None:
        if not self.keys:
            return
        out = response.packed
        out.keys.extend(self.keys)
        out.sequences.extend(self.sequences)
        out.client_messages.extend(self.messages)
        out.texts.extend(self.texts)
        out.reasoning.extend(self.reasoning)
        out.output_digests.extend(self.digests)
        for items in (self.keys, self.sequences, self.messages, self.texts, self.reasoning, self.digests):
            items.clear()


_CORE_FAILED = 1
"""``PackedSteps.step``: the item's session failed in the core (a server bug)."""


def _entry_of(key: str, ids: list[int]) -> pb.SessionInput:
    """A packed item as the entry it stands for."""
    entry = pb.SessionInput(key=key)
    if ids:
        entry.steps.add().token_ids.extend(ids)
    return entry


def _session_error(exc: Exception) -> StatusError:
    """The error that ends a multiplexed session; a server bug becomes INTERNAL for that session
    alone (``__cause__`` keeps the exception for the host's log)."""
    error = error_of(exc)
    if error is None:
        error = ProtocolError(Code.INTERNAL, INTERNAL_MESSAGE)
        error.__cause__ = exc
    return error


def _status(outputs, key: str, error: ProtocolError, wire: bytes = b"") -> None:
    """``key``'s session ended with ``error``; ``wire``: that error in its dialect, if it asked."""
    output = outputs.add(key=key)
    output.status.code = int(error.code)
    output.status.message = error.message
    if wire:
        output.status.wire = wire
