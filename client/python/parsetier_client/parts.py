"""Replies sent in parts, joined: callers only ever see whole replies.

A streamed reply larger than the server's send limit (``--max-reply-bytes``) arrives as several
messages of the same type carrying nothing but ``part`` (a ``ReplyPart``: the next bytes of the
reply's serialized form, ``more`` on all but the last). Joining their bytes and parsing them gives
the reply, exactly as if it had been sent whole (see docs/service.md, "Reply size").
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import TypeVar

from parsetier_api.v1 import parsetier_pb2 as pb

Reply = TypeVar("Reply", pb.ParseResponse, pb.ParseBatchResponse)


class PartsError(ValueError):
    """The server broke the parts framing (a whole reply in the middle of a parted one)."""


class Joiner:
    """Feed it the messages of one stream, in order; ``push`` returns each whole reply once."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: list[bytes] = []

    def push(self, message: Reply) -> Reply | None:
        """The reply ``message`` completes (``message`` itself when it was sent whole), or None
        while the parts of a reply are still coming."""
        if not message.HasField("part"):
            if self._data:
                raise PartsError("a reply arrived before the parts of the previous one were complete")
            return message
        self._data.append(message.part.data)
        if message.part.more:
            return None
        data, self._data = b"".join(self._data), []
        return type(message).FromString(data)


def joined(messages: Iterable[Reply]) -> Iterator[Reply]:
    """A stream's messages with parted replies joined."""
    joiner = Joiner()
    for message in messages:
        whole = joiner.push(message)
        if whole is not None:
            yield whole


async def joined_async(messages: AsyncIterable[Reply]) -> AsyncIterator[Reply]:
    """``joined`` for an asyncio stream."""
    joiner = Joiner()
    async for message in messages:
        whole = joiner.push(message)
        if whole is not None:
            yield whole
