"""ParseBatch's packed steps against a real server on loopback: a packed item is exactly the entry
it stands for (output, counting, errors, limits), its plain text outputs come back packed, and
broken packed framing ends the stream as any malformed framing does."""

from __future__ import annotations

import grpc
import pytest

from grpc_servers import wait_for
from parsetier.service import Limits
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import StepBuilder, open_message, session_error
from parsetier_client.packed import outputs_of
from service_samples import WEATHER_TOOLS

Code = grpc.StatusCode
HELLO = 9707
SESSIONS = 120


def _output(i: int) -> str:
    return (
        f"<think>\nWhy {i}.\n</think>\n\nSure, {i * 31 % 97} here."
        f'<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "C{i}"}}}}\n</tool_call>'
    )


def _messages(outputs: dict[int, list[int]], packed: bool) -> list[pb.ParseBatchRequest]:
    """The same engine steps either way: session ``i`` steps 1 to 3 ids at a time, then finishes;
    with ``packed`` its plain steps go as packed items."""
    kinds = (pb.OUTPUT_KIND_DELTAS, pb.OUTPUT_KIND_DELTAS_AND_EVENTS, pb.OUTPUT_KIND_EVENTS)
    first = pb.ParseBatchRequest()
    for i in range(SESSIONS):
        first.sessions.add(key=f"k{i}", open=open_message("qwen3", tools=WEATHER_TOOLS, request_id=f"r{i}"))
        first.sessions[-1].open.output = kinds[i % 3]
    messages = [first]
    sizes = {i: 1 + i % 3 for i in outputs}
    chunks = {
        i: [ids[at : at + sizes[i]] for at in range(0, len(ids), sizes[i])] for i, ids in outputs.items()
    }
    for step in range(max(len(c) for c in chunks.values()) + 1):
        message = pb.ParseBatchRequest()
        keys, counts, ids = [], [], []
        for i, chunk in chunks.items():
            if step < len(chunk) and packed:
                keys.append(f"k{i}")
                counts.append(len(chunk[step]))
                ids += chunk[step]
            elif step < len(chunk):
                message.sessions.add(key=f"k{i}").steps.add().token_ids.extend(chunk[step])
            elif step == len(chunk):
                message.sessions.add(key=f"k{i}").finish.reason = pb.FINISH_REASON_STOP
        message.packed.keys.extend(keys)
        message.packed.token_counts.extend(counts)
        message.packed.token_ids.extend(ids)
        messages.append(message)
    return messages


def _canonical(reply: pb.ParseBatchResponse) -> dict[str, bytes]:
    return {key: out.SerializeToString(deterministic=True) for key, out in sorted(outputs_of(reply).items())}


def test_packed_items_answer_exactly_as_entries(client, encode):
    outputs = {i: encode(_output(i)) for i in range(SESSIONS)}
    as_entries = list(client.stub.ParseBatch(iter(_messages(outputs, packed=False)), timeout=120))
    as_packed = list(client.stub.ParseBatch(iter(_messages(outputs, packed=True)), timeout=120))
    assert len(as_packed) == len(as_entries)
    assert [_canonical(r) for r in as_packed] == [_canonical(r) for r in as_entries]
    assert not any(r.HasField("packed") for r in as_entries)  # a client that never packs never sees it
    packed_outputs = sum(len(r.packed.keys) for r in as_packed)
    assert packed_outputs > SESSIONS * 2  # the plain text deltas came back packed...
    reasoning = sum(sum(r.packed.reasoning) for r in as_packed)
    assert 0 < reasoning < packed_outputs  # ...reasoning and content both
    stepped = {o.key for r in as_packed[1:-1] for o in r.sessions if o.deltas and o.deltas[0].tool_calls}
    assert len(stepped) == SESSIONS * 2 // 3  # tool-call deltas of packed items stay full outputs


LIMITS = Limits(max_tokens_per_session=5, max_items_per_message=6, max_sessions_per_stream=4)


def _packed(keys: list[str], ids: list[int], counts: list[int] | None = None) -> pb.ParseBatchRequest:
    message = pb.ParseBatchRequest()
    message.packed.keys.extend(keys)
    message.packed.token_ids.extend(ids)
    message.packed.token_counts.extend(counts or [])
    return message


