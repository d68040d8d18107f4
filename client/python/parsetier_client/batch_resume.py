"""Resume for the batch API: what a ``ParseBatch`` stream's sessions need to move, together, to a
new stream. Free of I/O, shared by the sync and async batch clients.

The server resumes each session of a ``ParseBatch`` stream on its own (docs/service.md,
"Resume"): its entry with ``open`` carries its resume point, and its later entries are re-sent
under the same key, one per message, as before. ``BatchLedger`` keeps what that takes for every
live session — its history (token ids, ``resume.History``) and its resume point — plus the steps
whose replies the caller has not received yet. After a break, ``replay()`` gives the messages
that open a new stream: every live session re-opened with its point, its history re-sent, entry
``j`` of every session in message ``j``. The new stream's replies are then sorted back into the
caller's steps (each output carries its key, and every re-sent entry is known to belong to one
step), so the caller receives one reply per step it sent, each with the outputs the uninterrupted
stream would have given, in the same order, exactly once. An entry sent to a session before the
session's end (its final, or its own status) was received, and unanswered at a break, is re-sent
as the entry of no session it then is: the server answers it with the status it gave before.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.packed import outputs_of, packed_steps
from parsetier_client.resume import History, Progress


class _Session:
    """One session as the caller opened it: its history (the open entry is message 0, with the
    steps and finish it carried) and what has been received of it."""

    __slots__ = (
        "cancelled",
        "ended_at",
        "first",
        "history",
        "key",
        "messages",
        "opened_at",
        "progress",
        "sending",
    )

    def __init__(self, key: str, entry: pb.SessionInput, step: int) -> None:
        self.key = key
        self.history = History(entry.open)
        self.first: pb.ParseRequest | None = None
        """The steps and finish the open entry carried (the server counts them as its message 1)."""
        if entry.steps or entry.HasField("finish"):
            self.first = pb.ParseRequest(steps=entry.steps)
            if entry.HasField("finish"):
                self.first.finish.CopyFrom(entry.finish)
        self.progress = Progress()
        self.opened_at = step
        self.messages = 1
        """Entries sent so far (a cancel included)."""
        self.sending = not entry.HasField("finish")
        """Entries may still follow (no finish or cancel sent yet)."""
        self.cancelled = False
        self.ended_at: int | None = None
        """The entry whose output ended it (its final or its status), once received."""

    def add(self, entry: pb.SessionInput) -> None:
        """A later entry (not the usual one of token ids, which ``BatchLedger.sent`` records)."""
        self.messages += 1
        if entry.cancel:
            self.cancelled, self.sending = True, False
            return
        message = pb.ParseRequest(steps=entry.steps)
        if entry.HasField("finish"):
            message.finish.CopyFrom(entry.finish)
            self.sending = False
        if entry.HasField("open"):  # a second open: the server ends the session for it
            message.open.CopyFrom(entry.open)
        self.history.record(message)

    def entry(self, index: int) -> pb.SessionInput:
        """Entry ``index`` as it is re-sent on a new stream (the open with the resume point)."""
        if index == len(self.history):
            return pb.SessionInput(key=self.key, cancel=True)
        if index == 0:
            entry = pb.SessionInput(key=self.key, open=self.history.message(0, self.progress.point()).open)
            if self.first is not None:
                entry.steps.extend(self.first.steps)
                if self.first.HasField("finish"):
                    entry.finish.CopyFrom(self.first.finish)
            return entry
        message = self.history.message(index)
        entry = pb.SessionInput(key=self.key, steps=message.steps)
        for field in ("open", "finish"):
            if message.HasField(field):
                getattr(entry, field).CopyFrom(getattr(message, field))
        return entry


class Carried(NamedTuple):
    """What one entry of a message on the current stream is: its session (None: an entry of no
    session), the step it answers (0: delivered already), its index among the session's entries
    (or among the step's orphans), and whether it opens the session."""

    session: _Session | None
    step: int
    index: int
    opens: bool


class _Step:
    """A step sent whose reply the caller has not received: its entries as first sent (key ->
    ``Carried``, in entry order), the outputs gathered for it so far, and the reply on the
    current stream after which it is complete."""

    __slots__ = ("entries", "orphans", "outputs", "until")

    def __init__(self, entries: dict[str, Carried], orphans: list[pb.SessionInput], until: int) -> None:
        self.entries = entries
        self.orphans = orphans
        """Entries for keys without a live session (answered with a status): re-sent as they are."""
        self.outputs: dict[str, pb.SessionOutput] = {}
        self.until = until


UNAVAILABLE = 14
"""``google.rpc.Code`` of a refused open (the server is draining or overloaded): move instead."""


class BatchLedger:
    """The resume state of one batch stream (see the module docstring). Call ``sent`` for every
    step as it goes out, ``received`` for every reply of the current stream, and take the caller's
    replies from ``ready``; after a break, open a new stream with ``replay()``'s messages."""

    def __init__(self) -> None:
        self._live: dict[str, _Session] = {}
        self._retiring: list[_Session] = []
        """Sessions whose key was opened again after their finish or cancel, but whose end has not
        been received yet (they are replayed before the new one)."""
        self._steps: deque[_Step] = deque()
        self._step = 0
        """Steps sent so far; ``self._step - len(self._steps)`` have been delivered."""
        self._carried: deque[dict[str, Carried]] = deque()
        """Per message sent on the current stream and not answered yet: what its entries are."""
        self._sent = 0
        """Messages sent on the current stream."""
        self._received = 0
        self.resumes = 0
        """Times the sessions moved to a new stream (counted at its first reply: refused
        attempts are not moves)."""
        self._moving = False
        self.must_move = False
        """A reply refused an open with UNAVAILABLE: the client should move to a new stream now."""

    @property
    def delivered(self) -> int:
        return self._step - len(self._steps)

    def sent(self, message: pb.ParseBatchRequest) -> None:
        """The caller's next step goes out on the current stream as ``message``."""
        self._step += 1
        step = self._step
        self._sent += 1
        carried: dict[str, Carried] = {}
        orphans: list[pb.SessionInput] = []
        live = self._live
        for entry in message.sessions:
            key = entry.key
            session = live.get(key)
            steps = entry.steps
            if (
                session is not None
                and len(steps) == 1
                and not (entry.cancel or entry.HasField("finish") or entry.HasField("open"))
            ):
                ids = steps[0].token_ids
                if ids and not steps[0].HasField("logprobs"):  # the usual entry: one step of ids
                    carried[key] = Carried(session, step, session.messages, False)
                    session.messages += 1
                    session.history.record_ids(ids)
                    continue
            opens = entry.HasField("open") and not entry.cancel and (session is None or not session.sending)
            if opens:
                if session is not None:
                    self._retiring.append(session)
                session = live[key] = _Session(key, entry, step)
                carried[key] = Carried(session, step, 0, True)
            elif session is not None:
                carried[key] = Carried(session, step, session.messages, False)
                session.add(entry)
            elif entry.cancel:  # a cancel of no live session answers nothing: nothing to re-send
                carried[key] = Carried(None, step, -1, False)
            else:
                carried[key] = Carried(None, step, len(orphans), False)
                orphans.append(entry)
        for key, ids in packed_steps(message):  # packed items: each the usual entry
            session = live.get(key)
            if session is not None:
                carried[key] = Carried(session, step, session.messages, False)
                session.messages += 1
                session.history.record_ids(ids)
            else:
                carried[key] = Carried(None, step, len(orphans), False)
                orphans.append(pb.SessionInput(key=key, steps=[pb.Step(token_ids=ids)]))
        self._steps.append(_Step(carried, orphans, self._sent))
        self._carried.append(carried)

    def received(self, reply: pb.ParseBatchResponse) -> None:
        """A reply of the current stream: its outputs go to the steps they answer."""
        carried = self._carried.popleft()
        self._received += 1
        if self._moving:
            self._moving = False
            self.resumes += 1
        delivered = self.delivered
        steps = self._steps
        for key, output in outputs_of(reply).items():
            session, step, index, opens = carried.get(key) or (None, 0, 0, False)
            if opens and output.status.code == UNAVAILABLE:
                # Refused because this server is draining or overloaded: not the session's own
                # error. It stays live, and the stream moves (``must_move``): another server opens it.
                self.must_move = True
                continue
            # After a session's end, the server answers its key's entries as those of no session
            # (or of a new session, for an open, numbered from 1): they are not that session's.
            if session is not None and session.ended_at is None:
                if output.sequence:
                    session.progress.received(output)  # type: ignore[arg-type]
                if output.HasField("final") or output.HasField("status"):
                    session.ended_at = index
                    self._ended(session)
            if step > delivered:
                steps[step - delivered - 1].outputs[key] = output

    def _ended(self, session: _Session) -> None:
        if self._live.get(session.key) is session:
            del self._live[session.key]
        elif session in self._retiring:
            self._retiring.remove(session)

    def ready(self) -> dict[str, pb.SessionOutput] | None:
        """The oldest undelivered step's reply, once complete (else None): ``{key: output}`` in
        the order of its entries, as ``outputs_of`` gives an uninterrupted stream's reply."""
        steps = self._steps
        if not steps or steps[0].until > self._received:
            return None
        step = steps.popleft()
        outputs = step.outputs
        return {key: outputs[key] for key in step.entries if key in outputs}

    def replay(self) -> list[pb.ParseBatchRequest]:
        """The messages that start a new stream: every live session re-opened at its resume
        point with its history, and the unanswered entries of keys without one. The current
        stream is then the new one (its replies go to ``received``)."""
        self._moving, self.must_move = True, False
        delivered = self.delivered
        step_of: dict[tuple[int, int], int] = {}
        """(session id, entry index) -> the undelivered step it was sent in."""
        for number, step in enumerate(self._steps, delivered + 1):
            for carried in step.entries.values():
                if carried.session is not None:
                    step_of[id(carried.session), carried.index] = number
        # Per key, its entries in the order they were first sent: sessions (a retiring one before
        # the key's new one) and entries of no session, each group starting at the step it began.
        groups: list[tuple[int, str, list[Carried]]] = []
        for session in [*self._retiring, *self._live.values()]:
            ident = id(session)
            items = [Carried(session, step_of.get((ident, i), 0), i, i == 0) for i in range(session.messages)]
            groups.append((session.opened_at, session.key, items))
        for number, step in enumerate(self._steps, delivered + 1):
            # Entries sent to a session after the one whose output ended it, and not answered
            # yet: the server answers them as entries of no session, so they are re-sent as such
            # (a cancel answers nothing: its index is past the history).
            for key, carried in step.entries.items():
                session = carried.session
                if (
                    session is not None
                    and session.ended_at is not None
                    and session.ended_at < carried.index < len(session.history)
                    and key not in step.outputs
                ):
                    groups.append((number, key, [carried]))
            groups.extend(
                (number, entry.key, [Carried(None, number, k, False)]) for k, entry in enumerate(step.orphans)
            )
        groups.sort(key=lambda group: group[0])
        lanes: dict[str, list[Carried]] = {}
        for _, key, items in groups:
            lanes.setdefault(key, []).extend(items)
        self._carried.clear()
        last_of: dict[int, int] = {}
        """Step -> the replay message (1-based) that carries its last entry."""
        messages: list[pb.ParseBatchRequest] = []
        depth = max((len(lane) for lane in lanes.values()), default=0)
        for j in range(depth):
            message = pb.ParseBatchRequest()
            carried: dict[str, Carried] = {}
            for key, lane in lanes.items():
                if j < len(lane):
                    item = lane[j]
                    if item.session is not None:
                        message.sessions.append(item.session.entry(item.index))
                    else:
                        message.sessions.append(self._steps[item.step - delivered - 1].orphans[item.index])
                    carried[key] = item
                    if item.step:
                        last_of[item.step] = j + 1
            messages.append(message)
            self._carried.append(carried)
        self._sent, self._received = len(messages), 0
        until = 0
        for number, step in enumerate(self._steps, delivered + 1):
            until = max(until, last_of.get(number, 0))  # complete after its last re-sent entry
            step.until = until
        return messages
