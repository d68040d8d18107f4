"""Replies as the bytes a test compares: deterministic serialization, with ``client_messages``
(a count of the stream's own messages) made comparable across streams when asked."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import Message


def wire(
    replies: Iterable[Message], renumber_from: int = 0, *, drop_client_messages: bool = False
) -> list[bytes]:
    """Each reply serialized deterministically. ``renumber_from`` is subtracted from
    ``client_messages`` (stream-relative counts); ``drop_client_messages`` clears it (a resumed
    session's new stream restarts the count)."""
    out = []
    for reply in replies:
        if renumber_from or drop_client_messages:
            copy = type(reply)()
            copy.CopyFrom(reply)
            copy.client_messages = 0 if drop_client_messages else copy.client_messages - renumber_from
            reply = copy
        out.append(reply.SerializeToString(deterministic=True))
    return out
