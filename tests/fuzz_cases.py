"""What ``test_fuzz.py`` generates, and how it drives the four RPCs: hypothesis strategies for client
messages of every RPC, ``ParseBatch`` streams, tool schemas, and model outputs shaped like each
family's calls; byte mutation; and the helpers that replay a batch session as a ``Parse`` stream.

Kept apart from the tests so that each test reads as its invariant.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import grpc
from hypothesis import strategies as st

from hostile_outputs import deep_array, samples
from parsetier_api.v1 import parsetier_pb2 as pb

SERVICE = "/parsetier.v1.ParserService/"
TYPES = {
    "Parse": (pb.ParseRequest, pb.ParseResponse, True),
    "ParseOnce": (pb.ParseOnceRequest, pb.ParseOnceResponse, False),
    "ParseBatch": (pb.ParseBatchRequest, pb.ParseBatchResponse, True),
    "BuildConstraint": (pb.BuildConstraintRequest, pb.BuildConstraintResponse, False),
    "Render": (pb.RenderRequest, pb.RenderResponse, False),
}
"""Each RPC: request type, response type, whether it is a stream."""


def call(channel: grpc.Channel, rpc: str, requests: Sequence, raw: bool = False) -> list:
    """Send ``requests`` on ``rpc`` (serialized bytes when ``raw``); the replies, or RpcError."""
    request, response, stream = TYPES[rpc]
    serialize = bytes if raw else request.SerializeToString
    method = channel.stream_stream if stream else channel.unary_unary
    invoke = method(SERVICE + rpc, request_serializer=serialize, response_deserializer=response.FromString)
    if stream:
        return list(invoke(iter(requests), timeout=120))
    [only] = requests
    return [invoke(only, timeout=120)]


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
ID_STEPS = st.builds(pb.Step, token_ids=IDS)
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
    order at all. Half of the well-ordered ones carry token ids only (no text steps), so they can
    be compared with ``ParseOnce``."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.lists(client_message(), max_size=6))
    step = draw(st.sampled_from([STEPS, ID_STEPS]))
    middle = [pb.ParseRequest(steps=s) for s in draw(st.lists(st.lists(step, max_size=4), max_size=6))]
    first = pb.ParseRequest(open=draw(st.one_of(OPENS, GOOD_OPENS)))
    last = pb.ParseRequest(finish=draw(FINISHES))
    return [first, *middle, last]


ONCE_REQUESTS = st.builds(
    pb.ParseOnceRequest,
    open=st.one_of(OPENS, GOOD_OPENS),
    token_ids=IDS,
    text=st.one_of(st.just(""), st.text(max_size=20)),
    finish=FINISHES,
)

# --------------------------------------------------------------------------- ParseBatch streams

KEYS = st.sampled_from(["a", "b", "c", "a", "b", ""])  # "" is malformed framing: ends the stream


@st.composite
def batch_entry(draw, key: str) -> pb.SessionInput:
    entry = pb.SessionInput(key=key, steps=draw(st.lists(ID_STEPS, max_size=3)))
    if draw(st.integers(0, 2)) == 0:
        entry.open.CopyFrom(draw(st.one_of(GOOD_OPENS, OPENS)))
    if draw(st.integers(0, 4)) == 0:
        entry.finish.CopyFrom(draw(FINISHES))
    if draw(st.integers(0, 12)) == 0:
        entry.cancel = True
    return entry


@st.composite
def batch_message(draw) -> pb.ParseBatchRequest:
    """Entries (keys may repeat: a duplicate ends that session) and sometimes packed steps, whose
    ``token_counts`` are sometimes wrong (malformed framing)."""
    message = pb.ParseBatchRequest()
    for key in draw(st.lists(KEYS, max_size=4)):
        message.sessions.append(draw(batch_entry(key)))
    if draw(st.integers(0, 2)) == 0:
        keys = draw(st.lists(KEYS, max_size=3))
        steps = [draw(IDS) for _ in keys]
        message.packed.keys.extend(keys)
        message.packed.token_ids.extend(i for ids in steps for i in ids)
        counts = draw(st.sampled_from(["none", "right", "wrong"]))
        if counts == "right":
            message.packed.token_counts.extend(len(ids) for ids in steps)
        elif counts == "wrong":
            message.packed.token_counts.extend(draw(st.lists(st.integers(0, 20), max_size=4)))
    return message


@st.composite
def batch_streams(draw) -> list[pb.ParseBatchRequest]:
    """Mostly sessions that open first and finish last, interleaved; with every kind of mistake."""
    messages = draw(st.lists(batch_message(), max_size=3))
    for key in draw(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True)):
        opener = pb.ParseBatchRequest(sessions=[pb.SessionInput(key=key, open=draw(GOOD_OPENS))])
        messages.insert(draw(st.integers(0, len(messages))), opener)
        closer = pb.ParseBatchRequest(sessions=[pb.SessionInput(key=key, finish=draw(FINISHES))])
        messages.append(closer)
    return messages


@dataclass
class BatchSession:
    """One session of a ``ParseBatch`` stream as the client saw it, and its inputs as ``Parse``
    messages (one per batch message that carried an entry for it)."""

    key: str
    messages: list[pb.ParseRequest] = field(default_factory=list)
    final: pb.Final | None = None
    code: int | None = None
    clean: bool = True
    """No duplicate entry and no cancel: a ``Parse`` stream fed the same messages must agree."""


def batch_sessions(requests: Sequence[pb.ParseBatchRequest], replies: Sequence) -> list[BatchSession]:
    """Split a completed stream into its sessions: a key's entries from one that the server ended
    (a final or a status) to the next. Only for streams that ended OK, one reply per request."""
    ended: list[BatchSession] = []
    live: dict[str, BatchSession] = {}
    for request, reply in zip(requests, replies, strict=True):
        inputs: dict[str, list[pb.SessionInput]] = {}
        for entry in request.sessions:
            inputs.setdefault(entry.key, []).append(entry)
        counts = list(request.packed.token_counts) or [1] * len(request.packed.keys)
        ids = iter(request.packed.token_ids)
        for key, count in zip(request.packed.keys, counts, strict=True):
            step = [next(ids) for _ in range(count)] if request.packed.token_counts else [next(ids)]
            inputs.setdefault(key, []).append(pb.SessionInput(key=key, steps=[pb.Step(token_ids=step)]))
        for key, entries in inputs.items():
            session = live.setdefault(key, BatchSession(key))
            first = entries[0]
            message = pb.ParseRequest(steps=first.steps)
            if first.HasField("open"):
                message.open.CopyFrom(first.open)
            if first.HasField("finish"):
                message.finish.CopyFrom(first.finish)
            session.messages.append(message)
            session.clean &= len(entries) == 1 and not any(e.cancel for e in entries)
        for output in reply.sessions:
            session = live.get(output.key)
            if session is None:
                continue
            if output.HasField("final"):
                session.final = output.final
            if output.HasField("status") and output.status.code:
                session.code = output.status.code
            if output.HasField("final") or session.code is not None:
                ended.append(live.pop(output.key))
    return ended


# --------------------------------------------------------------------------- byte mutation


def mutate(data: bytes, rng: random.Random) -> bytes:
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


# --------------------------------------------------------------------------- tool schemas

NAMES = st.sampled_from(["f", "get_weather", "g-1", "a b", "<tool_call>", "ünï", "x" * 70])
PROPS = st.sampled_from(["city", "a", "b", "n", "with space", "</parameter>", "$ref"])


def _mostly(good, bad):
    """``good`` six times in seven: most schemas are valid, so that most answers get compiled."""
    return st.one_of(*[good] * 6, bad)


LEAF = st.fixed_dictionaries(
    {},
    optional={
        "type": _mostly(
            st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"]),
            st.sampled_from(["date", 5, ["string", "null"], []]),
        ),
        "enum": st.lists(st.one_of(st.text(max_size=5), st.integers(), st.none()), max_size=3),
        "const": st.one_of(st.text(max_size=5), st.integers()),
        "pattern": st.sampled_from(["^[a-z]+$", "((", ".*", "\\d{3}", "\\p{L}+"]),
        "format": st.sampled_from(["date-time", "email", "uuid", "no-such-format"]),
        "minLength": _mostly(st.integers(0, 5), st.just(-1)),
        "maxLength": st.integers(0, 5),
        "minimum": st.integers(-5, 5),
        "maximum": st.integers(-5, 5),
        "$ref": st.sampled_from(
            ["#/$defs/a", "#/$defs/a", "#/$defs/missing", "https://example.com/s.json", "#", "#/properties"]
        ),
        "description": st.text(max_size=10),
    },
)


def _object(inner):
    return st.fixed_dictionaries(
        {"type": st.sampled_from(["object", "object", None])},
        optional={
            "properties": _mostly(st.dictionaries(PROPS, inner, max_size=3), st.integers(0, 5)),
            "required": _mostly(st.lists(PROPS, max_size=3, unique=True), st.just("a")),
            "additionalProperties": st.one_of(st.booleans(), inner),
            "items": inner,
            "anyOf": st.lists(inner, max_size=3),
            "allOf": st.lists(inner, max_size=2),
            "$defs": st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
            "minItems": st.integers(0, 3),
        },
    ).map(lambda d: {k: v for k, v in d.items() if v is not None})


SCHEMAS = st.recursive(LEAF | st.booleans(), _object, max_leaves=8)
CONSTRAINT_MODELS = st.sampled_from(
    ["qwen3", "qwen3-coder", "glm-4.5", "gpt-oss", "deepseek-v3.1", "kimi-k2", "llama4", "minimax-m2"]
)


@st.composite
def constraint_requests(draw) -> pb.BuildConstraintRequest:
    tools = []
    for name in draw(st.lists(NAMES, min_size=0, max_size=3)):
        schema = draw(st.one_of(_object(SCHEMAS), SCHEMAS))
        text = json.dumps(schema) if draw(st.integers(0, 15)) else draw(JSONISH)
        tools.append(pb.Tool(name=name, parameters_json=text, strict=draw(st.integers(0, 3)) > 0))
    open_ = pb.Open(model=draw(CONSTRAINT_MODELS), tools=tools)
    choice = draw(st.sampled_from(["auto", "none", "required", "named", "missing"]))
    if choice == "named" and tools:
        open_.tool_choice.function_name = tools[0].name
    elif choice == "missing":
        open_.tool_choice.function_name = "nowhere"
    elif choice != "auto":
        open_.tool_choice.mode = (
            pb.TOOL_CHOICE_MODE_NONE if choice == "none" else pb.TOOL_CHOICE_MODE_REQUIRED
        )
    if draw(st.booleans()):
        open_.parallel_tool_calls = draw(st.booleans())
    if draw(st.booleans()):
        open_.thinking = draw(st.booleans())
    return pb.BuildConstraintRequest(open=open_)


# --------------------------------------------------------------------------- model outputs


@functools.cache
def _family_ids(preset: str, payload: str) -> tuple[int, ...]:
    sample = samples()[preset]
    text = sample.text.replace("\x00VALUE\x00", payload)
    return tuple(sample.model.tokenizer.encode(text, add_special_tokens=False).ids)


PAYLOADS = ["1", '"Zürich"', "[1, 2]", '{"a": {"b": null}}', "12.5e3", '"</x> \\n 致死"', deep_array(40)]


@st.composite
def family_output(draw) -> tuple[str, list[int], pb.Open]:
    """A preset, an output shaped like its family's call (its own sample, mutated: markers, text
    and random ids inserted, spans deleted or repeated), and an Open with its sample's tools."""
    preset = draw(st.sampled_from(sorted(samples())))
    sample = samples()[preset]
    model = sample.model
    ids = list(_family_ids(preset, draw(st.sampled_from(PAYLOADS))))
    markers = sorted(model.grammar.token_text) or [0]
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(ids)))
        kind = draw(st.integers(0, 4))
        if kind == 0:
            ids[at:at] = draw(st.lists(st.sampled_from(markers), min_size=1, max_size=3))
        elif kind == 1:
            ids[at:at] = draw(st.lists(st.integers(0, model.vocab_size - 1), min_size=1, max_size=4))
        elif kind == 2 and ids:
            del ids[at : at + draw(st.integers(1, 6))]
        elif kind == 3:
            ids[at:at] = ids[max(0, at - 8) : at]
        else:
            text = draw(st.sampled_from([" text 1. word", "\n", "  ", "}}\n", "致死", "\ufffd", "<think>"]))
            ids[at:at] = model.tokenizer.encode(text, add_special_tokens=False).ids
    if model.grammar.known_ids is not None:
        ids = [i for i in ids if i in model.grammar.known_ids]
    open_ = pb.Open(
        model=preset,
        request_id="fuzz",
        tools=[pb.Tool(name=t.name, parameters_json=json.dumps(t.parameters)) for t in sample.options.tools],
        include_stop_text=draw(st.booleans()),
    )
    if sample.options.thinking is not None:
        open_.thinking = sample.options.thinking
    return preset, ids, open_


