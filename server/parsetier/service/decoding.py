"""Request decoding that cannot fail inside grpc.

grpc calls a method's request deserializer before the servicer runs; when it raises (garbage
bytes, a truncated message, invalid UTF-8 in a string field) grpc.aio answers ``INTERNAL`` on a
stream and ``UNKNOWN`` on a unary call, and logs a traceback as if the server were broken. Here
the deserializer returns an ``Undecodable`` value instead, and the servicer answers it with
``INVALID_ARGUMENT``, logged like any other client error.

Responses go out through a serializer that passes bytes through: a reply the core already wrote
as protobuf bytes (``SessionProtocol.receive_serialized``) is sent as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from parsetier import native
from parsetier.protocol.batch import ReadBatch
from parsetier.status import ProtocolError, invalid
from parsetier_api.v1 import parsetier_pb2 as pb


class Undecodable:
    """Bytes that are not a valid ``type_name`` message."""

    __slots__ = ("error", "size", "type_name")

    def __init__(self, type_name: str, size: int, error: str) -> None:
        self.type_name = type_name
        self.size = size
        self.error = error

    def refusal(self) -> ProtocolError:
        return invalid(f"the {self.size}-byte message is not a valid {self.type_name}: {self.error}")


def tolerant_deserializer(cls: type[Message]) -> Callable[[bytes], Message | Undecodable]:
    name = cls.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Message | Undecodable:
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError, UnicodeDecodeError) as exc:
            return Undecodable(name, len(data), str(exc) or type(exc).__name__)

    return deserialize


def read_batch_request(data: bytes) -> pb.ParseBatchRequest | ReadBatch | Undecodable:
    """A ``ParseBatch`` message's bytes: read by the native core when it serves (its packed
    items never become Python values: ``ReadBatch``), else — and whenever the core has any doubt
    about the bytes — decoded as every other request is (``tolerant_deserializer``), so garbage
    gets the same ``Undecodable`` and a framing error the same status as before."""
    if native.engine() == "native":
        got = None if native._core is None else native._core.read_batch(data)
        if got is not None:
            sessions, packed, stepped = got
            try:
                entries = pb.ParseBatchRequest.FromString(sessions)
            except (DecodeError, ValueError, UnicodeDecodeError):
                pass  # an entry that does not decode: the whole message's error, as always
            else:
                return ReadBatch(entries, packed, len(data), stepped)
    return _BATCH_REQUEST(data)


_BATCH_REQUEST = tolerant_deserializer(pb.ParseBatchRequest)


def passing_serializer(cls: type[Message]) -> Callable[[Message | bytes], bytes]:
    """``cls.SerializeToString``, except that a reply already serialized (bytes the native core
    wrote: ``protocol.batch.BatchReply``, ``SessionProtocol.receive_serialized``) goes to the wire
    as it is."""
    serialize = cls.SerializeToString

    def serializer(reply: Message | bytes) -> bytes:
        return reply if type(reply) is bytes else serialize(reply)

    return serializer


def add_servicer(
    servicer: object, server: grpc.aio.Server, service: ServiceDescriptor
) -> dict[str, grpc.RpcMethodHandler]:
    """Register ``servicer``'s methods for ``service`` (every RPC the descriptor names) with
    tolerant request deserializers; the generated ``add_…_to_server`` uses raising ones. The
    methods the servicer names in ``RAW_REQUESTS`` get their requests' bytes as they came (the
    servicer reads them, as tolerantly: ``read_batch_request``). Returns the handlers by method
    name."""
    kinds = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    handlers = {}
    raw = getattr(servicer, "RAW_REQUESTS", frozenset())
    for method in service.methods:
        request = message_factory.GetMessageClass(method.input_type)
        response = message_factory.GetMessageClass(method.output_type)
        make = kinds[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=None if method.name in raw else tolerant_deserializer(request),
            response_serializer=passing_serializer(response),
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)
    return handlers
