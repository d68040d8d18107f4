"""The packed form of a ``ParseBatch`` engine step, on the client side.

The usual entry of an engine step is one step of token ids for a session already open. Sent as a
``SessionInput`` each, such entries cost the server several microseconds apiece to read and answer;
``ParseBatchRequest.packed`` carries them as parallel arrays (keys, ids), and the server answers
those whose output is one plain text delta in ``ParseBatchResponse.packed`` (keys, sequences,
texts). The batch clients send every such entry packed and turn packed outputs back into the
``SessionOutput`` each stands for, so callers see one form only (docs/service.md, "Packed steps").
"""

from __future__ import annotations

from collections.abc import Sequence

from parsetier_api.v1 import parsetier_pb2 as pb


def add_packed(message: pb.ParseBatchRequest, plain: dict[str, list[int]]) -> None:
    """Put one step of ids per key into ``message.packed`` (counts only when some item has
    more or fewer than one id)."""
    packed = message.packed
    packed.keys.extend(plain)
    steps = plain.values()
    if any(len(ids) != 1 for ids in steps):
        packed.token_counts.extend([len(ids) for ids in steps])
    for ids in steps:
        packed.token_ids.extend(ids)


def packed_steps(message: pb.ParseBatchRequest) -> list[tuple[str, Sequence[int]]]:
    """The packed items of a message as (key, ids) pairs."""
    packed = message.packed
    keys, ids, counts = list(packed.keys), list(packed.token_ids), list(packed.token_counts)
    if not counts:
        return [(key, ids[i : i + 1]) for i, key in enumerate(keys)]
    items, at = [], 0
    for key, n in zip(keys, counts, strict=True):
        items.append((key, ids[at : at + n]))
        at += n
    return items


def outputs_of(response: pb.ParseBatchResponse) -> dict[str, pb.SessionOutput]:
    """Every session's output in a reply, the packed ones as the ``SessionOutput`` each means."""
    outputs = {output.key: output for output in response.sessions}
    packed = response.packed
    if packed.keys:
        columns = (
            packed.keys,
            packed.sequences,
            packed.client_messages,
            packed.output_digests,
            packed.texts,
            packed.reasoning,
        )
        for key, sequence, messages, digest, text, reasoning in zip(*columns, strict=True):
            output = outputs[key] = pb.SessionOutput(
                key=key, sequence=sequence, client_messages=messages, output_digest=digest
            )
            if reasoning:
                output.deltas.add(reasoning=text)
            else:
                output.deltas.add(content=text)
    return outputs
