"""The rules of a session's messages, as tables: what may come when, what is counted, which
limits hold, which messages take the plain path, and what a reply carries. Every path that
applies a session's messages reads them here: ``SessionProtocol`` (``protocol/session.py``, the
``Parse`` stream, ``ParseOnce``, each ``ParseBatch`` entry), ``BatchProtocol`` (``protocol/batch.py``,
packed items) and, for the plain path, the native core (``parsetier_core/python/src/ledger.rs``).

Theory of operation
-------------------
A session is a state machine over the client's messages (``State``, ``TRANSITIONS``)::

    AWAIT_OPEN ──open──► LOADING ──model──► STREAMING ──finish──► FINISHED
         │                  │                   │
         └────────── any error (a ProtocolError, a session error) ──────► FAILED

Each message is first held to ``ORDER`` (may a message of its shape come in this state?), then
counted, then applied, then answered with at most one reply:

- *counted*: every message the session receives is one ``client_messages`` (empty keep-alives and
  refused opens too) and its token ids are its ``tokens``, in the session's ledger
  (``protocol/ledger.py``: ``count_message``; the tokens of a message applied step by step,
  ``count_tokens``). A reply that carries something takes the next ``sequence`` (``count_reply``).
  ``COUNTS`` names every counter and what moves it.
- *limits*: ``Limits`` holds each counter to its bound (``LIMITED`` names which); past one the
  session ends RESOURCE_EXHAUSTED and nothing else changes.
- *applied*: by one of two paths with the same rules and the same reply. The **plain path**
  takes the engine's usual message: one step of token ids, without logprobs, and nothing else,
  for a STREAMING session (``plain_ids``: the one place that decides it; a packed ``ParseBatch``
  item stands for such a message). It is fed with no step grouping; for a session the core steps
  alone (``core_steps``: a native session that returns no token ids, with no wire dialect) the
  core counts, steps and answers it in one call (``ledger.rs``'s ``step``, shared by the
  ``Parse`` stream and the packed items), declining — nothing done — what it cannot take (a bad
  id, a limit, more than ``FEED_PIECE`` ids), which Python then applies by these same rules. A
  plain Finish (``plain_finish``) is the core's too. Every other message takes the **general
  path**: steps grouped into feed calls (``SessionProtocol._feed``), the Finish applied.
- *answered*: ``REPLY`` lists what a reply carries. Everything one message produced goes into
  one reply; a reply of nothing is not sent. A packed item's reply that is one plain text delta
  is written packed (``packed_delta``), any other as a ``SessionOutput``.

Nothing here reads, writes or sleeps: these are values and pure functions of a message and a
state, cheap enough for the per-message path.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parsetier import convert, native
from parsetier.messages import Delta
from parsetier.status import exhausted
from parsetier.tool_limits import check_tools
from parsetier_api.v1 import parsetier_pb2 as pb


# ---------------------------------------------------------------------------------- states
class State(enum.Enum):
    AWAIT_OPEN = "await_open"
    LOADING = "loading"
    STREAMING = "streaming"
    FINISHED = "finished"
    FAILED = "failed"


TRANSITIONS: dict[tuple[State, str], State] = {
    (State.AWAIT_OPEN, "open"): State.LOADING,
    (State.LOADING, "model"): State.STREAMING,
    (State.STREAMING, "finish"): State.FINISHED,
    # Any state but FINISHED: an error, the client's close before Finish, the idle timeout.
    **{(state, "error"): State.FAILED for state in State if state is not State.FINISHED},
}
"""(state, event) → the next state. An event with no entry is a bug of the caller's."""


def moved(state: State, event: str) -> State:
    """The state after ``event`` (``TRANSITIONS``)."""
    return TRANSITIONS[(state, event)]


# ----------------------------------------------------------------------------------- order
class Shape(enum.Enum):
    """What a message carries, as ``ORDER`` reads it."""

    OPEN = "open"
    """An ``Open`` (with steps or a Finish, or not)."""
    DATA = "data"
    """Steps or a Finish, no ``Open``."""
    EMPTY = "empty"
    """Nothing: a keep-alive."""


def shape_of(message: pb.ParseRequest | pb.SessionInput) -> Shape:
    if message.HasField("open"):
        return Shape.OPEN
    return Shape.DATA if message.steps or message.HasField("finish") else Shape.EMPTY


_FINISHED = "the session is finished; no data may follow Finish"
_FAILED = "the session has already ended with an error"
LOADING_BUG = "receive while the model is loading"
"""``ORDER``'s answer in LOADING: no message may come then (the host waits for the model)."""

