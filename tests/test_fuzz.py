"""Fuzzing every RPC through a live server, and hostile model outputs through every family's session.

The invariants: never INTERNAL or UNKNOWN, never an exception out of a session; what succeeds is
consistent (deltas join to the final message), split-invariant (any grouping of the same ids into
steps and messages gives the final message ``ParseOnce`` gives, ``complete_tool_calls`` on and
off), the same on ``ParseBatch`` as on ``Parse``, and every constraint ``BuildConstraint`` answers
compiles in llguidance on the model's tokenizer. Generators are in ``fuzz_cases.py``.

``make test`` runs ``PARSETIER_FUZZ_EXAMPLES`` cases per test (default 40: the same cases every
run); ``make fuzz`` runs ``FUZZ_EXAMPLES`` per test (default 50,000: 300,000 cases over the six
tests), exploring. With ``PARSETIER_FUZZ_REPORT=path`` the counts of status codes and outcomes are
written there as JSON as each test ends and every 500 calls (a run cut short still reports).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import time
from collections import Counter

import grpc
import llguidance
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fuzz_cases as fc
from engine_helpers import check_consistent, run
from hostile_outputs import deep_array, deep_object, samples
from parsetier_api.v1 import parsetier_pb2 as pb
from property_settings import property_settings

pytestmark = pytest.mark.slow  # the fuzz suite

EXAMPLES = int(os.environ.get("PARSETIER_FUZZ_EXAMPLES", "40"))
FUZZ = property_settings(EXAMPLES)  # CI: the same cases every run; long runs explore
NEVER = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
COUNTS: Counter = Counter()
CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


@pytest.fixture(scope="module")
def channel(grpc_server):
    """One connection for every example: connecting is slower than a session."""
    with grpc.insecure_channel(grpc_server.target) as channel:
        yield channel


def _save() -> None:
    path = os.environ.get("PARSETIER_FUZZ_REPORT")
    if path:
        with open(path, "w") as out:
            json.dump(dict(sorted(COUNTS.items())), out, indent=1)


@pytest.fixture(autouse=True)
def report():
    yield
    _save()


def _record(where: str, code: grpc.StatusCode) -> None:
    COUNTS[f"{where} {code.name}"] += 1
    COUNTS["calls"] += 1
    if COUNTS["calls"] % 500 == 0:  # a long run cut short still reports
        _save()
    assert code not in NEVER, f"{where}: {code}"


def _send(channel, rpc: str, requests, raw: bool = False) -> tuple[grpc.StatusCode, list]:
    """The call's status and replies. The in-process server refuses with UNAVAILABLE while its
    loop lags (a tokenizer built in this process holds the GIL): retried, as its message asks."""
    for attempt in range(40):
        try:
            return grpc.StatusCode.OK, fc.call(channel, rpc, requests, raw)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE and "overloaded" in (exc.details() or ""):
                time.sleep(0.05 * (attempt + 1))
                continue
            return exc.code(), []
    raise AssertionError(f"{rpc}: the server stayed overloaded")


def _final(channel, rpc: str, requests) -> pb.Final | None:
    code, replies = _send(channel, rpc, requests)
    _record(f"{rpc} (replay)", code)
    if code is not grpc.StatusCode.OK:
        return None
    return replies[-1].final


def _ids_only(messages: list[pb.ParseRequest]) -> bool:
    return all(not s.text and not s.text_tokens for m in messages for s in m.steps)


def _check_splits(channel, open_: pb.Open, ids: list[int], finish: pb.Finish, rng: random.Random) -> None:
    """Split invariance through the service: ``ParseOnce`` of the whole output against a ``Parse``
    stream of a random split, ``complete_tool_calls`` off and on."""
    for complete in (False, True):
        opened = pb.Open()
        opened.CopyFrom(open_)
        opened.complete_tool_calls = complete
        opened.request_id = opened.request_id or "fuzz"  # call ids seeded alike in both calls
        once = _final(channel, "ParseOnce", [pb.ParseOnceRequest(open=opened, token_ids=ids, finish=finish)])
        streamed = _final(channel, "Parse", fc.as_messages(opened, fc.splits(ids, rng), finish, rng))
        assert (once is None) == (streamed is None), "ParseOnce and Parse disagree on success"
        if once is not None:
            assert streamed == once, f"split difference: {opened.model} complete={complete} ids={ids}"
            COUNTS["split compared"] += 1


# --------------------------------------------------------------------------- Parse


@FUZZ
@given(messages=fc.sessions(), seed=st.integers(0, 2**32))
def test_fuzz_message_sequences(channel, messages, seed):
    code, replies = _send(channel, "Parse", messages)
    _record("Parse", code)
    if code is not grpc.StatusCode.OK:
        return
    assert [r.sequence for r in replies] == list(range(1, len(replies) + 1))
    if replies and replies[-1].HasField("final") and _ids_only(messages) and messages[0].HasField("open"):
        ids = [i for m in messages for s in m.steps for i in s.token_ids]
        _check_splits(channel, messages[0].open, ids, messages[-1].finish, random.Random(seed))


@FUZZ
@given(case=fc.family_output(), reason=st.integers(1, 3), seed=st.integers(0, 2**32))
def test_fuzz_family_output_splits(channel, case, reason, seed):
    """Outputs shaped like each family's calls (mutated), split at random, against ``ParseOnce``."""
    preset, ids, open_ = case
    _check_splits(channel, open_, ids, pb.Finish(reason=reason), random.Random(seed))
    COUNTS[f"family output {preset}"] += 1


