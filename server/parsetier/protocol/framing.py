"""How a session's replies are framed on the wire, apart from the rules that make them
(``parsetier.protocol.session``): a streamed reply too large for one message goes in parts, and a
``ParseOnce`` call is a one-message session whose reply is reshaped into the unary response.

Both are pure functions of messages: no state, no I/O.
"""

from __future__ import annotations

from parsetier.protocol.session import Reply
from parsetier.status import ProtocolError, StatusError, invalid
from parsetier_api.v1 import parsetier_pb2 as pb

StreamReply = pb.ParseResponse | pb.ParseBatchResponse
"""A reply of a streaming RPC: one that may be sent in parts."""
PART_OVERHEAD = 32
"""Bytes a reply part's framing adds around its data (tags and two length varints: at most 14)."""


# ---------------------------------------------------------------------- streamed replies in parts
def in_parts(
    reply: StreamReply | bytes, limit: int, kind: type[StreamReply] = pb.ParseResponse
) -> list[StreamReply | bytes]:
    """The messages that carry one streamed reply: the reply itself when it fits in ``limit``
    bytes (``Limits.max_reply_bytes``), else pieces of its serialized bytes, each a message of the
    same type with only ``part`` set and each within the limit (``ParseResponse.part`` in the
    proto). ``bytes`` are a reply the core already serialized, a ``kind`` message. Nothing is
    lost, and the cost is one extra copy of only the replies that need it."""
    if isinstance(reply, bytes):
        if len(reply) <= limit:
            return [reply]
        data = reply
    else:
        if reply.ByteSize() <= limit:
            return [reply]
        data, kind = reply.SerializeToString(), type(reply)
    size = max(1, limit - PART_OVERHEAD)
    return [
        kind(part=pb.ReplyPart(data=data[at : at + size], more=at + size < len(data)))
        for at in range(0, len(data), size)
    ]


# ---------------------------------------------------------------------- ParseOnce
def once_request(request: pb.ParseOnceRequest) -> pb.ParseRequest:
    """A ParseOnce call as the one message of a session: open, the whole output as one step,
    finish. Limits then hold exactly as for a ``Parse`` stream sent that message."""
    if request.HasField("logprobs") and not request.token_ids:
        raise invalid("logprobs: they need token_ids (text has no logprobs)")
    message = pb.ParseRequest(open=request.open, finish=request.finish)
    if request.token_ids or request.text or request.text_tokens:
        step = message.steps.add(text=request.text, text_tokens=request.text_tokens)
        step.token_ids.extend(request.token_ids)
        if request.HasField("logprobs"):
            step.logprobs.CopyFrom(request.logprobs)
    return message


def once_error(error: StatusError) -> StatusError:
    """An error of the one step ``once_request`` made, naming the ParseOnceRequest's own fields
    (``logprobs.top_token_ids``, not ``steps[0].logprobs.top_token_ids``)."""
    if error.message.startswith("steps[0]."):
        return ProtocolError(error.code, error.message.removeprefix("steps[0]."))
    return error


def once_response(reply: Reply) -> pb.ParseOnceResponse:
    """The unary response for the one reply of a ParseOnce session."""
    response = pb.ParseOnceResponse()
    if reply.response is not None:
        response.final.CopyFrom(reply.response.final)
        response.deltas.extend(reply.response.deltas)
        response.events.extend(reply.response.events)
        response.wire = reply.response.wire
    return response
