"""The packed ``ParseBatch`` path on the native core (``_core.PackedSteps``, the session's native
ledger) against the reference engine's Python path: random streams of engine steps, replies
byte-identical (digests, sequences, counts and statuses included), and the sessions' end counts
equal — including the items the core leaves to Python in the middle of a slice (unknown keys,
finished and failed sessions, bad ids, a token limit hit, keep-alives, sessions with events, a
wire dialect or token ids), and long messages of several slices.

The protocol is driven sans-IO (``BatchProtocol``) in this process, once per engine; one test
also runs the same stream through two real servers (``serve --engine native`` and ``--engine
reference``) on loopback."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from grpc_servers import ProcessServer
from parsetier import native
from parsetier.models import Model
from parsetier.protocol.batch import SLICE_ITEMS, BatchHooks, BatchProtocol, NeedModels, Packed
from parsetier.protocol.ledger import PyLedger
from parsetier.protocol.rules import Limits
from parsetier.protocol.session import SessionCounts
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from service_samples import WEATHER_TOOLS

OUTPUTS = [
    "<think>\nThe user wants weather. Let me check {i}.\n</think>\n\nSure, checking city {i} now.",
    '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "C{i}", "n": {i}}}}}\n</tool_call>',
    "Plain answer {i} with ünïcödé ✓ and 日本語 text, then more words to stream along.",
    "<think>\nshort {i}\n</think>\n\n"
    '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "X"}}}}\n</tool_call>',
]
OUTPUT_KINDS = [
    pb.OUTPUT_KIND_DELTAS,
    pb.OUTPUT_KIND_DELTAS,
    pb.OUTPUT_KIND_DELTAS,
    pb.OUTPUT_KIND_DELTAS_AND_EVENTS,
    pb.OUTPUT_KIND_EVENTS,
    pb.OUTPUT_KIND_FINAL_ONLY,
]
LIMITS = Limits(max_tokens_per_session=25, max_sessions_per_stream=64, max_items_per_message=400)
BAD_ID = 10**7


def _open(rng: random.Random, key: str) -> pb.Open:
    open_ = pb.Open(model="qwen3", tools_json=json.dumps(WEATHER_TOOLS), request_id=f"req-{key}")
    open_.output = rng.choice(OUTPUT_KINDS)
    special = rng.random()
    if special < 0.08:
        open_.wire.dialect = pb.WIRE_DIALECT_OPENAI_CHAT
        open_.wire.response_id, open_.wire.model, open_.wire.created = "chatcmpl-1", "m", 1
    elif special < 0.14:
        open_.return_token_ids = True
    return open_


def random_stream(encode, seed: int, messages: int = 40) -> list[pb.ParseBatchRequest]:
    """Engine steps of a random schedule: sessions open (with random output options), step by
    packed items of 0 to 3 ids (mostly 1), finish, get cancelled, and are stepped again after
    they ended; unknown keys, bad ids and over-long sessions appear among the items."""
    rng = random.Random(seed)
    pending: dict[str, list[int]] = {}
    ended: list[str] = []
    serial = 0
    stream: list[pb.ParseBatchRequest] = []
    for step in range(messages):
        message = pb.ParseBatchRequest()
        used: set[str] = set()
        for _ in range(rng.randrange(0, 6) if step else 20):
            serial += 1
            key = f"s{serial}"
            message.sessions.add(key=key, open=_open(rng, key))
            pending[key] = encode(rng.choice(OUTPUTS).format(i=serial) * rng.choice((1, 1, 2)))
            used.add(key)
        keys, counts, ids = [], [], []
        live = [k for k in pending if k not in used]
        rng.shuffle(live)
        for key in live:
            roll = rng.random()
            if roll < 0.05 or not pending[key]:
                message.sessions.add(key=key).finish.reason = pb.FINISH_REASON_STOP
                del pending[key]
                ended.append(key)
            elif roll < 0.07:
                message.sessions.add(key=key, cancel=True)
                del pending[key]
                ended.append(key)
            else:
                n = rng.choice((1, 1, 1, 1, 1, 2, 3, 0))
                take, pending[key] = pending[key][:n], pending[key][n:]
                if rng.random() < 0.02:
                    take = [*take, BAD_ID]
                keys.append(key)
                counts.append(len(take))
                ids += take
        for _ in range(rng.randrange(0, 3)):  # ended and never-opened keys, stepped
            key = rng.choice(ended) if ended and rng.random() < 0.7 else f"nobody{rng.randrange(99)}"
            if key not in keys and key not in used:
                keys.append(key)
                counts.append(1)
                ids.append(9707)
        order = list(range(len(keys)))
        rng.shuffle(order)
        message.packed.keys.extend(keys[i] for i in order)
        message.packed.token_counts.extend(counts[i] for i in order)
        for i in order:
            message.packed.token_ids.extend(ids[sum(counts[:i]) : sum(counts[:i]) + counts[i]])
        stream.append(message)
    return stream


class Recorder(BatchHooks):
    """Each session's end: its counts and how it ended."""

    def __init__(self) -> None:
        self.ends: list[tuple] = []

    def ended(self, counts: SessionCounts, error, admitted: bool) -> None:
        self.ends.append(
            (
                counts.request_id,
                error.code if error else None,
                counts.tokens,
                counts.client_messages,
                counts.server_messages,
                counts.deltas,
                counts.events,
                counts.finish_reason,
            )
        )


