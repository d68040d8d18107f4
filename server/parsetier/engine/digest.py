"""The output digest: one number that says which output a session has produced so far.

Every reply carries it (``ParseResponse.output_digest``); a client resuming a session echoes the
last one it received, and the server, having fed the client's history silently, compares it with
its own (``parsetier.protocol.resume``). A history that does not reproduce the output the client holds is
then FAILED_PRECONDITION, not silently different output.

Definition (docs/service.md, "Resume"): CRC-32 (IEEE, ``zlib.crc32``, chained) of a canonical
byte stream of the output. Each output piece — reasoning text, content text, a tool call's id,
name and arguments text, the finish — is its UTF-8 bytes, preceded by a tag naming its kind only
when the kind differs from the previous piece's:

    reasoning  0x01            content    0x02
    call id    0x03 i 0x00     call name  0x04 i 0x00     call arguments  0x05 i 0x00
    finish     0x06, then the finish reason ("stop", "length", "abort", "tool_calls")

where ``i`` is the call's index in decimal ASCII. Pieces of one kind concatenate, so any split
of the same ids gives the same stream and the same digest, as the output itself is
split-invariant. Only the server computes it, over every delta the session produced (whatever
``Open.output`` sends): clients never need to.

Cost: one ``zlib.crc32`` call per reply over the reply's text (the usual reply, one content or
reasoning delta, takes a short path with no join).

The state lives in the session's ledger (``parsetier.protocol.ledger``): ``add`` and ``finish`` here are
the definition and the reference engine's; the native ledger computes the same in Rust
(``parsetier_core/engine/src/digest.rs``), for the packed ``ParseBatch`` path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from zlib import crc32

from parsetier.messages import Delta

REASONING = "\x01"
CONTENT = "\x02"
CALL_ID = "\x03"
CALL_NAME = "\x04"
CALL_ARGUMENTS = "\x05"
FINISH = "\x06"


class DigestState(Protocol):
    """Where a session keeps its digest (a ``parsetier.protocol.ledger.Ledger``)."""

    digest: int
    """The value (what replies carry)."""
    digest_kind: str
    """The tag of the last piece (with its call index for tool-call pieces)."""


def add(state: DigestState, deltas: Sequence[Delta]) -> int:
    """Account for ``deltas`` (in order); the new value."""
    if len(deltas) == 1:  # the usual reply: one delta of plain text, inline
        delta = deltas[0]
        content, reasoning = delta.content, delta.reasoning
        if not delta.tool_calls and not (content and reasoning):
            tag, text = (CONTENT, content) if content else (REASONING, reasoning)
            if not text:
                return state.digest
            if state.digest_kind != tag:
                state.digest_kind = tag
                text = tag + text
            state.digest = crc32(text.encode("utf-8"), state.digest)
            return state.digest
    kind = state.digest_kind
    pieces: list[str] = []
    for delta in deltas:
        if delta.reasoning:
            if kind != REASONING:
                kind = REASONING
                pieces.append(REASONING)
            pieces.append(delta.reasoning)
        if delta.content:
            if kind != CONTENT:
                kind = CONTENT
                pieces.append(CONTENT)
            pieces.append(delta.content)
        for call in delta.tool_calls:
            index = f"{call.index}\x00"
            for tag, text in (
                (CALL_ID, call.id),
                (CALL_NAME, call.name),
                (CALL_ARGUMENTS, call.arguments),
            ):
                if text:
                    if kind != tag + index:
                        kind = tag + index
                        pieces.append(kind)
                    pieces.append(text)
    state.digest_kind = kind
    if pieces:
        state.digest = crc32("".join(pieces).encode("utf-8"), state.digest)
    return state.digest


def finish(state: DigestState, reason: str) -> int:
    """The session's end: its finish reason, after its last deltas."""
    state.digest_kind = FINISH
    state.digest = crc32((FINISH + reason).encode("utf-8"), state.digest)
    return state.digest