ORDER: dict[tuple[State, Shape], str | None] = {
    (State.AWAIT_OPEN, Shape.OPEN): None,
    (State.AWAIT_OPEN, Shape.DATA): "the stream must start with Open before steps or Finish",
    (State.AWAIT_OPEN, Shape.EMPTY): None,
    (State.LOADING, Shape.OPEN): LOADING_BUG,
    (State.LOADING, Shape.DATA): LOADING_BUG,
    (State.LOADING, Shape.EMPTY): LOADING_BUG,
    (State.STREAMING, Shape.OPEN): "the session is already open; Open may only come in the first message",
    (State.STREAMING, Shape.DATA): None,
    (State.STREAMING, Shape.EMPTY): None,
    (State.FINISHED, Shape.OPEN): _FINISHED,
    (State.FINISHED, Shape.DATA): _FINISHED,
    (State.FINISHED, Shape.EMPTY): None,
    (State.FAILED, Shape.OPEN): _FAILED,
    (State.FAILED, Shape.DATA): _FAILED,
    (State.FAILED, Shape.EMPTY): _FAILED,
}
"""(state, shape) → None when a message of that shape may come, else why not (OUT_OF_RANGE;
``LOADING_BUG`` is the host's bug, not the client's)."""


# -------------------------------------------------------------------------- counting, limits
COUNTS: dict[str, str] = {
    "client_messages": "every message received, keep-alives and refused opens too (count_message)",
    "tokens": "a message's token ids, plus the text_tokens of its text steps (count_message, count_tokens)",
    "text_bytes": "UTF-8 bytes of the text steps",
    "sequence": "replies that carried something, 1, 2, 3... (count_reply; a resumed session from its point)",
    "server_messages": "replies sent (count_reply)",
    "deltas": "deltas sent (count_reply)",
    "events": "events sent (count_reply)",
    "replayed": "a resumed session's history token ids, fed silently",
}
"""Each counter a session keeps (``SessionCounts``, its ledger) and what moves it."""