def run(
    engine: str,
    model,
    stream: list[pb.ParseBatchRequest],
    limits: Limits = LIMITS,
    read: Callable[[pb.ParseBatchRequest], Any] | None = None,
) -> tuple[list[bytes], list[tuple]]:
    """The replies (serialized) and session ends of ``stream`` on ``engine``; ``read``: how each
    message is read first, on that engine (``_read``: as the servicer does)."""
    before = native.engine()
    native.set_engine(engine)
    try:
        hooks = Recorder()
        batch = BatchProtocol(limits, hooks)
        replies = []
        for message in stream:
            reply = batch.receive(read(message) if read is not None else message)
            if isinstance(reply, NeedModels):
                reply = batch.supply_models({name: model for name in reply.names})
            replies.append(reply.SerializeToString(deterministic=True))
        batch.close(batch_closed())
        return replies, sorted(hooks.ends, key=repr)
    finally:
        native.set_engine(before)


def batch_closed():
    from parsetier.status import Code, ProtocolError

    return ProtocolError(Code.CANCELLED, "end of test")


def _shown(reply: bytes) -> pb.ParseBatchResponse:
    return pb.ParseBatchResponse.FromString(reply)


def _code(code: grpc.StatusCode) -> int:
    return code.value[0]


def _count_python_items(monkeypatch) -> list[int]:
    """The id counts of the items ``SessionProtocol.take_ids`` (the Python path) applies, as
    they are applied."""
    from parsetier.protocol.session import SessionProtocol

    taken: list[int] = []
    original = SessionProtocol.take_ids

    def counting(self, ids):
        taken.append(len(ids))
        return original(self, ids)

    monkeypatch.setattr(SessionProtocol, "take_ids", counting)
    return taken


@pytest.fixture(scope="module")
def qwen3(registry):
    model = registry.get("qwen3")
    assert native.native_parts(model) is not None
    return model


@pytest.mark.parametrize("seed", range(6))
def test_packed_replies_equal_on_both_engines(encode, qwen3, seed):
    stream = random_stream(encode, seed)
    native_replies, native_ends = run("native", qwen3, stream)
    reference_replies, reference_ends = run("reference", qwen3, stream)
    for i, (got, want) in enumerate(zip(native_replies, reference_replies, strict=True)):
        assert got == want, (seed, i, _shown(got), _shown(want))
    assert native_ends == reference_ends
    replies = [pb.ParseBatchResponse.FromString(r) for r in native_replies]
    statuses = {o.status.code for r in replies for o in r.sessions if o.HasField("status")}
    # The stream reached the cases the core leaves to Python.
    assert {_code(grpc.StatusCode.RESOURCE_EXHAUSTED), _code(grpc.StatusCode.FAILED_PRECONDITION)} <= statuses
    assert sum(len(r.packed.keys) for r in replies) > 100


