"""An output cut in the middle of a multi-byte character (a ``length`` finish): the output ends in
U+FFFD, as ``tokenizer.decode`` gives it, and the logprob tokens still join to the output text.

The tokens after which a character is still open are held until it settles (``parsetier.logprobs``):
the token that completes it releases them, and the finish releases them with the last one
carrying the U+FFFD. Checked on Qwen3's real tokenizer, where 🦜 is several byte tokens, in chat
and completion sessions, on both engines (the same deltas step by step), under every split, and
through a live server (deltas and ``Final.logprobs``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from grpc_servers import ThreadServer
from native_diff import compare
from parsetier.completion import CompletionSession
from parsetier.engine.session import Session
from parsetier.messages import CompletionOptions, SessionOptions, StepLogprobs
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import Client, finish_message, logprob_step, open_message
from test_logprobs import random_steps

TEXT = "Cut in the middle of 🦜"


@pytest.fixture(scope="module")
def qwen3(registry):
    return registry.get("qwen3")


@pytest.fixture(scope="module")
def cut_ids(qwen3) -> list[int]:
    """The output's ids but the last: the parrot's bytes begun, not finished."""
    ids = qwen3.tokenizer.encode(TEXT, add_special_tokens=False).ids
    parrot = [i for i in ids if "\ufffd" in qwen3.tokenizer.decode([i])]
    assert len(parrot) >= 2, "🦜 should be several byte tokens in Qwen3's vocabulary"
    cut = ids[:-1]
    assert qwen3.tokenizer.decode(cut) == "Cut in the middle of \ufffd"
    return cut


def _logprobs(ids: list[int], start: int) -> StepLogprobs:
    return StepLogprobs([-(start + i) / 8 for i in range(len(ids))])


def _run(session, ids: list[int], sizes: list[int]) -> tuple[list[list], str, str, list]:
    """Feed ``ids`` in steps of ``sizes`` with logprobs, then ``finish("length")``: the logprob
    tokens of each step's deltas (the finish last), the deltas' text, the final text, and the
    final's logprobs."""
    per_step, texts, outs, pos = [], [], [], 0
    for size in sizes:
        outs.append(session.feed(ids[pos : pos + size], _logprobs(ids[pos : pos + size], pos)))
        pos += size
    outs.append(session.finish("length"))
    for out in outs:
        per_step.append([lp for d in out.deltas for lp in d.logprobs])
        texts += [d.content for d in out.deltas]
    final = outs[-1].final
    return per_step, "".join(texts), final.message.content, list(final.logprobs)


def _check_joined(entries: list, ids: list[int], text: str) -> None:
    assert [e.token_id for e in entries] == ids, "one entry per sampled token, in order"
    assert "".join(e.token for e in entries) == text
    offset = 0
    for e in entries:
        assert e.text_offset == offset
        offset += len(e.token)


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_the_tokens_of_a_cut_character_join_to_the_output(qwen3, cut_ids, kind):
    rng = random.Random(f"cut-{kind}")
    splits = [[len(cut_ids)], [1] * len(cut_ids), *(random_steps(rng, len(cut_ids), 3) for _ in range(4))]
    for split in splits:
        if kind == "chat":
            session = Session(qwen3, SessionOptions(thinking=False))
        else:
            session = CompletionSession(qwen3, SessionOptions(completion=CompletionOptions()))
        per_step, streamed, final_text, _ = _run(session, cut_ids, split)
        assert streamed == final_text == qwen3.tokenizer.decode(cut_ids) == "Cut in the middle of \ufffd"
        entries = [e for step in per_step for e in step]
        _check_joined(entries, cut_ids, streamed)
        assert entries[-1].token.endswith("\ufffd")
        if split == [1] * len(cut_ids):
            assert per_step[-1], "the finish carries the held tokens of the cut character"
            assert not per_step[-2], "the parrot's first byte token is held, not sent with its step"


def test_collected_in_final_the_same(qwen3, cut_ids):
    options = SessionOptions(completion=CompletionOptions(), collect_in_final=True)
    _, streamed, _, final_logprobs = _run(CompletionSession(qwen3, options), cut_ids, [1] * len(cut_ids))
    _check_joined(final_logprobs, cut_ids, streamed)


def test_a_completed_character_releases_its_held_tokens_with_the_completing_step(qwen3):
    ids = qwen3.tokenizer.encode(TEXT, add_special_tokens=False).ids
    session = CompletionSession(qwen3, SessionOptions(completion=CompletionOptions()))
    per_step, streamed, _, _ = _run(session, ids, [1] * len(ids))
    assert streamed == TEXT
    parrot = sum("\ufffd" in qwen3.tokenizer.decode([i]) for i in ids)
    assert [len(step) for step in per_step[-parrot - 1 :]] == [0] * (parrot - 1) + [parrot, 0]
    _check_joined([e for step in per_step for e in step], ids, TEXT)


@pytest.mark.parametrize("hidden", [False, True])
def test_both_engines_agree_step_by_step(qwen3, cut_ids, hidden):
    """The native session's deltas (logprobs included) equal the reference's at every step and at
    the cut finish, reasoning shown or hidden (a thinking output cut inside its reasoning)."""
    think = qwen3.tokenizer.token_to_id("<think>")
    for ids in (cut_ids, [think, *cut_ids]):
        options = SessionOptions(include_reasoning=not hidden, request_id="cut")
        steps = [([tid], _logprobs([tid], i)) for i, tid in enumerate(ids)]
        assert compare(qwen3, options, steps, "length")
        assert compare(qwen3, options, [(ids, _logprobs(ids, 0))], "length")


@pytest.fixture(scope="module")
def client(registry) -> Iterator[Client]:
    with ThreadServer(registry) as server, Client(server.target, timeout=60) as client:
        yield client


@pytest.mark.parametrize("completion", [False, True])
@pytest.mark.parametrize("output", ["deltas", "final"])
def test_through_the_server(client, cut_ids, completion, output):
    thinking = None if completion else False
    opened = open_message("qwen3", completion=completion, output=output, thinking=thinking)
    messages = [pb.ParseRequest(open=opened)]
    messages += [pb.ParseRequest(steps=[logprob_step([tid], [-0.5], [])]) for tid in cut_ids]
    messages.append(pb.ParseRequest(finish=finish_message("length")))
    replies = list(client.parse(messages))
    final = replies[-1].final
    entries = [lp for r in replies for d in r.deltas for lp in d.logprobs] + list(final.logprobs)
    assert [e.token_id for e in entries] == cut_ids
    assert final.message.content == "Cut in the middle of \ufffd"
    assert "".join(e.token for e in entries) == final.message.content