LIMITED: dict[str, str] = {
    "tokens": "max_tokens_per_session",
    "text_bytes": "max_text_bytes_per_session",
    "steps of one message": "max_steps_per_message",
    "prompt_token_ids": "max_tokens_per_session",
    "tools of an Open": "max_tools, max_schema_bytes",
    "a unary reply's bytes": "max_reply_bytes",
}
"""What each per-session ``Limits`` field bounds (the stream's and the server's are in ``Limits``)."""


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
    is sent in parts (``parsetier.protocol.framing.in_parts``); a unary one (``ParseOnce``) cannot
    be, and ends the call with RESOURCE_EXHAUSTED instead of a message the client cannot receive."""
    max_loop_lag: float = 0.1
    """Seconds the event loop may run behind before new sessions are refused (0: never)."""
    max_watch_streams: int = 256
    """Health Watch and reflection streams open at once (each kind counted on its own)."""
    max_prompt_tokens: int = 1_048_576
    """Longest prompt ``Render`` gives (INVALID_ARGUMENT beyond, with both numbers)."""
    trust_request_templates: bool = False
    """Whether ``Render`` renders a chat template the request brings (sandboxed and bounded as
    the models' own); off: such a request is PERMISSION_DENIED."""
    max_buffered_bytes: int = 1024 * 1024 * 1024
    """Bytes of client input and unsent replies the server holds across all streams
    (``service/budget.py``); ``parsetier serve`` defaults it to a quarter of the memory."""
    max_tools: int = 1024
    """Tools in one request's ``Open`` (INVALID_ARGUMENT beyond: ``parsetier.tool_limits``)."""
    max_schema_bytes: int = 64 * 1024
    """Bytes of one tool's JSON (its parameters schema) in an ``Open``."""
    constraint_timeout: float = 30.0
    """Seconds a ``BuildConstraint`` may take (DEADLINE_EXCEEDED beyond)."""

    def check_tools(self, open_: pb.Open) -> None:
        """An Open's tools within ``max_tools`` and ``max_schema_bytes`` (INVALID_ARGUMENT)."""
        check_tools(open_, self.max_tools, self.max_schema_bytes)

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

    def check_text(self, total_bytes: int) -> None:
        if total_bytes > self.max_text_bytes_per_session:
            raise exhausted(f"session exceeds {self.max_text_bytes_per_session} bytes of text")


# ------------------------------------------------------------------------------ the paths
FEED_PIECE = 8192
"""Ids per ``Session.feed`` call (the core steps no more in one call: ``bind_rules``). Parsing
is split-invariant, so a long run fed in pieces gives the same output; between pieces the thread
that parses a large message (see the servicer) lets the event loop take the GIL back, which one
long call into the tokenizer would not."""


def only_ids(message: pb.ParseRequest | pb.SessionInput, steps: Sequence[pb.Step] | None = None):
    """The token ids of a message's only step, when it has no logprobs and no Finish follows
    (maybe none: a text step); None for any other message. ``steps``: the message's, when the
    caller has read them. An opening message of this shape is plain once its session started."""
    if steps is None:
        steps = message.steps
    if len(steps) != 1 or message.HasField("finish"):
        return None
    step = steps[0]
    return None if step.HasField("logprobs") else step.token_ids


def plain_ids(state: State, message: pb.ParseRequest | pb.SessionInput) -> Sequence[int] | None:
    """The token ids of a plain message, None for any other: **the** rule of which messages
    take the plain path. Plain is the engine's usual message: one step of token ids without
    logprobs for a STREAMING session, carrying nothing else (no Open, no Finish); its reply is
    exactly what the general path would send for it, at a fraction of the cost."""
    if message.HasField("open"):
        return None
    ids = only_ids(message)
    return ids if ids is not None and takes_ids(state, ids) else None


def takes_ids(state: State, ids: Sequence[int]) -> bool:
    """A message of one step of these ids and nothing else (a packed item) takes the plain path."""
    return state is State.STREAMING and len(ids) > 0


def plain_finish(state: State, message: pb.ParseRequest | pb.SessionInput, session: Any) -> str | None:
    """The reason of a plain Finish, None for any other message. Plain is a message carrying a
    Finish and nothing else — a reason a client may give (``convert.FINISH_IN``), no matched stop the final
    result would show — for a STREAMING session the core steps alone (``core_steps``; its
    ``other_choices_usage`` only shows in wire bytes, which such a session has none of). The
    core may still decline it (``NativeSession.finish_reply``: text or logprobs the session
    holds)."""
    if state is not State.STREAMING or message.steps or message.HasField("open"):
        return None
    if not message.HasField("finish"):
        return None
    finish = message.finish
    reason = convert.FINISH_IN.get(finish.reason)  # another: the general path refuses it
    if reason is None or not isinstance(session, native.NativeSession):
        return None
    if session.options.include_stop_text and finish.WhichOneof("matched_stop") is not None:
        return None
    return reason


def core_steps(ledger: Any, session: Any, renderer: Any) -> bool:
    """Whether the core may step this session's plain messages alone (its ledger bound to the
    session, ``Ledger.bind``): a native session that returns no token ids, with no wire dialect
    (``renderer`` None), whose ledger is native. Any other session's messages stay Python's."""
    core = native._core
    return (
        core is not None
        and isinstance(ledger, core.Ledger)
        and isinstance(session, native.NativeSession)
        and session._parse_only
        and renderer is None
    )


def core_batches() -> bool:
    """Whether a ``ParseBatch`` stream's sessions are the core's to look up and step (its
    ``SessionTable``, ``PackedSteps``): the native engine serves, with its core built."""
    return native._core is not None and native.engine() == "native"


# ------------------------------------------------------------------------------ the reply
REPLY: dict[str, str] = {
    "sequence": "always: the ledger's (this reply's number)",
    "client_messages": "always: the ledger's",
    "output_digest": "always: the ledger's, after this reply's output",
    "deltas": "what the message produced, when Open.output asked for deltas",
    "events": "what the message produced, when Open.output asked for events",
    "wire": "the deltas in the session's wire dialect, when Open.wire asked for one",
    "final": "the final result, after a Finish (with Final.wire in the dialect)",
}
"""The fields of a reply (``SessionProtocol.write``, and the core's ``reply.rs`` writer): a reply
carrying no deltas, events, wire bytes or final result is not sent."""


def packed_delta(deltas: Sequence[Delta], events: Sequence[Any], wire: bytes) -> Delta | None:
    """The delta a packed item's reply is written as, packed (``PackedOutputs``): its only one,
    when it is plain text (reasoning or content, not both; no tool call, logprobs or token ids)
    and nothing else goes with it. None: the reply is a ``SessionOutput``."""
    if events or wire or len(deltas) != 1:
        return None
    delta = deltas[0]
    if delta.tool_calls or delta.logprobs or delta.token_ids or (delta.reasoning and delta.content):
        return None
    return delta


if native._core is not None:
    native._core.bind_rules(FEED_PIECE)