def test_the_core_steps_the_common_items(encode, qwen3, monkeypatch):
    """The items of native sessions are stepped by the core (not by ``take_ids``), and a session
    on the reference engine is left to Python whole."""
    taken = _count_python_items(monkeypatch)
    stream = random_stream(encode, 99, messages=20)
    run("native", qwen3, stream)
    packed_items = sum(len(m.packed.keys) for m in stream)
    assert 0 < len(taken) < packed_items // 3  # keep-alives, unknown keys, wire, token ids...
    taken.clear()
    run("reference", qwen3, stream)
    assert len(taken) > packed_items // 2


def test_the_core_answers_the_plain_finishes(encode, qwen3, monkeypatch):
    """Finish entries of sessions the core steps are answered by it (``finish_serialized``'s
    bytes, merged in the reply in their place); the others by ``receive``."""
    from parsetier.protocol.session import SessionProtocol

    answered: list[bool] = []
    original = SessionProtocol.finish_serialized

    def counting(self, message, key=None):
        reply = original(self, message, key)
        if message.HasField("finish"):
            answered.append(reply is not None)
        return reply

    monkeypatch.setattr(SessionProtocol, "finish_serialized", counting)
    run("native", qwen3, random_stream(encode, 98, messages=60))
    assert answered.count(True) > answered.count(False) > 0  # wire, token ids: Python's


def test_a_message_of_many_slices_with_fallbacks_between(encode, qwen3):
    """Several hundred packed items in one message (several slices), with items the core leaves
    to Python scattered through each slice: the outputs keep the items' order."""
    sessions = 3 * SLICE_ITEMS + 17
    ids = encode(OUTPUTS[0].format(i=7) + OUTPUTS[2].format(i=3))
    opening = pb.ParseBatchRequest()
    for i in range(sessions):
        open_ = opening.sessions.add(key=f"k{i}", open=pb.Open(model="qwen3", request_id=f"r{i}")).open
        if i % 29 == 5:
            open_.output = pb.OUTPUT_KIND_DELTAS_AND_EVENTS
        if i % 31 == 7:
            open_.return_token_ids = True
    stream = [opening]
    for step in range(12):
        message = pb.ParseBatchRequest()
        for i in range(sessions):
            message.packed.keys.append(f"k{i}" if (i + step) % 41 else f"ghost{i}")
            message.packed.token_ids.append(ids[(i + step) % len(ids)] if (i * step) % 97 != 3 else BAD_ID)
        stream.append(message)
    native_replies, native_ends = run("native", qwen3, stream)
    reference_replies, reference_ends = run("reference", qwen3, stream)
    assert native_replies == reference_replies
    assert native_ends == reference_ends


def test_python_ledger_is_the_reference_engines():
    before = native.engine()
    native.set_engine("reference")
    try:
        assert isinstance(SessionCounts().ledger, PyLedger)
    finally:
        native.set_engine(before)
    assert isinstance(SessionCounts().ledger, native._core.Ledger)


def _stream_replies(target: str, stream: list[pb.ParseBatchRequest]) -> Iterator[bytes]:
    with grpc.insecure_channel(target) as channel:
        for reply in pb_grpc.ParserServiceStub(channel).ParseBatch(iter(stream), timeout=120):
            yield reply.SerializeToString(deterministic=True)


def test_servers_of_both_engines_answer_alike(encode):
    stream = random_stream(encode, 7, messages=25)
    limits = ("--max-tokens-per-session", "25", "--max-sessions-per-stream", "64")
    replies = {}
    for engine in ("native", "reference"):
        with ProcessServer("--preload", "qwen3", "--engine", engine, *limits) as server:
            replies[engine] = list(_stream_replies(server.target, stream))
    assert replies["native"] == replies["reference"]
    assert len(replies["native"]) == len(stream)


def test_a_session_out_of_streaming_is_left_to_python(qwen3):
    """The core steps a packed item only while its session's ledger holds a native session,
    which ``SessionProtocol`` lets go of as the session leaves STREAMING: a session that failed
    (still in the table) is left to Python's rules, a live one beside it is stepped."""
    from parsetier.status import Code, ProtocolError

    batch = BatchProtocol(LIMITS, Recorder())
    opens = [pb.SessionInput(key=k, open=pb.Open(model="qwen3")) for k in "ab"]
    opening = pb.ParseBatchRequest(sessions=opens)
    if isinstance(batch.receive(opening), NeedModels):
        batch.supply_models({"qwen3": qwen3})
    batch.sessions["a"].fail(ProtocolError(Code.CANCELLED, "gone"))
    items = pb.ParseBatchRequest(packed=pb.PackedSteps(keys=["b", "a"], token_ids=[9707, 9707]))
    _, packed, _ = native._core.read_batch(items.SerializeToString())
    at, _, replies = packed.step(batch.table, 0, 2, LIMITS.max_tokens_per_session)
    assert at == 1 and list(pb.ParseBatchResponse.FromString(replies).packed.keys) == ["b"]


