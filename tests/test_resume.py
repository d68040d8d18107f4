"""Server-side resume, counted in tokens (docs/service.md, "Resume"): a new stream with the same
Open plus a resume point (the answered history as one packed run, the last sequence and output
digest), then the unanswered messages re-sent, answers exactly the replies the client had not
received, byte for byte but for `client_messages` (counted on the new stream, its Open message
being 1), with sequence numbers continuing; a history that does not reproduce the output received
is FAILED_PRECONDITION; a server without the model says NOT_FOUND. The digest is split-invariant.
A drain hands ParseBatch streams of resumable sessions off."""

from __future__ import annotations

import asyncio
import queue
import random

import grpc
import pytest

from grpc_servers import ThreadServer
from parsetier.service.handoff import HANDOFF_MESSAGE
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.requests import finish_message, open_message
from service_samples import REASONING_AND_TWO_CALLS, WEATHER_TOOLS
from testkit.replies import wire


def session(encode, output: str = "both") -> list[pb.ParseRequest]:
    """A session as its client framed it: Open alone, one step per message, a text step, Finish
    alone, and an empty keep-alive in the middle (messages that produce no reply count too)."""
    ids = encode(REASONING_AND_TWO_CALLS)
    steps = [pb.ParseRequest(steps=[pb.Step(token_ids=[i])]) for i in ids]
    steps.insert(len(steps) // 2, pb.ParseRequest())
    steps.insert(3, pb.ParseRequest(steps=[pb.Step(text=" (typed) ", text_tokens=2)]))
    open_ = open_message("qwen3", tools=WEATHER_TOOLS, output=output, request_id="resume-1")
    open_.resumable = True
    return [pb.ParseRequest(open=open_), *steps, pb.ParseRequest(finish=finish_message("stop"))]


def history(messages: list[pb.ParseRequest]) -> list[pb.Step]:
    """The answered steps as the contract sends them: consecutive plain id steps as one run."""
    steps: list[pb.Step] = []
    for message in messages:
        for step in message.steps:
            plain = step.token_ids and not step.HasField("logprobs")
            if plain and steps and steps[-1].token_ids and not steps[-1].HasField("logprobs"):
                steps[-1].token_ids.extend(step.token_ids)
            elif plain:
                steps.append(pb.Step(token_ids=step.token_ids))
            else:
                steps.append(step)
    return steps


def resumed(messages: list[pb.ParseRequest], last: pb.ParseResponse | None) -> list[pb.ParseRequest]:
    """The new stream after a break at which ``last`` was the last reply received: the Open with
    the point, then every message ``last`` does not cover, as it was sent."""
    answered = last.client_messages if last is not None else 1
    first = pb.ParseRequest()
    first.CopyFrom(messages[0])
    point = first.open.resume
    point.SetInParent()
    point.history.extend(history(messages[1:answered]))
    if last is not None:
        point.sequence, point.output_digest = last.sequence, last.output_digest
    return [first, *messages[answered:]]


@pytest.mark.parametrize("output", ["deltas", "both", "events"])
def test_resume_after_every_reply_gives_exactly_the_rest(client, encode, output):
    messages = session(encode, output)
    full = list(client.parse(messages))
    assert [r.sequence for r in full] == list(range(1, len(full) + 1))
    assert len(full) > 20
    assert len({r.output_digest for r in full}) > 10  # the digest moves with the output
    # Resume from "nothing received" and from every reply the client could have had last.
    for at, last in enumerate([None, *full[:-1]]):
        rest = list(client.parse(resumed(messages, last)))
        shift = last.client_messages - 1 if last is not None else 0
        assert wire(rest) == wire(full[at:], shift), at


def test_resume_after_finish_was_sent_before_the_final_reply(client, encode):
    """The client sent Finish but the stream broke before the final reply came: the Finish is
    pending, so it is re-sent and answered with the final reply (and only it)."""
    messages = session(encode)
    full = list(client.parse(messages))
    before_final = full[-2]
    rest = list(client.parse(resumed(messages, before_final)))
    assert wire(rest) == wire(full[-1:], before_final.client_messages - 1)
    assert rest[-1].HasField("final") and rest[0].sequence == before_final.sequence + 1


def test_the_output_digest_is_split_invariant(client, encode):
    """The same ids in one message or in random splits give the same digest."""
    ids = encode(REASONING_AND_TWO_CALLS)
    open_ = open_message("qwen3", tools=WEATHER_TOOLS, request_id="digest")
    one = list(
        client.parse([pb.ParseRequest(open=open_, steps=[pb.Step(token_ids=ids)], finish=finish_message())])
    )
    rng = random.Random(23)
    digests = set()
    for _ in range(4):
        cuts = sorted(rng.sample(range(1, len(ids)), 12))
        pieces = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)], strict=True)]
        steps = [pb.ParseRequest(steps=[pb.Step(token_ids=piece)]) for piece in pieces]
        replies = list(
            client.parse([pb.ParseRequest(open=open_), *steps, pb.ParseRequest(finish=finish_message())])
        )
        digests.add(replies[-1].output_digest)
    assert digests == {one[-1].output_digest}


