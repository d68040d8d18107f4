"""Fuzzing: whole client message sequences and raw bytes through a live server, and hostile model
outputs through every family's session. The invariant: never INTERNAL or UNKNOWN, never an
exception out of a session; what succeeds is consistent (deltas join to the final message).

CI runs a small number of examples per test; ``PARSETIER_FUZZ_EXAMPLES`` sets it (``make fuzz``
runs 25,000 per test, 100,000 in all). With ``PARSETIER_FUZZ_REPORT=path`` the counts of status
codes and outcomes are written there as JSON when the run ends.
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections import Counter

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_helpers import check_consistent, run
from hostile_outputs import deep_array, deep_object, samples
from parsetier_api.v1 import parsetier_pb2 as pb

EXAMPLES = int(os.environ.get("PARSETIER_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 100,  # CI: the same cases every run; long runs explore
    suppress_health_check=list(HealthCheck),
    database=None,
)
NEVER = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
SERVICE = "/parsetier.v1.ParserService/"
COUNTS: Counter = Counter()


@pytest.fixture(scope="module")
def channel(grpc_server):
    """One connection for every example: connecting is slower than a session."""
    with grpc.insecure_channel(grpc_server.target) as channel:
        yield channel


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    path = os.environ.get("PARSETIER_FUZZ_REPORT")
    if path:
        with open(path, "w") as out:
            json.dump(dict(sorted(COUNTS.items())), out, indent=1)


# --------------------------------------------------------------------------- client messages

MODELS = st.sampled_from(["qwen3", "qwen3-coder", "glm-4.5", "gpt-oss", "no-such-model", ""])
IDS = st.lists(
    st.one_of(
        st.integers(0, 151_700),
        st.sampled_from([151657, 151658, 151667, 151668, 151645]),
        st.integers(0, 2**32 - 1),
    ),
    max_size=12,
)
JSONISH = st.one_of(
    st.sampled_from(
        ['{"type": "object"}', "[]", "", "null", "0", '{"a":', "[" * 300, '{"x": ' + "9" * 5000 + "}"]
    ),
    st.text(max_size=30),
)
TOOLS = st.lists(
    st.builds(pb.Tool, name=st.sampled_from(["f", "g", "", "get_weather"]), parameters_json=JSONISH),
    max_size=3,
)
OPENS = st.builds(
    pb.Open,
    model=MODELS,
    tools=TOOLS,
    tools_json=st.one_of(st.just(""), JSONISH, st.just('[{"name": "f", "parameters": []}]')),
    output=st.integers(0, 5),
    prompt_token_ids=IDS,
    include_stop_text=st.booleans(),
    complete_tool_calls=st.booleans(),
    request_id=st.text(max_size=10),
)
GOOD_OPENS = st.builds(
    pb.Open,
    model=st.sampled_from(["qwen3", "qwen3-coder", "gpt-oss"]),
    tools_json=st.just('[{"name": "f", "parameters": {"type": "object"}}]'),
    output=st.integers(1, 4),
    complete_tool_calls=st.booleans(),
)
STEPS = st.builds(pb.Step, token_ids=IDS, text=st.text(max_size=20), text_tokens=st.integers(0, 3))
FINISHES = st.builds(pb.Finish, reason=st.integers(0, 6))


@st.composite
def client_message(draw) -> pb.ParseRequest:
    message = pb.ParseRequest(steps=draw(st.lists(STEPS, max_size=4)))
    if draw(st.integers(0, 5)) == 0:
        message.open.CopyFrom(draw(OPENS))
    if draw(st.integers(0, 4)) == 0:
        message.finish.CopyFrom(draw(FINISHES))
    return message


@st.composite
def sessions(draw) -> list[pb.ParseRequest]:
    """Mostly well-ordered sessions (open first, finish last) with random content; sometimes any
    order at all."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.lists(client_message(), max_size=6))
    middle = [
        pb.ParseRequest(steps=steps) for steps in draw(st.lists(st.lists(STEPS, max_size=4), max_size=6))
    ]
    first = pb.ParseRequest(open=draw(st.one_of(OPENS, GOOD_OPENS)))
    last = pb.ParseRequest(finish=draw(FINISHES))
    return [first, *middle, last]


def _record(where: str, code: grpc.StatusCode) -> None:
    COUNTS[f"{where} {code.name}"] += 1
    assert code not in NEVER, f"{where}: {code}"


@FUZZ
@given(messages=sessions())
def test_fuzz_message_sequences(grpc_server, messages):
    with grpc.insecure_channel(grpc_server.target) as channel:
        call = channel.stream_stream(
            SERVICE + "Parse",
            request_serializer=pb.ParseRequest.SerializeToString,
            response_deserializer=pb.ParseResponse.FromString,
        )
        try:
            replies = list(call(iter(messages), timeout=60))
        except grpc.RpcError as exc:
            _record("Parse", exc.code())
            return
    _record("Parse", grpc.StatusCode.OK)
    sequences = [r.sequence for r in replies]
    assert sequences == list(range(1, len(replies) + 1))


def _mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.randint(0, 3)
        if action == 0 and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif action == 1:
            out.insert(rng.randint(0, len(out)), rng.randrange(256))
        elif action == 2 and out:
            del out[rng.randrange(len(out)) :]
        else:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(out)


@FUZZ
@given(message=client_message(), seed=st.integers(0, 2**32), raw=st.binary(max_size=64), unary=st.booleans())
def test_fuzz_raw_bytes(grpc_server, message, seed, raw, unary):
    rng = random.Random(seed)
    good_open = pb.ParseRequest(open=pb.Open(model="qwen3")).SerializeToString()
    payload = _mutate(message.SerializeToString(), rng) if rng.random() < 0.7 else raw
    with grpc.insecure_channel(grpc_server.target) as channel:
        try:
            if unary:
                once = pb.ParseOnceRequest(open=pb.Open(model="qwen3"), token_ids=[9707, 1879])
                call = channel.unary_unary(
                    SERVICE + "ParseOnce", request_serializer=bytes, response_deserializer=bytes
                )
                call(_mutate(once.SerializeToString(), rng) if rng.random() < 0.7 else raw, timeout=60)
            else:
                call = channel.stream_stream(
                    SERVICE + "Parse", request_serializer=bytes, response_deserializer=bytes
                )
                list(call(iter([good_open, payload]), timeout=60))
        except grpc.RpcError as exc:
            _record("raw ParseOnce" if unary else "raw Parse", exc.code())
            return
    _record("raw ParseOnce" if unary else "raw Parse", grpc.StatusCode.OK)


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
    split = draw(st.integers(1, 64))
    reason = draw(st.sampled_from(["stop", "length", "abort"]))
    complete = draw(st.booleans())
    return sample, ids, split, reason, complete


@FUZZ
@given(case=hostile_output())
def test_fuzz_model_outputs(case):
    import dataclasses

    sample, ids, split, reason, complete = case
    options = dataclasses.replace(sample.options, complete_tool_calls=complete)
    groups = [ids[i : i + split] for i in range(0, len(ids), split)]
    streamed = run(sample.model, groups, options, reason)
    check_consistent(streamed, written_ids=sample.model.grammar.grammar.tool_call_id == "format")
    COUNTS[f"model output {sample.preset} ok"] += 1
    COUNTS["model output ok"] += 1
