"""Resume for the batch API (docs/service.md, "Resume"): one ``resume.Ledger`` per session, its
pending entries tagged with the caller's step they were sent in. The server answers each client
message with one reply, so the reply to message ``j`` answers every entry of message ``j``. After
a break, ``replay()`` re-opens every live session in ONE message (its first pending entry in the
same entry), then each key's other unanswered entries, one message each; entries of no live
session are re-sent as they were. Outputs are sorted back into the caller's steps by their tags.
Free of I/O, shared by the sync and async batch clients.
"""

from __future__ import annotations

from collections import deque

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.packed import outputs_of, packed_steps
from parsetier_client.resume import Ledger, Payload

UNAVAILABLE = 14
"""``google.rpc.Code`` of a refused open (the server is draining or overloaded): move instead."""


class _Session(Ledger):
    """A session's ledger plus its key, the step that opened it, whether entries may still follow
    (no finish or cancel sent yet) and whether its end was received."""

    __slots__ = ("ended", "key", "opened_at", "sending")

    def __init__(self, key: str, entry: pb.SessionInput, step: int) -> None:
        super().__init__(entry.open)
        self.key, self.opened_at = key, step
        self.sending, self.ended = not entry.HasField("finish"), False
        self.sent = 0  # the opening entry is message 1, kept without its open
        finish = entry.finish if entry.HasField("finish") else None
        self.send(pb.SessionInput(key=key, steps=entry.steps, finish=finish), step)


class _Step:
    """A caller's step not delivered yet: its keys in entry order, the outputs gathered for it,
    its entries of no session (re-sent as they are), and the reply on the current stream after
    which it is complete."""

    __slots__ = ("keys", "orphans", "outputs", "until")

    def __init__(self, until: int) -> None:
        self.keys: list[str] = []
        self.until = until
        self.orphans: dict[str, pb.SessionInput] = {}
        self.outputs: dict[str, pb.SessionOutput] = {}


Carried = dict[str, tuple[_Session | None, int, int]]
"""One message on the current stream: key -> (its session or None, the caller's step, the entry's
index in the session on this stream)."""