def _table_mirrors(batch: BatchProtocol) -> None:
    """The core's session table holds exactly the stream's open sessions, each with its ledger."""
    assert sorted(batch.table.keys()) == sorted(batch.sessions)
    for key, protocol in batch.sessions.items():
        assert batch.table.get(key) is protocol.ledger


def _on_both_engines(
    stream: list[pb.ParseBatchRequest],
    model: Model,
    stepped: Callable[[BatchProtocol, int], None],
    open_keys: list[str],
) -> dict[str, list[bytes]]:
    """``stream`` read by a ``BatchProtocol`` on each engine (native first); the replies' bytes
    per engine, which must be equal. On the native engine, after each message the core's table
    mirrors the protocol's sessions and ``stepped(batch, i)`` checks what the core stepped; after
    the stream the table holds ``open_keys`` (sorted), and nothing once the stream is closed."""
    replies: dict[str, list[bytes]] = {}
    for engine in ("native", "reference"):
        before = native.engine()
        native.set_engine(engine)
        try:
            batch = BatchProtocol(LIMITS, Recorder())
            got = []
            for i, message in enumerate(stream):
                reply = batch.receive(_read(message))
                if isinstance(reply, NeedModels):
                    reply = batch.supply_models({name: model for name in reply.names})
                got.append(reply.SerializeToString(deterministic=True))
                if engine == "native":
                    _table_mirrors(batch)
                    stepped(batch, i)
            if engine == "native":
                assert sorted(batch.table.keys()) == open_keys
            batch.close(batch_closed())
            if engine == "native":
                assert len(batch.table) == 0
            replies[engine] = got
        finally:
            native.set_engine(before)
    assert replies["native"] == replies["reference"]
    return replies


def _read(message: pb.ParseBatchRequest):
    """The message as the servicer reads it (packed items by the core on the native engine)."""
    from parsetier.service.decoding import read_batch_request

    return read_batch_request(message.SerializeToString())


REPEATED = 4
"""The message of ``_sync_stream`` with a key twice."""


def _sync_stream() -> list[pb.ParseBatchRequest]:
    """Sessions that end in every way (cancelled, finished, failed by a repeated key, cut by the
    close) and keys reused after their end, in the same message and the next."""
    open_ = pb.Open(model="qwen3", tools_json=json.dumps(WEATHER_TOOLS))
    finish = pb.Finish(reason=pb.FINISH_REASON_STOP)
    step = pb.Step(token_ids=[9707])
    return [
        pb.ParseBatchRequest(sessions=[pb.SessionInput(key=k, open=open_) for k in "abcd"]),
        # a cancelled, b finished (the core's plain finish), c and d stepped by the core.
        pb.ParseBatchRequest(
            sessions=[pb.SessionInput(key="a", cancel=True), pb.SessionInput(key="b", finish=finish)],
            packed=pb.PackedSteps(keys=["c", "d"], token_ids=[9707, 9707]),
        ),
        # a and b reopened with a first step; a packed item for an ended key of no session.
        pb.ParseBatchRequest(
            sessions=[
                pb.SessionInput(key="a", open=open_, steps=[step]),
                pb.SessionInput(key="b", open=open_),
            ],
            packed=pb.PackedSteps(keys=["c", "ghost"], token_ids=[9707, 9707]),
        ),
        # the reopened sessions stepped packed.
        pb.ParseBatchRequest(packed=pb.PackedSteps(keys=["a", "b", "c", "d"], token_ids=[9707] * 4)),
        # c cancelled and then stepped in the same message (its key twice: the item ends nothing
        # more), d finished by an entry and stepped too.
        pb.ParseBatchRequest(
            sessions=[pb.SessionInput(key="c", cancel=True), pb.SessionInput(key="d", finish=finish)],
            packed=pb.PackedSteps(keys=["c", "a", "d"], token_ids=[9707] * 3),
        ),
        # c and d reopened in one message, stepped packed in the next.
        pb.ParseBatchRequest(sessions=[pb.SessionInput(key=k, open=open_) for k in "cd"]),
        pb.ParseBatchRequest(packed=pb.PackedSteps(keys=["d", "c", "a", "b"], token_ids=[9707] * 4)),
    ]