def test_packed_items_keep_the_rules_of_entries(small_client, small_server):
    entries = [pb.SessionInput(key=k, open=open_message("qwen3")) for k in "abcd"]
    opens = pb.ParseBatchRequest(sessions=entries)
    messages = [
        opens,
        # A key without a session, a bad id and a session's limit end only their sessions.
        _packed(["a", "nobody", "b", "c", "d"], [HELLO] * 3 + [10_000_000] + [HELLO] * 6, [1, 1, 1, 1, 6]),
        # A key twice in one message (an entry and a packed item): its second part ends it.
        pb.ParseBatchRequest(
            sessions=[pb.SessionInput(key="a", steps=[pb.Step(token_ids=[HELLO])])],
            packed=pb.PackedSteps(keys=["a", "b"], token_ids=[HELLO, HELLO]),
        ),
        _packed(["b"], [], [0]),  # an empty item: a keep-alive, counted, answered with nothing
        _packed(["b"], [HELLO]),
    ]
    replies = [outputs_of(r) for r in small_client.stub.ParseBatch(iter(messages), timeout=30)]
    assert replies[0] == {}
    second = replies[1]
    assert session_error(second["nobody"])[0] == Code.FAILED_PRECONDITION
    assert session_error(second["c"])[0] == Code.INVALID_ARGUMENT and "10000000" in second["c"].status.message
    assert session_error(second["d"])[0] == Code.RESOURCE_EXHAUSTED
    assert [second[k].deltas[0].content for k in "ab"] == ["Hello", "Hello"]
    assert (second["b"].sequence, second["b"].client_messages) == (1, 2)
    third = replies[2]
    assert third["a"].HasField("status") and session_error(third["a"])[0] == Code.INVALID_ARGUMENT
    assert third["b"].client_messages == 3
    assert replies[3] == {}
    assert (replies[4]["b"].sequence, replies[4]["b"].client_messages) == (3, 5)
    wait_for(lambda: small_server.handle.servicer.gate.active == 0)  # "b" freed when the stream closed


def test_a_session_resumed_before_its_first_reply_answers_packed(small_client):
    """A resume point of {0, 0} (no reply was received yet) replays nothing: the session's
    steps take the packed path at once."""
    open_ = open_message("qwen3")
    open_.resumable = True
    open_.resume.SetInParent()
    messages = [
        pb.ParseBatchRequest(sessions=[pb.SessionInput(key="a", open=open_)]),
        _packed(["a"], [HELLO]),
    ]
    _, reply = small_client.stub.ParseBatch(iter(messages), timeout=30)
    assert list(reply.packed.keys) == ["a"] and list(reply.packed.texts) == ["Hello"]
    assert (reply.packed.sequences[0], reply.packed.client_messages[0]) == (1, 2)


@pytest.mark.parametrize(
    ("message", "code", "words"),
    [
        (_packed(["a", "b"], [HELLO, HELLO], [2]), Code.INVALID_ARGUMENT, "1 token_counts for 2 keys"),
        (_packed(["a", "b"], [HELLO, HELLO, HELLO]), Code.INVALID_ARGUMENT, "take 2 token_ids, and 3"),
        (_packed(["a", "b"], [HELLO], [0, 2]), Code.INVALID_ARGUMENT, "take 2 token_ids, and 1"),
        (_packed(["a", ""], [HELLO, HELLO]), Code.INVALID_ARGUMENT, "non-empty key"),
        (_packed(list("bcdefgh"), [HELLO] * 7), Code.RESOURCE_EXHAUSTED, "7 session entries"),
    ],
)
def test_broken_packed_framing_ends_the_stream(small_client, small_server, message, code, words):
    opening = pb.ParseBatchRequest(sessions=[pb.SessionInput(key="a", open=open_message("qwen3"))])
    call = small_client.stub.ParseBatch(iter([opening, message]), timeout=30)
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == code and words in info.value.details()
    wait_for(lambda: small_server.handle.servicer.gate.active == 0)  # "a" was freed with the stream


def test_step_builder_packs_the_usual_entries():
    builder = StepBuilder()
    builder.feed("plain", [1])
    builder.feed("more", [2, 3])
    builder.feed("two-steps", [4], [5])
    builder.open("opening", "qwen3")
    builder.feed("opening", [6])
    builder.feed("later", [7])
    builder.feed("later", [8])  # a second step: no longer the usual entry
    builder.feed("finishing", [9])
    builder.finish("finishing")
    message = builder.take()
    assert [e.key for e in message.sessions] == ["two-steps", "opening", "later", "finishing"]
    assert [list(s.token_ids) for s in message.sessions[2].steps] == [[7], [8]]
    assert list(message.packed.keys) == ["plain", "more"]
    assert list(message.packed.token_counts) == [1, 2] and list(message.packed.token_ids) == [1, 2, 3]
    builder.feed("x", [1])
    builder.feed("y", [2])
    again = builder.take()
    assert list(again.packed.keys) == ["x", "y"] and not again.packed.token_counts  # one id each
    assert not again.sessions and not builder.take().HasField("packed")