def splits(ids: Sequence[int], rng: random.Random) -> list[list[int]]:
    """``ids`` cut at random places (often one id per step, sometimes few cuts)."""
    if not ids:
        return []
    if rng.random() < 0.3:
        return [[i] for i in ids]
    cuts = (
        sorted(rng.sample(range(1, len(ids)), min(len(ids) - 1, rng.randint(1, 12)))) if len(ids) > 1 else []
    )
    return [list(ids[a:b]) for a, b in zip([0, *cuts], [*cuts, len(ids)], strict=True)]


def as_messages(open_: pb.Open, steps: Iterable[list[int]], finish: pb.Finish, rng: random.Random) -> list:
    """A ``Parse`` stream: the Open, the steps grouped into messages of 1–3 steps, the Finish."""
    messages = [pb.ParseRequest(open=open_)]
    steps = list(steps)
    while steps:
        n = rng.randint(1, 3)
        messages.append(pb.ParseRequest(steps=[pb.Step(token_ids=s) for s in steps[:n]]))
        steps = steps[n:]
    messages.append(pb.ParseRequest(finish=finish))
    return messages


# --------------------------------------------------------------------------- Render request bodies

_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
        },
    },
}
_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
_OBJECT = {"type": "object"}
RENDER_SEEDS: dict[int, dict] = {
    pb.WIRE_DIALECT_OPENAI_CHAT: {
        "model": "m", "tools": [_TOOL], "tool_choice": "auto", "max_tokens": 16, "stop": ["x"],
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": [{"type": "text", "text": "hi <tool_call>"}]},
            {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
        "chat_template_kwargs": {"enable_thinking": True},
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": _OBJECT}},
    },
    pb.WIRE_DIALECT_OPENAI_COMPLETIONS: {"model": "m", "prompt": "Once upon", "max_tokens": 8, "logprobs": 2},
    pb.WIRE_DIALECT_ANTHROPIC_MESSAGES: {
        "model": "m", "max_tokens": 32, "system": [{"type": "text", "text": "S"}],
        "tools": [{"name": "get_weather", "input_schema": _TOOL["function"]["parameters"]}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "thinking": {"type": "enabled", "budget_tokens": 9},
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}]},
        ],
    },
    pb.WIRE_DIALECT_OPENAI_RESPONSES: {
        "model": "m", "instructions": "S", "tools": [{"type": "function", **_TOOL["function"]}],
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ],
        "text": {"format": {"type": "json_schema", "name": "a", "schema": _OBJECT}},
    },
}  # fmt: skip
_ODD_VALUES = [
    None, 0, -1, 2**70, 1.5, float("1e308"), True, "", "<|im_end|>", "</think>", "ü" * 3, [], {}, [None],
    {"type": "image_url"}, {"type": "function"}, "{not json", '{"a": [1, 2]}', "[1]", "x" * 300,
]  # fmt: skip
RENDER_MODELS = st.sampled_from([
    "qwen3", "qwen3", "qwen3.5", "glm-4.5", "deepseek-v3.1", "minimax-m2", "deepseek-v4", "mistral-7b-v0.3",
    "qwen3-coder", "gpt-oss", "no-such-model",
])  # fmt: skip