def _status(client, messages) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list(client.parse(messages))
    return caught.value


def test_histories_that_do_not_reproduce_the_output_are_failed_precondition(client, encode):
    messages = session(encode)
    full = list(client.parse(messages))
    last = full[len(full) // 2]
    good = resumed(messages, last)

    def altered(change) -> list[pb.ParseRequest]:
        first = pb.ParseRequest()
        first.CopyFrom(good[0])
        change(first.open.resume)
        return [first, *good[1:]]

    def drop_last_id(point):
        ids = list(point.history[-1].token_ids)
        del point.history[-1].token_ids[:]
        point.history[-1].token_ids.extend(ids[:-1])

    def other_id(point):
        point.history[-1].token_ids[-1] = point.history[0].token_ids[0]

    cases = {
        "a wrong digest": lambda point: setattr(point, "output_digest", point.output_digest ^ 1),
        "a history missing its last id": drop_last_id,
        "a history with a different id": other_id,
        "no history (a client that kept none)": lambda point: point.ClearField("history"),
        "the digest of nothing with a history": lambda point: setattr(point, "output_digest", 0),
    }
    for name, change in cases.items():
        error = _status(client, altered(change))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (name, error.details())
        assert "does not reproduce the output received" in error.details(), name


def test_resume_on_a_server_without_the_model_is_not_found(client, encode):
    messages = session(encode)
    first = resumed(messages, None)[0]
    first.open.model = "no-such-model"
    error = _status(client, [first, *messages[1:]])
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()


def test_the_history_counts_towards_the_session_limits(client, registry, encode):
    """The history is this session's tokens: a resume whose history exceeds a smaller server's
    token limit is refused there, as the original session would have been."""
    from parsetier.service import Limits
    from parsetier_client import Client

    messages = session(encode)
    before_final = list(client.parse(messages))[-2]
    tokens = sum(len(m.steps) for m in messages)
    limits = Limits(max_tokens_per_session=tokens // 2)
    with ThreadServer(registry, limits) as server, Client(server.target) as small:
        error = _status(small, resumed(messages, before_final))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()


def _entries(key: str, msgs: list[pb.ParseRequest]) -> list[pb.SessionInput]:
    return [
        pb.SessionInput(
            key=key,
            open=m.open if m.HasField("open") else None,
            steps=m.steps,
            finish=m.finish if m.HasField("finish") else None,
        )
        for m in msgs
    ]


def test_a_parse_batch_session_resumes_like_a_stream(client, encode):
    """Per session on the multiplexed RPC: a session re-opened on a new ParseBatch stream with a
    resume point, its unanswered entries re-sent, gets exactly the outputs it had not received,
    while another session on the same stream runs as usual."""
    messages = session(encode)

    def batch(entries_per_message: list[list[pb.SessionInput]]) -> list[pb.SessionOutput]:
        requests = [pb.ParseBatchRequest(sessions=entries) for entries in entries_per_message]
        return [out for reply in client.stub.ParseBatch(iter(requests), timeout=60) for out in reply.sessions]

    full = batch([[e] for e in _entries("a", messages)])
    assert [o.sequence for o in full] == list(range(1, len(full) + 1))
    stream = list(client.parse(messages))
    assert [o.output_digest for o in full] == [r.output_digest for r in stream]
    mid = full[len(full) // 3]
    as_reply = pb.ParseResponse(
        sequence=mid.sequence, client_messages=mid.client_messages, output_digest=mid.output_digest
    )
    resumed_entries = _entries("a", resumed(messages, as_reply))
    fresh = _entries("b", messages)
    per_message = [[e] for e in fresh]
    for i, entry in enumerate(resumed_entries):
        per_message[i].insert(0, entry)
    both = batch(per_message)
    rest = [o for o in both if o.key == "a"]
    assert wire(rest) == wire(full[len(full) // 3 + 1 :], mid.client_messages - 1)
    other = [o for o in both if o.key == "b"]
    assert wire(other) == wire(
        [pb.SessionOutput(key="b", **{f.name: v for f, v in o.ListFields() if f.name != "key"}) for o in full]
    )


def test_a_whole_batch_resumes_in_one_message(client, encode):
    """Every live session of a broken ParseBatch stream re-opens in ONE message, each with its
    history and its unanswered steps in the same entry; the outputs are the rest of each."""
    messages = session(encode)
    keys = ["x", "y", "z"]
    requests = [pb.ParseBatchRequest(sessions=[e for k in keys for e in _entries(k, [m])]) for m in messages]
    full = [o for reply in client.stub.ParseBatch(iter(requests), timeout=60) for o in reply.sessions]
    per_key = {k: [o for o in full if o.key == k] for k in keys}
    cut = {"x": 5, "y": len(per_key["y"]) // 2, "z": len(per_key["z"]) - 2}
    entries = []
    for key in keys:
        last = per_key[key][cut[key]]
        reply = pb.ParseResponse(
            sequence=last.sequence, client_messages=last.client_messages, output_digest=last.output_digest
        )
        opening, *pending = _entries(key, resumed(messages, reply))
        for entry in pending:
            opening.steps.extend(entry.steps)
            if entry.HasField("finish"):
                opening.finish.CopyFrom(entry.finish)
        entries.append(opening)
    (reply,) = list(client.stub.ParseBatch(iter([pb.ParseBatchRequest(sessions=entries)]), timeout=60))
    for key in keys:
        (out,) = [o for o in reply.sessions if o.key == key]
        rest = per_key[key][cut[key] + 1 :]
        joined = "".join(d.content + d.reasoning for o in rest for d in o.deltas)
        assert "".join(d.content + d.reasoning for d in out.deltas) == joined, key
        assert out.final == rest[-1].final and out.sequence == per_key[key][cut[key]].sequence + 1
        assert out.output_digest == rest[-1].output_digest


def test_the_python_clients_read_the_protos_retry_rule_from_code_and_trailers():
    """The retry rule (proto, ``ParserService``): the ``parsetier-fault`` trailer never, the
    hand-off trailer always, else UNAVAILABLE / CANCELLED / INTERNAL / UNKNOWN; the message text
    is never read (the server's own INTERNAL message without the trailer is a reset on the way)."""
    from parsetier.service.errors import FAULT_TRAILER
    from parsetier.service.handoff import HANDOFF_TRAILER
    from parsetier.status import INTERNAL_MESSAGE
    from parsetier_client.resume import retryable

    def status(code: grpc.StatusCode, details: str, trailers=()) -> grpc.aio.AioRpcError:
        return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers), details)

    assert not retryable(status(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE, FAULT_TRAILER))
    assert not retryable(status(grpc.StatusCode.UNAVAILABLE, "x", FAULT_TRAILER))
    assert retryable(status(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE))
    assert retryable(status(grpc.StatusCode.INTERNAL, "Received RST_STREAM with error code 2"))
    assert retryable(status(grpc.StatusCode.UNKNOWN, "unexpected HTTP status code 204"))
    assert retryable(status(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
    assert retryable(status(grpc.StatusCode.CANCELLED, "Received RST_STREAM with error code 8"))
    assert retryable(status(grpc.StatusCode.UNAVAILABLE, HANDOFF_MESSAGE, HANDOFF_TRAILER))
    assert not retryable(status(grpc.StatusCode.INVALID_ARGUMENT, "INTERNAL: token_ids ..."))
    assert not retryable(status(grpc.StatusCode.FAILED_PRECONDITION, "Internal error from Core"))


@pytest.mark.parametrize("resumable", [True, False])
def test_a_drain_hands_a_parse_batch_stream_off_when_all_its_sessions_resume(registry, encode, resumable):
    """Drain (in process): a ParseBatch stream whose open sessions all said ``resumable`` ends at
    once with the documented hand-off (UNAVAILABLE, its message, the ``parsetier-handoff``
    trailer); one with a session that cannot resume is not handed off, keeps working within the
    grace, and ends OK when its client closes it."""
    ids = encode(REASONING_AND_TWO_CALLS)
    open_ = open_message("qwen3", tools=WEATHER_TOOLS, request_id="drained")
    open_.resumable = resumable
    outgoing: queue.SimpleQueue[pb.ParseBatchRequest | None] = queue.SimpleQueue()
    with ThreadServer(registry) as server, grpc.insecure_channel(server.target) as channel:
        replies = pb_grpc.ParserServiceStub(channel).ParseBatch(iter(outgoing.get, None), timeout=30)
        first = pb.SessionInput(key="a", open=open_, steps=[pb.Step(token_ids=ids[:5])])
        outgoing.put(pb.ParseBatchRequest(sessions=[first]))
        next(replies)
        drain = asyncio.run_coroutine_threadsafe(server.handle.drain(10.0), server.loop)
        if resumable:
            with pytest.raises(grpc.RpcError) as ended:
                next(replies)
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert ended.value.details() == HANDOFF_MESSAGE
            assert ("parsetier-handoff", "resume") in tuple(ended.value.trailing_metadata())
        else:
            rest = pb.SessionInput(key="a", steps=[pb.Step(token_ids=ids[5:])], finish=finish_message("stop"))
            outgoing.put(pb.ParseBatchRequest(sessions=[rest]))
            (out,) = next(replies).sessions
            assert out.final.message.tool_calls, out
            outgoing.put(None)
            assert list(replies) == []
        outgoing.put(None)
        assert drain.result(15) is True  # clean: nothing was cut


def test_the_client_ledger_keeps_the_open_the_answered_ids_the_pending_the_sequence_and_digest():
    """The sans-IO ledger every Python client drives: a reply answers the pending messages its
    client_messages covers (their id steps merged into one run, a text step kept in place), a gap
    is an error, and a new stream re-sends the rest renumbered from 2."""
    from parsetier_client.resume import Ledger

    ledger = Ledger(open_message("qwen3", request_id="ledger"))
    text = pb.Step(text="x", text_tokens=1)
    ledger.send(pb.ParseRequest(steps=[pb.Step(token_ids=[1, 2])]))  # message 2
    ledger.send(pb.ParseRequest(steps=[text]))  # 3
    ledger.send(pb.ParseRequest(steps=[pb.Step(token_ids=[3])]))  # 4
    ledger.send([4, 5])  # 5, the hot path's plain run
    ledger.send(pb.ParseRequest(steps=[pb.Step(token_ids=[6])], finish=finish_message()))  # 6
    ledger.received(1, 3, 0xABC)
    with pytest.raises(RuntimeError, match="gap or a repeat"):
        ledger.received(3, 4, 1)
    ledger.received(2, 5, 0xDEF)
    point = ledger.point()
    assert point.request_id == "ledger" and (point.resume.sequence, point.resume.output_digest) == (2, 0xDEF)
    assert list(point.resume.history) == [pb.Step(token_ids=[1, 2]), text, pb.Step(token_ids=[3, 4, 5])]
    (pending,) = ledger.restart(2)
    assert pending[0].HasField("finish") and ledger.sent == 2
    ledger.received(3, 2, 0x123)
    assert not ledger.pending and list(ledger.point().resume.history)[-1] == pb.Step(token_ids=[3, 4, 5, 6])


def test_a_batch_ledger_replays_a_broken_stream_in_one_message():
    """Two live sessions, each with one step in flight at the break: ONE message re-opens both,
    each with its history and its pending step in the same entry; the new stream's outputs are
    the caller's reply to that step."""
    from parsetier_client.batch_resume import BatchLedger

    ledger = BatchLedger()
    opens = [
        pb.SessionInput(key=k, open=open_message("qwen3", request_id=k), steps=[pb.Step(token_ids=[7])])
        for k in "ab"
    ]
    ledger.sent(pb.ParseBatchRequest(sessions=opens))
    reply = pb.ParseBatchResponse(client_messages=1)
    reply.sessions.add(key="a", sequence=1, client_messages=1, output_digest=11).deltas.add(content="x")
    ledger.received(reply)
    assert set(ledger.ready() or {}) == {"a"}
    step = pb.ParseBatchRequest()
    step.packed.keys.extend(["a", "b"])
    step.packed.token_ids.extend([8, 9])
    ledger.sent(step)  # in flight at the break
    (message,) = ledger.replay()
    a, b = message.sessions
    assert a.open.resume.sequence == 1 and a.open.resume.output_digest == 11
    assert list(a.open.resume.history) == [pb.Step(token_ids=[7])] and list(a.steps) == [
        pb.Step(token_ids=[8])
    ]
    # b produced nothing for message 1, but the reply answered it: its id is history too.
    assert list(b.open.resume.history) == [pb.Step(token_ids=[7])] and b.open.resume.sequence == 0
    assert list(b.steps) == [pb.Step(token_ids=[9])]
    out = pb.ParseBatchResponse(client_messages=1)
    out.sessions.add(key="a", sequence=2, client_messages=1, output_digest=12).deltas.add(content="y")
    ledger.received(out)
    assert [o.deltas[0].content for o in (ledger.ready() or {}).values()] == ["y"]
