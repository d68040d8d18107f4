"""BuildConstraint refuses a strict tool schema no constraint can hold a call to, naming the tool
and the place in its schema, instead of answering a grammar that fails to compile (issue 27):
INVALID_ARGUMENT for a malformed schema, FAILED_PRECONDITION for a valid one that cannot be
constrained. What it answers compiles in llguidance on the model's real tokenizer."""

from __future__ import annotations

import json
import time

import grpc
import llguidance
import pytest

from parsetier_api.v1 import parsetier_pb2 as pb

SERVICE = "/parsetier.v1.ParserService/"
Code = grpc.StatusCode
MODELS = ["qwen3", "qwen3-coder", "glm-4.5", "gpt-oss", "llama4"]

MALFORMED = {
    "properties not an object": ({"properties": 5}, "parameters/properties"),
    "unknown type": (
        {"type": "object", "properties": {"a": {"type": "date"}}},
        "parameters/properties/a/type",
    ),
    "type not a string": (
        {"type": "object", "properties": {"a": {"type": 5}}},
        "parameters/properties/a/type",
    ),
    "$ref to nothing": (
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
        "parameters/properties/a/$ref",
    ),
}
UNCONSTRAINABLE = {
    "external $ref": (
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
        "parameters/properties/a/$ref",
    ),
    "unsatisfiable": (
        {
            "type": "object",
            "properties": {"a": {"allOf": [{"type": "boolean"}, {"type": "integer"}]}},
            "required": ["a"],
        },
        "tool 'f': parameters/properties/a ",
    ),
    "unknown format": (
        {"type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}},
        "tool 'f': parameters/properties/a ",
    ),
}


@pytest.fixture(scope="module")
def build(grpc_server):
    with grpc.insecure_channel(grpc_server.target) as channel:
        call = channel.unary_unary(
            SERVICE + "BuildConstraint",
            request_serializer=pb.BuildConstraintRequest.SerializeToString,
            response_deserializer=pb.BuildConstraintResponse.FromString,
        )

        def build(model: str, schema: dict, strict: bool = True) -> pb.BuildConstraintResponse:
            tool = pb.Tool(name="f", parameters_json=json.dumps(schema), strict=strict)
            request = pb.BuildConstraintRequest(open=pb.Open(model=model, tools=[tool]))
            for _ in range(50):  # an in-process tokenizer build lags the server's loop: back off
                try:
                    return call(request, timeout=60)
                except grpc.RpcError as exc:
                    if exc.code() != Code.UNAVAILABLE:
                        raise
                    time.sleep(0.2)
            return call(request, timeout=60)

        yield build


def _refused(build, model: str, schema: dict) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        build(model, schema)
    return info.value


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_schema_is_invalid_argument_naming_its_path(build, model, case):
    schema, where = MALFORMED[case]
    error = _refused(build, model, schema)
    assert error.code() == Code.INVALID_ARGUMENT, error.details()
    assert "tool 'f'" in error.details() and where in error.details(), error.details()
    build(model, schema, strict=False)  # not enforced, so not refused


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("case", sorted(UNCONSTRAINABLE))
def test_a_valid_schema_that_cannot_be_constrained_is_failed_precondition(build, model, case):
    schema, where = UNCONSTRAINABLE[case]
    if model == "llama4" and "$ref" not in where:
        where = "tool 'f'"  # the pythonic writer refuses first, naming the sub-schema, not its path
    error = _refused(build, model, schema)
    assert error.code() == Code.FAILED_PRECONDITION, error.details()
    assert where in error.details(), error.details()


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwen3", "qwen3-coder", "gpt-oss"])
def test_defs_references_hold_wherever_the_format_puts_the_parameters(build, model, registry):
    """pydantic's ``$defs`` references are written against the parameters' root; the formats that
    embed the parameters in a call object, or take their properties apart, inline them, so the
    grammar compiles on the real tokenizer and holds the referenced type."""
    schema = {
        "type": "object",
        "properties": {"where": {"$ref": "#/$defs/Place"}},
        "required": ["where"],
        "$defs": {"Place": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}},
    }
    response = build(model, schema)
    tok = registry.get(model).tokenizer
    matcher = llguidance.LLMatcher(
        llguidance.LLTokenizer(tok.to_str(), n_vocab=registry.get(model).vocab_size), response.lark_grammar
    )
    assert not matcher.is_error(), matcher.get_error()
    assert "Place" not in response.lark_grammar  # inlined, not referenced