def test_the_session_table_follows_the_streams_sessions(qwen3, monkeypatch):
    """``BatchProtocol``'s native table (key bytes → ledger, what the core looks packed items up
    in) changes with its sessions: a key cancelled, finished, failed or cut by the close leaves
    it, a key reopened comes back with its new session's ledger, and the core steps the reopened
    sessions' items. The replies are the reference engine's, byte for byte."""
    taken = _count_python_items(monkeypatch)

    def stepped(batch: BatchProtocol, i: int) -> None:
        # The core stepped every packed item of a live session (a message with a repeated key
        # goes to Python whole, as the entries it stands for).
        assert taken == ([1] if i == REPEATED else []), i
        taken.clear()

    replies = _on_both_engines(_sync_stream(), qwen3, stepped, list("abcd"))
    shown = [_shown(r) for r in replies["native"]]
    assert list(shown[3].packed.keys) == ["a", "b", "c", "d"]  # the reopened keys, stepped
    assert list(shown[6].packed.keys) == ["d", "c", "a", "b"]
    statuses = [(o.key, o.status.message) for o in shown[REPEATED].sessions if o.HasField("status")]
    assert statuses == [
        ("c", "the client cancelled the session"),
        ("c", "session 'c' appears twice in one message"),
        ("d", "session 'd' appears twice in one message"),
    ]


def test_the_session_table_finds_keys_of_every_length(qwen3, monkeypatch):
    """The core's table holds short keys in its own entries and longer ones apart (30 bytes is
    the line): keys of every length around it, multi-byte UTF-8 among them, and keys that only
    differ past the line or in length, are each found for their own session, every packed item
    stepped by the core, removed as their sessions end, and answered as the reference engine
    answers them."""
    keys = [
        "",
        "k",
        "é" * 15,
        "é" * 14 + "k",
        "x" * 29,
        "x" * 30,
        "x" * 31,
        "x" * 30 + "y",
        "日本" * 6,
        "z" * 200,
    ]
    keys = [k for k in keys if k]  # an empty key is refused by framing, not the table
    assert {len(k.encode()) for k in keys} >= {29, 30, 31, 200}
    opening = pb.ParseBatchRequest(
        sessions=[pb.SessionInput(key=k, open=pb.Open(model="qwen3")) for k in keys]
    )
    steps = [pb.ParseBatchRequest(packed=pb.PackedSteps(keys=keys[::-1], token_ids=[9707] * len(keys)))] * 3
    finish = pb.ParseBatchRequest(
        sessions=[pb.SessionInput(key=k, finish=pb.Finish(reason=pb.FINISH_REASON_STOP)) for k in keys[::2]],
        packed=pb.PackedSteps(keys=keys[1::2], token_ids=[9707] * len(keys[1::2])),
    )
    taken = _count_python_items(monkeypatch)

    def stepped(batch: BatchProtocol, i: int) -> None:
        assert taken == [], i  # the core found every item's session

    replies = _on_both_engines([opening, *steps, finish], qwen3, stepped, sorted(keys[1::2]))
    assert list(_shown(replies["native"][1]).packed.keys) == keys[::-1]


