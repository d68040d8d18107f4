"""``ParseBatch`` requests read by the native core (``_core.read_batch``, through
``decoding.read_batch_request``) are what protobuf decodes from the same bytes: equal entries,
keys and ids whenever the core reads them, and whenever it declines (garbage, a group, an id
beyond 32 bits, a key that is no UTF-8, counts that do not frame the ids) the bytes take
protobuf's path, so the error and its text are the ones the server always gave."""

from __future__ import annotations

import random

import pytest

from parsetier import native
from parsetier.protocol.batch import Packed, ReadBatch
from parsetier.service.decoding import Undecodable, read_batch_request, tolerant_deserializer
from parsetier.status import StatusError
from parsetier_api.v1 import parsetier_pb2 as pb


def test_the_core_reads_batch_requests() -> None:
    """``make test`` builds the core, so a missing one (or one of other sources, which
    ``core_module`` refuses) would quietly send every request down protobuf's path: fail rather
    than skip the tests below."""
    assert native._core is not None, f"no native core: {native.unavailable}"


upb = tolerant_deserializer(pb.ParseBatchRequest)


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    tag = _varint(number << 3 | wire)
    return tag + (_varint(len(payload)) + payload if wire == 2 else payload)


def _items(packed: Packed) -> list[tuple[str, list[int]]]:
    return [(packed.key(i), list(packed.ids_of(i))) for i in range(len(packed))]


def _same_as_protobuf(data: bytes, written: bool = False) -> str:
    """Check one request's bytes; which path they took. ``written``: bytes as protobuf writes
    them (not mutated), whose entries of steps of ids the core must all find."""
    read = read_batch_request(data)
    decoded = upb(data)
    if isinstance(read, Undecodable):
        assert isinstance(decoded, Undecodable)
        assert read.refusal().message == decoded.refusal().message
        return "undecodable"
    assert not isinstance(decoded, Undecodable), decoded.error
    assert list(read.sessions) == list(decoded.sessions)
    if not isinstance(read, ReadBatch):
        assert read == decoded
        return "protobuf"
    assert read.size == len(data)
    assert (read.packed is None) == (not decoded.HasField("packed"))
    entry_keys = [entry.key for entry in decoded.sessions]
    if read.packed is not None:
        core, python = Packed.read(read.packed), Packed.of(decoded.packed)
        assert _items(core) == _items(python) and core.keys == python.keys
        # The message's key checks (empty, repeated), made by the core on the bytes it read.
        assert core.distinct_with(entry_keys) == python.distinct_with(entry_keys)
    _entries_as_protobuf(read, decoded, written)
    return "core"


def _only_ids(entry: pb.SessionInput) -> int | None:
    """The entry's number of steps when it is nothing but steps of token ids (what the core may
    step as the plain message of their ids; no other field, known or unknown), else None."""
    if {f.name for f, _ in entry.ListFields()} - {"key", "steps"}:
        return None
    if any({f.name for f, _ in step.ListFields()} - {"token_ids"} for step in entry.steps):
        return None
    known = pb.SessionInput(key=entry.key, steps=[pb.Step(token_ids=s.token_ids) for s in entry.steps])
    return len(entry.steps) if known.ByteSize() == entry.ByteSize() else None


def _entries_as_protobuf(read: ReadBatch, decoded: pb.ParseBatchRequest, written: bool) -> None:
    """The entries as the core steps them (``ReadBatch.stepped``): each one's key, whether it is
    only steps of ids (and their ids, concatenated), which carry an Open, and the message's key
    checks over entries and packed items together, as protobuf reads the same bytes. In mutated
    bytes the core may leave an entry of ids to Python (an id written beyond 32 bits, which
    protobuf cuts to 32), never take one that is not."""
    stepped, entries = read.stepped, list(decoded.sessions)
    if stepped is None:
        return  # no entries, or one the reader left to protobuf (an unknown group, say)
    assert len(stepped) == len(entries) > 0
    for i, entry in enumerate(entries):
        assert stepped.key(i) == entry.key
        steps = stepped.entry_steps(i)
        if written or steps is not None:
            assert steps == _only_ids(entry)
        if steps is not None:
            assert stepped.ids_of(i) == [t for step in entry.steps for t in step.token_ids]
    assert stepped.opening == [i for i, e in enumerate(entries) if e.HasField("open")]
    keys = [e.key for e in entries] + ([] if read.packed is None else Packed.read(read.packed).keys)
    want = None if not all(keys) else len(set(keys)) == len(keys)
    assert stepped.distinct_with_items(read.packed) == want


