"""Server-side resume (docs/service.md, "Resume"): a new stream with the same Open plus a resume
point, re-sending the broken stream's messages, answers exactly the replies the client had not
received yet, byte for byte, with sequence numbers continuing; points that cannot be right are
FAILED_PRECONDITION; a server without the model says NOT_FOUND. A drain hands ParseBatch streams of
resumable sessions off."""

from __future__ import annotations

import asyncio
import queue

import grpc
import pytest

from grpc_servers import ThreadServer
from parsetier.service.servicer import HANDOFF_MESSAGE
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client.requests import finish_message, open_message
from service_samples import REASONING_AND_TWO_CALLS, WEATHER_TOOLS


def session(encode, output: str = "both") -> list[pb.ParseRequest]:
    """A session as its client framed it: Open alone, one step per message, Finish alone, and an
    empty keep-alive in the middle (messages that produce no reply count too)."""
    ids = encode(REASONING_AND_TWO_CALLS)
    steps = [pb.ParseRequest(steps=[pb.Step(token_ids=[i])]) for i in ids]
    steps.insert(len(steps) // 2, pb.ParseRequest())
    open_ = open_message("qwen3", tools=WEATHER_TOOLS, output=output, request_id="resume-1")
    open_.resumable = True
    return [pb.ParseRequest(open=open_), *steps, pb.ParseRequest(finish=finish_message("stop"))]


def resumed(messages: list[pb.ParseRequest], client_messages: int, sequence: int) -> list[pb.ParseRequest]:
    first = pb.ParseRequest()
    first.CopyFrom(messages[0])
    first.open.resume.client_messages = client_messages
    first.open.resume.sequence = sequence
    return [first, *messages[1:]]


def wire(replies) -> list[bytes]:
    return [r.SerializeToString(deterministic=True) for r in replies]


@pytest.mark.parametrize("output", ["deltas", "both"])
def test_resume_after_every_reply_gives_exactly_the_rest(client, encode, output):
    messages = session(encode, output)
    full = list(client.parse(messages))
    assert [r.sequence for r in full] == list(range(1, len(full) + 1))
    assert len(full) > 20
    # Resume from "nothing received" and from every reply the client could have had last.
    points = [(0, 0)] + [(r.client_messages, r.sequence) for r in full[:-1]]
    for at, (client_messages, sequence) in enumerate(points):
        rest = list(client.parse(resumed(messages, client_messages, sequence)))
        assert wire(rest) == wire(full[at:]), (client_messages, sequence)


def test_resume_after_finish_was_sent_before_the_final_reply(client, encode):
    """The client sent Finish but the stream broke before the final reply came: it re-sends the
    Finish too and gets the final reply (and only it)."""
    messages = session(encode)
    full = list(client.parse(messages))
    before_final = full[-2]
    rest = list(client.parse(resumed(messages, before_final.client_messages, before_final.sequence)))
    assert wire(rest) == wire(full[-1:])
    assert rest[0].HasField("final") and rest[0].sequence == before_final.sequence + 1


def _status(client, messages) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list(client.parse(messages))
    return caught.value


def test_resume_points_that_disagree_with_the_history_are_failed_precondition(client, encode):
    messages = session(encode)
    full = list(client.parse(messages))
    last = full[len(full) // 2]
    empty = next(n for n in range(1, len(messages)) if n not in {r.client_messages for r in full})
    cases = {
        "sequence too high": (last.client_messages, last.sequence + 1),
        "sequence too low": (last.client_messages, last.sequence - 1),
        "a message that produced no reply": (empty, sum(r.client_messages < empty for r in full)),
        "impossible point": (0, 3),
        "at the final reply": (full[-1].client_messages, full[-1].sequence),
    }
    for name, (client_messages, sequence) in cases.items():
        error = _status(client, resumed(messages, client_messages, sequence))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (name, error.details())
    # A history that differs so that the reply count up to the point changes (here: its steps
    # lost, as a client that kept no history would re-send) is refused rather than continued with
    # wrong output. (The check is on counts; see docs/service.md, "Resume".)
    altered = list(messages)
    altered[1 : last.client_messages] = [pb.ParseRequest()] * (last.client_messages - 1)
    error = _status(client, resumed(altered, last.client_messages, last.sequence))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    assert "disagrees" in error.details()


def test_resume_on_a_server_without_the_model_is_not_found(client, encode):
    messages = session(encode)
    first = resumed(messages, 0, 0)[0]
    first.open.model = "no-such-model"
    error = _status(client, [first, *messages[1:]])
    assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()


def test_replayed_history_counts_towards_the_session_limits(client, registry, encode):
    """The history is this session's tokens: a resume whose history exceeds a smaller server's
    token limit is refused there, as the original session would have been."""
    from grpc_servers import ThreadServer
    from parsetier.service import Limits
    from parsetier_client import Client

    messages = session(encode)
    before_final = list(client.parse(messages))[-2]
    tokens = sum(len(m.steps) for m in messages)
    point = (before_final.client_messages, before_final.sequence)
    limits = Limits(max_tokens_per_session=tokens // 2)
    with ThreadServer(registry, limits) as server, Client(server.target) as small:
        error = _status(small, resumed(messages, *point))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()


def test_a_parse_batch_session_resumes_like_a_stream(client, encode):
    """Per session on the multiplexed RPC: a session re-opened on a new ParseBatch stream with a
    resume point, its entries re-sent as before, gets exactly the outputs it had not received,
    while another session on the same stream runs as usual."""
    messages = session(encode)

    def batch(entries_per_message: list[list[pb.SessionInput]]) -> list[pb.SessionOutput]:
        requests = [pb.ParseBatchRequest(sessions=entries) for entries in entries_per_message]
        return [out for reply in client.stub.ParseBatch(iter(requests), timeout=60) for out in reply.sessions]

    def entries(key: str, msgs: list[pb.ParseRequest]) -> list[list[pb.SessionInput]]:
        return [
            [
                pb.SessionInput(
                    key=key,
                    open=m.open if m.HasField("open") else None,
                    steps=m.steps,
                    finish=m.finish if m.HasField("finish") else None,
                )
            ]
            for m in msgs
        ]

    full = batch(entries("a", messages))
    assert [o.sequence for o in full] == list(range(1, len(full) + 1))
    mid = full[len(full) // 3]
    resumed_entries = entries("a", resumed(messages, mid.client_messages, mid.sequence))
    fresh = entries("b", messages)
    both = batch([ra + fb for ra, fb in zip(resumed_entries, fresh, strict=True)])
    rest = [o for o in both if o.key == "a"]
    assert [o.SerializeToString(deterministic=True) for o in rest] == [
        o.SerializeToString(deterministic=True) for o in full[len(full) // 3 + 1 :]
    ]
    other = [o for o in both if o.key == "b"]
    assert [o.SerializeToString(deterministic=True) for o in other] == [
        pb.SessionOutput(
            key="b", **{f.name: v for f, v in o.ListFields() if f.name != "key"}
        ).SerializeToString(deterministic=True)
        for o in full
    ]


def test_clients_do_not_resume_the_servers_own_internal_error():
    """The server's INTERNAL (a bug it logged) is the request's own; a proxy's reset is not."""
    from parsetier.batch_protocol import INTERNAL_MESSAGE
    from parsetier_client.resume import retryable

    assert not retryable(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
    assert retryable(grpc.StatusCode.INTERNAL, "Received RST_STREAM with error code 2")
    assert retryable(grpc.StatusCode.UNAVAILABLE, "Socket closed")
    assert not retryable(grpc.StatusCode.INVALID_ARGUMENT, "token_ids: ...")


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