def _opening_entries(encode) -> pb.ParseBatchRequest:
    """Opening entries whose message carries steps of every kind: one plain step (one id, a few,
    a tool call's head, events, nothing to send), and the ones the core leaves to Python — a bad
    id, more ids than the token limit, an empty step, two steps, a step with a Finish, a wire
    dialect, token ids."""
    ids = encode(OUTPUTS[0].format(i=1) + OUTPUTS[1].format(i=2))
    message = pb.ParseBatchRequest()
    call = encode('<tool_call>\n{"name": "get_weather", "arguments": {"city": "')
    kinds = ["one", "few", "call", "bad", "over", "empty", "two", "finish", "events", "final", "wire"]
    kinds.append("token_ids")
    single = ("one", "bad", "events", "final", "wire", "token_ids")
    for i, kind in enumerate(kinds * 3):
        entry = message.sessions.add(key=f"{kind}{i}", open=pb.Open(model="qwen3", request_id=f"r{i}"))
        step = entry.steps.add()
        step.token_ids.extend(ids[i : i + (1 if kind in single else 3)])
        if kind == "bad":
            step.token_ids.append(BAD_ID)
        elif kind == "over":
            step.token_ids.extend(ids[: LIMITS.max_tokens_per_session])
        elif kind == "empty":
            del step.token_ids[:]
        elif kind == "two":
            entry.steps.add().token_ids.append(ids[i + 5])
        elif kind == "finish":
            entry.finish.reason = pb.FINISH_REASON_STOP
        elif kind == "call":  # a tool call's head and no arguments yet, with its events
            step.token_ids[:] = call
            entry.open.tools_json = json.dumps(WEATHER_TOOLS)
            entry.open.output = pb.OUTPUT_KIND_DELTAS_AND_EVENTS
        elif kind == "events":
            entry.open.output = pb.OUTPUT_KIND_DELTAS_AND_EVENTS
        elif kind == "final":
            entry.open.output = pb.OUTPUT_KIND_FINAL_ONLY
        elif kind == "wire":
            entry.open.wire.dialect = pb.WIRE_DIALECT_OPENAI_CHAT
            entry.open.wire.response_id, entry.open.wire.model, entry.open.wire.created = "chatcmpl-1", "m", 1
        elif kind == "token_ids":
            entry.open.return_token_ids = True
    return message


def _raw_replies(engine: str, model, stream: list[pb.ParseBatchRequest]) -> tuple[list[bytes], list[tuple]]:
    """``run``, each reply exactly as the servicer sends it (the core's bytes merged with
    Python's message, not parsed and written again)."""
    from parsetier.protocol.batch import to_the_end

    before = native.engine()
    native.set_engine(engine)
    try:
        hooks = Recorder()
        batch = BatchProtocol(LIMITS, hooks)
        batch.models["qwen3"] = model
        replies = []
        for message in stream:
            reply = to_the_end(batch.receiving(message))
            replies.append(reply if type(reply) is bytes else reply.SerializeToString())
        batch.close(batch_closed())
        return replies, sorted(hooks.ends, key=repr)
    finally:
        native.set_engine(before)


def test_the_core_answers_an_opening_entrys_plain_step(encode, qwen3, monkeypatch):
    """An opening entry whose message is one plain step is stepped and answered by the core
    (``_core.step_reply`` with the entry's key) once the session is started; whatever it leaves
    takes Python's path. The replies are byte for byte those of Python's path (the core made to
    decline every opening) and the reference engine's, counts and ends equal."""
    from parsetier.protocol import session as protocol

    answered: list[bool] = []
    original = protocol._step_reply

    def counting(ledger, ids, max_tokens, key=None, counted=False):
        reply = original(ledger, ids, max_tokens, key, counted)
        answered.append(reply is not None)
        return reply

    opening = _opening_entries(encode)
    following = pb.ParseBatchRequest()
    for entry in opening.sessions:
        following.packed.keys.append(entry.key)
        following.packed.token_ids.append(9707)
    finishing = pb.ParseBatchRequest()
    for entry in opening.sessions:
        finishing.sessions.add(key=entry.key).finish.reason = pb.FINISH_REASON_STOP
    stream = [opening, following, finishing]
    monkeypatch.setattr(protocol, "_step_reply", counting)
    native_replies, native_ends = _raw_replies("native", qwen3, stream)
    assert answered.count(True) == 3 * 5  # "one", "few", "call", "events", "final" (nothing to send)
    assert answered.count(False) == 3 * 4  # "bad", "over", "wire", "token_ids": applied by Python
    monkeypatch.setattr(protocol, "_step_reply", lambda *args: None)
    python_replies, python_ends = _raw_replies("native", qwen3, stream)
    assert native_replies == python_replies
    assert native_ends == python_ends
    reference_replies, reference_ends = _raw_replies("reference", qwen3, stream)
    # The openings' reply byte for byte; the others as messages (the core's packed outputs
    # arrive in runs, a packed array in several pieces: the same message, other bytes).
    assert native_replies[0] == reference_replies[0]
    for i, (got, want) in enumerate(zip(native_replies, reference_replies, strict=True)):
        assert _shown(got) == _shown(want), (i, _shown(got), _shown(want))
    assert native_ends == reference_ends
    statuses = [o.status.code for o in _shown(native_replies[0]).sessions if o.HasField("status")]
    refused = [_code(grpc.StatusCode.INVALID_ARGUMENT), _code(grpc.StatusCode.RESOURCE_EXHAUSTED)]
    assert statuses == refused * 3