# --------------------------------------------------------------------------- raw bytes, every RPC


@st.composite
def _seed_message(draw, rpc: str) -> bytes:
    if rpc == "Parse":
        return draw(fc.client_message()).SerializeToString()
    if rpc == "ParseOnce":
        return draw(fc.ONCE_REQUESTS).SerializeToString()
    if rpc == "ParseBatch":
        return draw(fc.batch_message()).SerializeToString()
    if rpc == "Render":
        return draw(fc.render_requests()).SerializeToString()
    return draw(fc.constraint_requests()).SerializeToString()


GOOD_FIRST = {
    "Parse": pb.ParseRequest(open=pb.Open(model="qwen3")).SerializeToString(),
    "ParseBatch": pb.ParseBatchRequest(
        sessions=[pb.SessionInput(key="a", open=pb.Open(model="qwen3"))]
    ).SerializeToString(),
}


@FUZZ
@given(data=st.data(), rpc=st.sampled_from(sorted(fc.TYPES)), seed=st.integers(0, 2**32))
def test_fuzz_raw_bytes(channel, data, rpc, seed):
    """Byte-mutated (or random) messages on all four RPCs; on the streams, sometimes after a good
    first message."""
    rng = random.Random(seed)
    payload = data.draw(_seed_message(rpc))
    payload = fc.mutate(payload, rng) if rng.random() < 0.8 else data.draw(st.binary(max_size=64))
    requests = [payload]
    if rpc in GOOD_FIRST and rng.random() < 0.5:
        requests.insert(0, GOOD_FIRST[rpc])
    code, _ = _send(channel, rpc, requests, raw=True)
    _record(f"raw {rpc}", code)


# --------------------------------------------------------------------------- ParseBatch


def _comparable(final: pb.Final) -> pb.Final:
    """A final without its call ids: a session opened with neither a request id nor prompt ids
    gets random ones (docs/engine.md, "Tool call ids"), on each stream its own."""
    copy = pb.Final()
    copy.CopyFrom(final)
    for call in copy.message.tool_calls:
        call.id = ""
    return copy


@FUZZ
@given(requests=fc.batch_streams())
def test_fuzz_batch_streams(channel, requests):
    """Random ``ParseBatch`` streams; every session that ended, replayed as a ``Parse`` stream of
    the same messages, ends the same way (the same final, or the same status code)."""
    code, replies = _send(channel, "ParseBatch", requests)
    _record("ParseBatch", code)
    if (
        code is not grpc.StatusCode.OK
        or len(replies) != len(requests)
        or any(r.HasField("part") for r in replies)
    ):
        return
    for session in fc.batch_sessions(requests, replies):
        name = "OK" if session.code is None else CODE_NAMES[session.code]
        COUNTS[f"ParseBatch session {name}"] += 1
        assert name not in ("INTERNAL", "UNKNOWN"), session
        if not session.clean:
            continue
        parse_code, parse_replies = _send(channel, "Parse", session.messages)
        if session.final is not None:
            assert parse_code is grpc.StatusCode.OK, (parse_code, session)
            assert _comparable(parse_replies[-1].final) == _comparable(session.final), session
        else:
            assert parse_code.value[0] == session.code, (parse_code, session)
        COUNTS["ParseBatch session compared with Parse"] += 1


# --------------------------------------------------------------------------- BuildConstraint


@FUZZ
@given(request=fc.render_requests())
def test_fuzz_render(channel, request):
    """Mutated request bodies in all four dialects (and bad dialects, models, templates): a status,
    never INTERNAL; what renders carries the ids the Open's tail and counts agree with."""
    code, replies = _send(channel, "Render", [request])
    _record("Render", code)
    if code is grpc.StatusCode.OK:
        reply = replies[-1]
        assert reply.prompt_tokens == len(reply.prompt_token_ids) == reply.open.wire.prompt_tokens
        assert list(reply.open.prompt_token_ids) == list(reply.prompt_token_ids)[-512:]


