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
stream would have given, in the same order, exactly once.
"""

from __future__ import annotations

from collections import deque

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.resume import History, Progress


class _Session:
    """One session as the caller opened it: its history (the open entry is message 0, with the
    steps and finish it carried), what has been received of it, and which of its messages belong
    to steps not delivered yet (``tail``: (message index, step), oldest first)."""

    __slots__ = ("cancelled", "first", "history", "key", "opened_at", "progress", "sending", "tail")

    def __init__(self, key: str, entry: pb.SessionInput, step: int) -> None:
        self.key = key
        self.history = History(entry.open)
        self.first: pb.ParseRequest | None = None
        """The steps and finish the open entry carried (the server counts them as its message 1)."""
        if _carries(entry):
            self.first = pb.ParseRequest(steps=entry.steps)
            if entry.HasField("finish"):
                self.first.finish.CopyFrom(entry.finish)
        self.progress = Progress()
        self.opened_at = step
        self.tail: deque[tuple[int, int]] = deque([(0, step)])
        self.sending = not entry.HasField("finish")
        """Entries may still follow (no finish or cancel sent yet)."""
        self.cancelled = False

    def messages(self) -> int:
        """Entries sent so far (a cancel included)."""
        return len(self.history) + self.cancelled

    def add(self, entry: pb.SessionInput, step: int, delivered: int) -> None:
        """Entry sent in ``step`` (steps up to ``delivered`` have had their replies)."""
        index = len(self.history) + self.cancelled
        tail = self.tail
        while tail and tail[0][1] <= delivered:  # only undelivered steps need their entries' steps
            tail.popleft()
        tail.append((index, step))
        steps = entry.steps
        if (
            len(steps) == 1
            and not (entry.cancel or entry.HasField("finish") or entry.HasField("open"))
            and steps[0].token_ids
            and not steps[0].HasField("logprobs")
        ):  # the usual entry: one step of token ids
            self.history.record_ids(steps[0].token_ids)
            return
        if entry.cancel:
            self.cancelled, self.sending = True, False
        else:
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

    def step_of(self, index: int, delivered: int) -> int:
        """The step entry ``index`` was sent in, or 0 when that step's reply was delivered."""
        tail = self.tail
        while tail and tail[0][1] <= delivered:
            tail.popleft()
        for message, step in tail:
            if message == index:
                return step
        return 0


def _carries(entry: pb.SessionInput) -> bool:
    return bool(entry.steps) or entry.HasField("finish")


class _Step:
    """A step sent whose reply the caller has not received: its entries' keys in order, the outputs
    gathered for it so far, and the reply on the current stream after which it is complete."""

    __slots__ = ("keys", "orphans", "outputs", "until")

    def __init__(self, keys: list[str], until: int) -> None:
        self.keys = keys
        self.outputs: dict[str, pb.SessionOutput] = {}
        self.until = until
        self.orphans: list[pb.SessionInput] = []
        """Entries for keys without a live session (answered with a status): re-sent as they are."""


Carried = dict[str, tuple["_Session | None", int, bool]]
"""What one message on the current stream carries: key -> (its session, the step it answers,
whether the entry opens the session)."""

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
        self._carried: deque[Carried] = deque()
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
        delivered = self.delivered
        self._step += 1
        step = self._step
        self._sent += 1
        carried: Carried = {}
        record = _Step([entry.key for entry in message.sessions], self._sent)
        live = self._live
        for entry in message.sessions:
            key = entry.key
            session = live.get(key)
            opens = entry.HasField("open") and not entry.cancel and (session is None or not session.sending)
            if opens:
                if session is not None:
                    self._retiring.append(session)
                session = live[key] = _Session(key, entry, step)
            elif session is not None:
                session.add(entry, step, delivered)
            elif not entry.cancel:  # a cancel of no live session answers nothing: nothing to re-send
                record.orphans.append(entry)
            carried[key] = (session, step, opens)
        self._steps.append(record)
        self._carried.append(carried)

    def received(self, reply: pb.ParseBatchResponse) -> None:
        """A reply of the current stream: its outputs go to the steps they answer."""
        carried = self._carried.popleft()
        self._received += 1
        if self._moving:
            self._moving = False
            self.resumes += 1
        delivered = self.delivered
        for output in reply.sessions:
            session, step, opens = carried.get(output.key, (None, 0, False))
            if opens and output.status.code == UNAVAILABLE:
                # Refused because this server is draining or overloaded: not the session's own
                # error. It stays live, and the stream moves (``must_move``): another server opens it.
                self.must_move = True
                continue
            if session is not None:
                if output.sequence:
                    session.progress.received(output)  # type: ignore[arg-type]
                if output.HasField("final") or output.HasField("status"):
                    self._ended(session)
            if step > delivered:
                self._steps[step - delivered - 1].outputs[output.key] = output

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
        return {key: outputs[key] for key in step.keys if key in outputs}

    def replay(self) -> list[pb.ParseBatchRequest]:
        """The messages that start a new stream: every live session re-opened at its resume
        point with its history, and the unanswered entries of keys without one. The current
        stream is then the new one (its replies go to ``received``)."""
        self._moving, self.must_move = True, False
        delivered = self.delivered
        # Per key, its entries in the order they were first sent: sessions (a retiring one before
        # the key's new one) and entries of no session, each group starting at the step it began.
        groups: list[tuple[int, str, list[tuple[_Session | None, int, int]]]] = []
        for session in [*self._retiring, *self._live.values()]:
            items = [(session, i, session.step_of(i, delivered)) for i in range(session.messages())]
            groups.append((session.opened_at, session.key, items))
        for number, step in enumerate(self._steps, delivered + 1):
            groups.extend((number, entry.key, [(None, k, number)]) for k, entry in enumerate(step.orphans))
        groups.sort(key=lambda group: group[0])
        lanes: dict[str, list[tuple[_Session | None, int, int]]] = {}
        for _, key, items in groups:
            lanes.setdefault(key, []).extend(items)
        self._carried.clear()
        last_of: dict[int, int] = {}
        """Step -> the replay message (1-based) that carries its last entry."""
        messages: list[pb.ParseBatchRequest] = []
        depth = max((len(lane) for lane in lanes.values()), default=0)
        for j in range(depth):
            message = pb.ParseBatchRequest()
            carried: Carried = {}
            for key, lane in lanes.items():
                if j < len(lane):
                    session, index, step = lane[j]
                    if session is not None:
                        message.sessions.append(session.entry(index))
                    else:
                        message.sessions.append(self._steps[step - delivered - 1].orphans[index])
                    carried[key] = (session, step, session is not None and index == 0)
                    if step:
                        last_of[step] = j + 1
            messages.append(message)
            self._carried.append(carried)
        self._sent, self._received = len(messages), 0
        until = 0
        for number, step in enumerate(self._steps, delivered + 1):
            until = max(until, last_of.get(number, 0))  # complete after its last re-sent entry
            step.until = until
        return messages