def _request(rng: random.Random) -> pb.ParseBatchRequest:
    message = pb.ParseBatchRequest()
    for i in range(rng.randrange(4)):
        entry = message.sessions.add(key=rng.choice([f"e{i}", f"e{i}", "", "k1", "é" * 20]))
        roll = rng.random()
        if roll < 0.3:
            entry.open.model = "qwen3"
        elif roll < 0.35:
            entry.finish.reason = pb.FINISH_REASON_STOP
        elif roll < 0.4:
            entry.cancel = True
        for _ in range(rng.choice((1, 1, 2, 3, 8, 0))):  # steps of ids, some empty, some text
            step = entry.steps.add()
            step.token_ids.extend(rng.randrange(1 << 20) for _ in range(rng.randrange(3)))
            if rng.random() < 0.05:
                step.text = "x"
    if rng.random() < 0.8:
        n = rng.randrange(6)
        keys = [rng.choice(["k", "é", "s0-1", "", "🙂x", "e"]) + str(i) for i in range(n)]
        if keys and rng.random() < 0.2:
            keys[rng.randrange(n)] = rng.choice(["", keys[0]])  # an empty or repeated key
        message.packed.keys.extend(keys)
        counts = [rng.randrange(3) for _ in range(n)] if rng.random() < 0.5 else []
        message.packed.token_counts.extend(counts)
        ids = sum(counts) if counts else n
        message.packed.token_ids.extend(rng.randrange(1 << 32) for _ in range(ids))
    return message


def test_random_requests_and_their_mutations_read_as_protobuf_decodes_them():
    rng = random.Random(21)
    paths: dict[str, int] = {}
    for _ in range(3000):
        data = _request(rng).SerializeToString()
        path = _same_as_protobuf(data, written=True)
        paths[path] = paths.get(path, 0) + 1
        cases = []
        if data:
            at = rng.randrange(len(data))
            cases.append(data[:at])  # truncated
            flipped = bytearray(data)
            flipped[at] ^= 1 << rng.randrange(8)
            cases.append(bytes(flipped))
            cases.append(
                data
                + _field(
                    rng.choice([3, 7, 1000]),
                    rng.choice([0, 1, 2, 5]),
                    b"\x01\x02\x03\x04\x05\x06\x07\x08"[: rng.choice([1, 4, 8])],
                )
            )
        for case in cases:
            path = _same_as_protobuf(case)
            paths[path] = paths.get(path, 0) + 1
    assert paths.get("core", 0) > 3000 and paths.get("undecodable", 0) > 100, paths


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\xff\xff\xff", id="garbage"),
        pytest.param(_field(2, 2, _field(1, 2, b"\xff")), id="key not utf-8"),
        pytest.param(
            _field(2, 2, _field(1, 2, b"a") + _field(3, 0, _varint(1 << 33))), id="id beyond 32 bits"
        ),
        pytest.param(_field(2, 2, _field(1, 2, b"a") + _field(3, 0, _varint(7))), id="an unpacked id"),
        pytest.param(
            _field(2, 2, _field(1, 2, b"a"))
            + _field(2, 2, _field(1, 2, b"b") + _field(3, 2, _varint(5) + _varint(6))),
            id="packed twice merges",
        ),
        pytest.param(
            _field(2, 2, _field(1, 2, b"a") + _field(2, 2, _varint(2)) + _field(3, 2, _varint(5))),
            id="counts that do not frame",
        ),
        pytest.param(_field(2, 2, _field(1, 2, b"a") + _field(3, 2, b"")), id="too few ids"),
        pytest.param(_field(2, 0, _varint(3)), id="packed with a varint's wire type"),
        pytest.param(_field(9, 3, b"") + _field(9, 4, b""), id="a group"),
        pytest.param(b"\x00\x01", id="field zero"),
        pytest.param(_field(1, 2, b"\xff\xff"), id="an entry that does not decode"),
        pytest.param(_field(2, 2, b""), id="empty packed"),
    ],
)
def test_edge_cases_read_as_protobuf_decodes_them(data: bytes):
    _same_as_protobuf(data)


def test_a_framing_error_is_the_protocols_status():
    from parsetier.protocol.batch import BatchProtocol
    from parsetier.protocol.rules import Limits

    data = _field(2, 2, _field(1, 2, b"a") + _field(2, 2, _varint(2)) + _field(3, 2, _varint(5)))
    request = read_batch_request(data)
    assert not isinstance(request, (ReadBatch, Undecodable))  # the core declined: protobuf's path
    with pytest.raises(StatusError) as info:
        BatchProtocol(Limits()).receive(request)
    assert "the items take 2 token_ids, and 1 came" in info.value.message