def _in_steps(rng: random.Random, message: pb.ParseBatchRequest) -> pb.ParseBatchRequest:
    """``message`` with most of its packed items sent as entries of several steps instead: the
    item's ids cut into 1 to 6 steps (some of them empty; now and then a step with text too,
    which the ids override), as a client sends a session's queued steps."""
    out = pb.ParseBatchRequest()
    out.sessions.extend(message.sessions)
    items = Packed.of(message.packed)
    keep = pb.PackedSteps()
    for i, key in enumerate(items.keys):
        ids = items.ids_of(i)
        if rng.random() < 0.2:
            keep.keys.append(key)
            keep.token_counts.append(len(ids))
            keep.token_ids.extend(ids)
            continue
        entry = out.sessions.add(key=key)
        cuts = sorted(rng.randrange(len(ids) + 1) for _ in range(rng.randrange(6)))
        for lo, hi in zip([0, *cuts], [*cuts, len(ids)], strict=True):
            step = entry.steps.add()
            step.token_ids.extend(ids[lo:hi])
            if rng.random() < 0.03:
                step.text = "ignored"
    if keep.keys:
        out.packed.CopyFrom(keep)
    return out


def _stepped_entries(monkeypatch) -> list[int]:
    """The steps Python fed (``SessionProtocol._feed``, the general path, and ``take_ids``,
    the plain one), counted as they are applied."""
    from parsetier.protocol.session import SessionProtocol

    fed: list[int] = []
    feed, take = SessionProtocol._feed, SessionProtocol.take_ids

    def feeding(self, steps):
        if steps:
            fed.append(len(steps))
        return feed(self, steps)

    def taking(self, ids):
        fed.append(1)
        return take(self, ids)

    monkeypatch.setattr(SessionProtocol, "_feed", feeding)
    monkeypatch.setattr(SessionProtocol, "take_ids", taking)
    return fed


@pytest.mark.parametrize("seed", range(4))
def test_entries_of_several_steps_equal_on_both_engines(encode, qwen3, seed, monkeypatch):
    """Entries that are nothing but steps of token ids (a session's queued steps, several tokens
    each) are stepped by the core as the plain message of their ids, answered with a whole
    ``SessionOutput`` in the entry's place: the replies are the reference engine's, byte for
    byte (statuses, counts, digests), over random streams with every kind of session and the
    cases the core leaves to Python (unknown and ended keys, bad ids, the token limit, the
    steps-per-message limit, text in a step, sessions with a dialect or token ids)."""
    rng = random.Random(seed)
    stream = [_in_steps(rng, message) for message in random_stream(encode, 50 + seed)]
    limits = Limits(
        max_tokens_per_session=25,
        max_sessions_per_stream=64,
        max_items_per_message=400,
        max_steps_per_message=4,
    )
    fed = _stepped_entries(monkeypatch)
    replies: dict[str, list[bytes]] = {}
    ends: dict[str, list[tuple]] = {}
    for engine in ("native", "reference"):
        replies[engine], ends[engine] = run(engine, qwen3, stream, limits, _read)
        if engine == "native":
            on_native, fed[:] = len(fed), []
    for i, (got, want) in enumerate(zip(replies["native"], replies["reference"], strict=True)):
        assert got == want, (seed, i, _shown(got), _shown(want))
    assert ends["native"] == ends["reference"]
    # The core stepped most of them; the reference engine's Python applied every one.
    assert 0 < on_native < len(fed) // 2, (on_native, len(fed))
    shown = [_shown(r) for r in replies["native"]]
    statuses = {o.status.code for r in shown for o in r.sessions if o.HasField("status")}
    assert _code(grpc.StatusCode.RESOURCE_EXHAUSTED) in statuses