@functools.cache
def _ll_tokenizer(registry, model: str) -> llguidance.LLTokenizer:
    loaded = registry.get(model)
    return llguidance.LLTokenizer(loaded.tokenizer.to_str(), n_vocab=loaded.vocab_size)


@FUZZ
@given(request=fc.constraint_requests())
def test_fuzz_build_constraint(channel, registry, request):
    """Random tools and schemas: a refusal has a clear status; every OK answer compiles in
    llguidance on the model's tokenizer."""
    code, replies = _send(channel, "BuildConstraint", [request])
    _record("BuildConstraint", code)
    if code is not grpc.StatusCode.OK:
        return
    matcher = llguidance.LLMatcher(
        _ll_tokenizer(registry, request.open.model), replies[0].lark_grammar, log_level=0
    )
    assert not matcher.is_error(), f"uncompilable grammar for {request}: {matcher.get_error()}"
    COUNTS["BuildConstraint compiled"] += 1


# --------------------------------------------------------------------------- model outputs

PRESETS = sorted(samples())


@functools.cache
def _byte_tokens(preset: str) -> tuple[int, ...]:
    """Ids whose text alone is not valid UTF-8 (single bytes of multi-byte characters)."""
    model = samples()[preset].model
    found = []
    for tid in range(min(model.vocab_size, 2048)):
        try:
            if "\ufffd" in model.tokenizer.decode([tid], skip_special_tokens=False):
                found.append(tid)
        except Exception:
            continue
    return tuple(found) or (0,)


@st.composite
def hostile_output(draw):
    preset = draw(st.sampled_from(PRESETS))
    sample = samples()[preset]
    model = sample.model
    tok = model.tokenizer
    markers = sorted(model.grammar.token_text) or [0]
    pieces = draw(
        st.lists(
            st.one_of(
                st.builds(deep_array, st.integers(1, 3000)).map(
                    lambda t: tok.encode(t, add_special_tokens=False).ids
                ),
                st.builds(deep_object, st.integers(1, 600)).map(
                    lambda t: tok.encode(t, add_special_tokens=False).ids
                ),
                st.integers(1, 6000).map(lambda n: tok.encode("9" * n, add_special_tokens=False).ids),
                st.sampled_from(
                    ["1e99999", "-0.0e-99999", "NaN", "Infinity", '"\\ud800"', "{'a': None}"]
                ).map(lambda t: tok.encode(t, add_special_tokens=False).ids),
                st.lists(st.sampled_from(markers), min_size=1, max_size=12),  # marker soup
                st.lists(st.sampled_from(_byte_tokens(preset)), min_size=1, max_size=6),  # broken UTF-8
                st.lists(st.integers(0, model.vocab_size - 1), max_size=8),
            ),
            min_size=1,
            max_size=5,
        )
    )
    base = tok.encode(sample.text.replace("\x00VALUE\x00", "1"), add_special_tokens=False).ids
    ids = list(base)
    for piece in pieces:
        at = draw(st.integers(0, len(ids)))
        ids[at:at] = [i for i in piece if i in model.grammar.token_text or i < model.vocab_size]
    if model.grammar.known_ids is not None:
        ids = [i for i in ids if i in model.grammar.known_ids]
    seed = draw(st.integers(0, 2**32))
    reason = draw(st.sampled_from(["stop", "length", "abort"]))
    complete = draw(st.booleans())
    return sample, ids, seed, reason, complete


@FUZZ
@given(case=hostile_output())
def test_fuzz_model_outputs(case):
    """Hostile outputs through the session: consistent, and the same final as one feed of all ids."""
    sample, ids, seed, reason, complete = case
    # A request id: a session with neither one nor prompt ids gets random call ids.
    options = dataclasses.replace(sample.options, complete_tool_calls=complete, request_id="fuzz")
    streamed = run(sample.model, fc.splits(ids, random.Random(seed)), options, reason)
    check_consistent(streamed, written_ids=sample.model.grammar.grammar.tool_call_id == "format")
    whole = run(sample.model, [ids], options, reason)
    assert streamed.final == whole.final, f"split difference on {sample.preset}: {ids}"
    COUNTS[f"model output {sample.preset} ok"] += 1
    COUNTS["model output ok"] += 1
    if COUNTS["model output ok"] % 500 == 0:
        _save()