def _nodes(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _nodes(item, (*path, i))


def mutate_json(value, rng: random.Random):
    """``value`` with a few of its nodes replaced by odd values, deleted or duplicated."""
    import copy

    value = copy.deepcopy(value)
    for _ in range(rng.randint(1, 4)):
        nodes = [p for p, _ in _nodes(value) if p]
        if not nodes:
            break
        path = rng.choice(nodes)
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        action = rng.randint(0, 3)
        if action == 0:
            parent[path[-1]] = rng.choice(_ODD_VALUES)
        elif action == 1 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == 2 and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice([v for _, v in _nodes(value)]))
    return value


@st.composite
def render_requests(draw) -> pb.RenderRequest:
    """A Render call: a dialect's seed body mutated as JSON (and sometimes as bytes), any dialect
    value, any model; sometimes a request template."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    dialect = draw(st.sampled_from([*RENDER_SEEDS, pb.WIRE_DIALECT_UNSPECIFIED, 7]))
    seed = RENDER_SEEDS.get(dialect, RENDER_SEEDS[pb.WIRE_DIALECT_OPENAI_CHAT])
    body = json.dumps(mutate_json(seed, rng) if rng.random() < 0.9 else seed).encode()
    if rng.random() < 0.2:
        body = mutate(body, rng)
    template = draw(st.sampled_from(["", "", "", "{{ messages[0].content }}", "{% for %}"]))
    return pb.RenderRequest(
        model=draw(RENDER_MODELS), dialect=dialect, request_json=body, chat_template=template,
        request_id=draw(st.sampled_from(["", "r-1"])), return_prompt_text=draw(st.booleans()),
    )  # fmt: skip