class BatchLedger:
    """Call ``sent`` for every step as it goes out, ``received`` for every reply of the current
    stream, take the caller's replies from ``ready``; after a break, send ``replay()``'s messages."""

    def __init__(self) -> None:
        self._sessions: list[_Session] = []  # live or with pending entries, in the order opened
        self._live: dict[str, _Session] = {}
        self._steps: deque[_Step] = deque()
        self._step = 0  # steps sent; the first len(self._steps) back are not delivered yet
        self._carried: deque[Carried] = deque()
        self._sent = self._received = 0  # messages on the current stream
        self.resumes = 0
        """Times the sessions moved to a new stream (counted at its first reply)."""
        self._moving = False
        self.must_move = False
        """A reply refused an open with UNAVAILABLE: the client should move to a new stream now."""

    @property
    def delivered(self) -> int:
        return self._step - len(self._steps)

    def sent(self, message: pb.ParseBatchRequest) -> None:
        """The caller's next step goes out on the current stream as ``message``."""
        self._step += 1
        self._sent += 1
        step, live = self._step, self._live
        carried: Carried = {}
        record = _Step(self._sent)
        items: list[tuple[str, Payload]] = [(entry.key, entry) for entry in message.sessions]
        for key, payload in items + packed_steps(message):
            record.keys.append(key)
            session = live.get(key)
            entry = payload if isinstance(payload, pb.SessionInput) else None
            opens = entry is not None and entry.HasField("open") and not entry.cancel
            if opens and (session is None or not session.sending):
                session = live[key] = _Session(key, entry, step)  # type: ignore[arg-type]  # a new session (a reopened key too)
                self._sessions.append(session)
                carried[key] = (session, step, 1)
            elif session is None:
                if entry is None or not entry.cancel:  # a cancel of no session answers nothing
                    record.orphans[key] = session_input(key, payload)
                carried[key] = (None, step, 0)
            else:
                if entry is not None and (entry.cancel or entry.HasField("finish")):
                    session.sending = False
                carried[key] = (session, step, session.send(payload, step))
        self._steps.append(record)
        self._carried.append(carried)

    def received(self, reply: pb.ParseBatchResponse) -> None:
        """A reply of the current stream: it answers every entry of its message."""
        carried = self._carried.popleft()
        self._received += 1
        self.resumes += self._moving
        self._moving = False
        outputs = outputs_of(reply)
        delivered = self.delivered
        for key, (session, step, index) in carried.items():
            output = outputs.get(key)
            if session is not None:
                refused = output is not None and output.status.code == UNAVAILABLE
                if refused and index == 1 and not session.ended:
                    self.must_move = True  # draining or overloaded: it stays pending, another server opens it
                    continue
                if output is not None and output.sequence and not session.ended:
                    session.received(output.sequence, index, output.output_digest)
                else:
                    session.answer(index)
                if output is not None and (output.HasField("final") or output.HasField("status")):
                    self._end(session)
                elif session.ended and not session.pending:
                    self._sessions.remove(session)
            if step > delivered:
                record = self._steps[step - delivered - 1]
                if session is None:
                    record.orphans.pop(key, None)  # answered: never re-sent
                if output is not None:
                    record.outputs[key] = output

    def _end(self, session: _Session) -> None:
        """Its end was received: entries pipelined after it are no longer its (the server answers
        them as entries of no session, or of a new one it opens: numbered from 1)."""
        session.ended = True
        if self._live.get(session.key) is session:
            del self._live[session.key]
        if not session.pending and session in self._sessions:
            self._sessions.remove(session)

    def ready(self) -> dict[str, pb.SessionOutput] | None:
        """The oldest undelivered step's reply, once complete (else None): ``{key: output}`` in
        the order of its entries, as ``outputs_of`` gives an uninterrupted stream's reply."""
        if not self._steps or self._steps[0].until > self._received:
            return None
        step = self._steps.popleft()
        return {key: step.outputs[key] for key in step.keys if key in step.outputs}

    def replay(self) -> list[pb.ParseBatchRequest]:
        """The messages that start a new stream (see the module docstring), which is then current."""
        self._moving, self.must_move = True, False
        Lane = list[tuple[pb.SessionInput, _Session | None, int, int]]
        # Per key, its entries in the order first sent: sessions (one reopened before the key's
        # new one) and entries of no session, ordered by the step each began in.
        groups: list[tuple[int, str, Lane]] = []
        for session in self._sessions:
            pending = session.restart(1)
            lane: Lane = []
            if not session.ended:  # re-opened at its point; the first pending entry rides along
                opening = pb.SessionInput(key=session.key, open=session.point())
                first = session_input(session.key, pending[0][0]) if pending else None
                if first is not None and not (first.cancel or first.HasField("open")):
                    opening.MergeFrom(first)
                    lane.append((opening, session, pending.pop(0)[1], 1))  # type: ignore[arg-type]
                else:
                    session.restart(2)
                    lane.append((opening, session, 0, 1))
            lane += [
                (session_input(session.key, payload), session, tag, i)  # type: ignore[misc]
                for i, (payload, tag) in enumerate(pending, len(lane) + 1)
            ]
            if lane:
                groups.append((session.opened_at, session.key, lane))
        for number, step in enumerate(self._steps, self.delivered + 1):
            groups += [(number, key, [(entry, None, number, 0)]) for key, entry in step.orphans.items()]
        groups.sort(key=lambda group: group[0])
        lanes: dict[str, Lane] = {}
        for _, key, lane in groups:
            lanes.setdefault(key, []).extend(lane)
        self._carried.clear()
        messages: list[pb.ParseBatchRequest] = []
        last_of: dict[int, int] = {}  # step -> the replay message (1-based) with its last entry
        for j in range(max((len(lane) for lane in lanes.values()), default=0)):
            message, carried = pb.ParseBatchRequest(), {}
            for key, lane in lanes.items():
                if j < len(lane):
                    entry, session, tag, index = lane[j]
                    message.sessions.append(entry)
                    carried[key] = (session, tag, index)
                    if tag:
                        last_of[tag] = j + 1
            messages.append(message)
            self._carried.append(carried)
        self._sent, self._received = len(messages), 0
        until = 0
        for number, step in enumerate(self._steps, self.delivered + 1):
            until = step.until = max(until, last_of.get(number, 0))  # after its last re-sent entry
        return messages


def session_input(key: str, payload: Payload) -> pb.SessionInput:
    """A pending entry as it is (re-)sent: a plain run of ids becomes the entry it stands for."""
    if isinstance(payload, pb.SessionInput):
        return payload
    return pb.SessionInput(key=key, steps=[pb.Step(token_ids=payload)])  # type: ignore[arg-type]
