"""Server reflection: v1 and v1alpha on loopback listeners by default, configurable off and on."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2 as messages

from grpc_servers import ThreadServer
from parsetier.service.reflection import is_loopback
from parsetier_api.v1 import parsetier_pb2 as pb

SERVICE = "parsetier.v1.ParserService"
VERSIONS = ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection")


def reflect(target: str, service: str, *requests: messages.ServerReflectionRequest):
    """Call ``service``'s ServerReflectionInfo by its full method name (the two versions' messages
    are the same bytes, so v1alpha's classes encode v1 requests too)."""
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            f"/{service}/ServerReflectionInfo",
            request_serializer=messages.ServerReflectionRequest.SerializeToString,
            response_deserializer=messages.ServerReflectionResponse.FromString,
        )
        return list(call(iter(requests), timeout=10))


@pytest.mark.parametrize("service", VERSIONS)
def test_both_versions_list_and_describe(grpc_server, service):
    listed, described, itself = reflect(
        grpc_server.target,
        service,
        messages.ServerReflectionRequest(list_services=""),
        messages.ServerReflectionRequest(file_containing_symbol=SERVICE),
        messages.ServerReflectionRequest(file_containing_symbol=VERSIONS[0]),
    )
    names = {s.name for s in listed.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health", *VERSIONS} <= names
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in described.file_descriptor_response.file_descriptor_proto
    ]
    (proto,) = [f for f in files if f.package == "parsetier.v1"]
    served = [m.name for m in pb.DESCRIPTOR.services_by_name["ParserService"].methods]
    assert [m.name for m in proto.service[0].method] == served and "Parse" in served
    (v1,) = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in itself.file_descriptor_response.file_descriptor_proto
    ]
    assert v1.package == "grpc.reflection.v1" and v1.service[0].name == "ServerReflection"
    method = v1.service[0].method[0]
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"


def test_reflection_off(registry):
    with ThreadServer(registry, reflection_on=False) as server:
        for service in VERSIONS:
            with pytest.raises(grpc.RpcError) as failure:
                reflect(server.target, service, messages.ServerReflectionRequest(list_services=""))
            assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_default_follows_the_listen_address():
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.5", "parsetier.internal"]))
