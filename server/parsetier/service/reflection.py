"""Server reflection as both ``grpc.reflection.v1`` (what current grpcurl, Postman and grpc-go tools
ask for first) and ``grpc.reflection.v1alpha`` (older tools).

grpcio-reflection ships only v1alpha. The v1 protocol is the same messages under a new package, field
for field, so one servicer answers both: v1 requests are read with the v1alpha message classes (the
bytes are identical), and the v1 file itself is registered in the descriptor pool, derived from the
v1alpha file by renaming its package, so a tool that asks reflection about reflection gets an answer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection as v1alpha
from grpc_reflection.v1alpha import reflection_pb2 as messages

from parsetier.service.admission import CountedReflectionServicer, StreamCount

V1ALPHA_SERVICE = v1alpha.SERVICE_NAME
V1_SERVICE = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def is_loopback(host: str) -> bool:
    """Whether a listen address only accepts local connections (reflection's default is on there)."""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _register_v1_file(pool: descriptor_pool.DescriptorPool) -> None:
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    messages.DESCRIPTOR.CopyToProto(file)
    old, new = file.package, "grpc.reflection.v1"
    file.name, file.package = _V1_FILE, new
    file.options.Clear()
    for message in file.message_type:
        for field in message.field:
            if field.type_name:
                field.type_name = field.type_name.replace(f".{old}.", f".{new}.")
    for service in file.service:
        for method in service.method:
            method.input_type = method.input_type.replace(f".{old}.", f".{new}.")
            method.output_type = method.output_type.replace(f".{old}.", f".{new}.")
    pool.Add(file)


def enable(server: grpc.aio.Server, service_names: Iterable[str], streams: StreamCount) -> None:
    """Register reflection (v1 and v1alpha) for ``service_names`` and itself on ``server``; its
    streams are counted in ``streams``."""
    pool = descriptor_pool.Default()
    _register_v1_file(pool)
    names = (*service_names, V1_SERVICE, V1ALPHA_SERVICE)
    servicer = CountedReflectionServicer(names, streams, pool=pool)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=messages.ServerReflectionRequest.FromString,
        response_serializer=messages.ServerReflectionResponse.SerializeToString,
    )
    for service in (V1_SERVICE, V1ALPHA_SERVICE):
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )
