"""An Open's tools_json is parsed once per text and shared; bad tools are refused every time. Tools
arrive in every API's shape (``tool_shapes``) and are read whole or refused naming their JSON path,
by ``Open`` and ``BuildConstraint`` alike."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from parsetier import convert, tool_shapes
from parsetier.messages import Tool
from parsetier.status import Code, ProtocolError
from parsetier_api.v1 import parsetier_pb2 as pb

TOOLS = json.dumps([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])


def test_the_same_tools_text_gives_the_same_tools():
    first = convert.tools_of(pb.Open(model="m", tools_json=TOOLS))
    second = convert.tools_of(pb.Open(model="m", tools_json=TOOLS))
    assert first == second and first[0].name == "f" and first[0].parameters == {"type": "object"}
    other = convert.tools_of(pb.Open(model="m", tools_json=TOOLS.replace('"f"', '"g"')))
    assert other[0].name == "g"


def test_bad_tools_are_refused_on_every_open():
    bad = json.dumps([{"type": "function", "function": {"name": "f", "parameters": [1]}}])
    for _ in range(2):
        with pytest.raises(ProtocolError, match="must be a JSON object"):
            convert.tools_of(pb.Open(model="m", tools_json=bad))


def test_a_large_tools_text_is_parsed_without_the_cache():
    padding = {"type": "object", "description": "x" * convert.TOOLS_CACHE_TEXT}
    text = json.dumps([{"type": "function", "function": {"name": "big", "parameters": padding}}])
    hits = convert._cached_tools.cache_info().hits + convert._cached_tools.cache_info().misses
    assert convert.tools_of(pb.Open(model="m", tools_json=text))[0].name == "big"
    assert convert._cached_tools.cache_info().hits + convert._cached_tools.cache_info().misses == hits


# ------------------------------------------------------------------ every API's shape (tool_shapes)
SCHEMA = {"type": "object", "properties": {"days": {"type": "integer"}, "city": {"type": "string"}}}
SHAPES = {
    "openai chat": {
        "type": "function",
        "function": {"name": "forecast", "description": "Days ahead.", "parameters": SCHEMA, "strict": True},
    },
    "bare function": {"name": "forecast", "description": "Days ahead.", "parameters": SCHEMA, "strict": True},
    "responses flat": {
        "type": "function",
        "name": "forecast",
        "description": "Days ahead.",
        "parameters": SCHEMA,
        "strict": True,
    },
    "anthropic": {"name": "forecast", "description": "Days ahead.", "input_schema": SCHEMA, "strict": True},
    "anthropic custom": {
        "type": "custom",
        "name": "forecast",
        "description": "Days ahead.",
        "input_schema": SCHEMA,
        "strict": True,
    },
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_api_shape_reads_to_the_same_tool(shape: str) -> None:
    (tool,) = convert.tools_of(pb.Open(model="m", tools_json=json.dumps([SHAPES[shape]])))
    assert tool == Tool(name="forecast", parameters=SCHEMA, description="Days ahead.", strict=True)


def test_shapes_mix_in_one_array_and_keep_their_order() -> None:
    tools = tool_shapes.tools_of_json(
        [{"name": "a", "input_schema": {"type": "object"}}, {"type": "function", "name": "b"}], "tools"
    )
    assert [(t.name, t.parameters, t.strict) for t in tools] == [
        ("a", {"type": "object"}, False),
        ("b", {}, False),
    ]


def test_a_responses_tool_may_have_null_parameters() -> None:
    """The Responses API types a flat function tool's ``parameters`` as nullable; elsewhere null
    is refused (a chat function's or a bare object's, an Anthropic ``input_schema``)."""
    (tool,) = tool_shapes.tools_of_json([{"type": "function", "name": "now", "parameters": None}], "tools")
    assert (tool.name, tool.parameters) == ("now", {})
    with pytest.raises(ProtocolError, match=re.escape("tools[0].parameters must be a JSON object, got null")):
        tool_shapes.tools_of_json([{"name": "now", "parameters": None}], "tools")


REFUSED = [
    ([{"name": "f", "input_schema": [1]}], "tools_json[0].input_schema must be a JSON object, got list"),
    ([{"name": "f", "input_schema": None}], "tools_json[0].input_schema must be a JSON object, got null"),
    (
        [{"name": "f"}, {"type": "function", "name": "g", "parameters": "x"}],
        "tools_json[1].parameters must be a JSON object, got str",
    ),
    (
        [{"type": "function", "function": {"name": "f", "parameters": 0}}],
        "tools_json[0].function.parameters must be a JSON object",
    ),
    ([{"type": "function", "function": "f"}], "tools_json[0].function must be an object"),
    (
        [{"name": "f", "parameters": {}, "input_schema": {}}],
        "tools_json[0] has both parameters and input_schema",
    ),
    (
        [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
        "tools_json[0].type: 'web_search_20250305'",
    ),
    (
        [{"type": "bash_20250124", "name": "bash"}],
        "tools_json[0].type: 'bash_20250124' is not a function tool",
    ),
    ([{"name": "f"}, {"type": "web_search"}], "tools_json[1].type: 'web_search' is not a function tool"),
    ([{"type": "file_search", "vector_store_ids": []}], "tools_json[0].type: 'file_search'"),
    (
        [{"type": "custom", "name": "sql", "format": {"type": "grammar"}}],
        "tools_json[0]: a custom tool without",
    ),
    ([{"input_schema": {}}], "tools_json[0].name must be a non-empty string"),
    ([{"type": "function", "function": {"name": ""}}], "tools_json[0].function.name must be a non-empty"),
    ([{"name": "f", "description": 5}], "tools_json[0].description must be a string"),
    ([{"name": "f", "strict": "yes"}], "tools_json[0].strict must be a boolean"),
    ([7], "tools_json[0] must be an object"),
    ({"name": "f"}, "tools_json must be a JSON array"),
]


@pytest.mark.parametrize(("tools", "message"), REFUSED)
def test_a_tool_is_read_whole_or_refused_naming_its_path(tools: Any, message: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(message)) as error:
        convert.tools_of(pb.Open(model="m", tools_json=json.dumps(tools)))
    assert error.value.code is Code.INVALID_ARGUMENT


def test_the_python_client_sends_anthropic_tools_with_their_schema() -> None:
    from parsetier_client.requests import tool_message

    message = tool_message(SHAPES["anthropic"])
    assert (message.name, json.loads(message.parameters_json), message.strict) == ("forecast", SCHEMA, True)
    assert json.loads(tool_message(SHAPES["responses flat"]).parameters_json) == SCHEMA
    with pytest.raises(ValueError, match="not a function tool"):
        tool_message({"type": "web_search"})


# ----------------------------------------------------------------------------- over the live server
XML_CALL = (
    "<tool_call>\n<function=forecast>\n<parameter=days>\n3\n</parameter>\n"
    "<parameter=city>\n3\n</parameter>\n</function>\n</tool_call>"
)


@pytest.mark.parametrize("shape", ["anthropic", "responses flat", "openai chat"])
def test_an_xml_argument_is_typed_by_every_shape_of_schema(shape: str, client, encode) -> None:
    """qwen3_coder writes values as text; the schema types them. An Anthropic tool's
    ``input_schema`` (once silently ignored) types ``days`` as 3, not "3", as OpenAI's do; a string
    parameter keeps its text."""
    ids = encode(XML_CALL)
    for tools in (json.dumps([SHAPES[shape]]), [SHAPES[shape]]):  # tools_json, and the client's tools
        result = client.parse_stream("qwen3-coder", [[i] for i in ids], tools=tools, thinking=False)
        (call,) = result.message.tool_calls
        assert json.loads(call.arguments) == {"days": 3, "city": "3"}


def test_build_constraint_reads_every_shape(client) -> None:
    """BuildConstraint reads the tools as Open does: an Anthropic tool's schema is the one a strict
    call is held to, and a provider-run tool is INVALID_ARGUMENT naming it."""
    import grpc

    answers = []
    for shape in ("openai chat", "anthropic", "responses flat"):
        open_ = pb.Open(model="qwen3-coder", tools_json=json.dumps([SHAPES[shape]]))
        open_.tool_choice.mode = pb.TOOL_CHOICE_MODE_REQUIRED
        reply = client.stub.BuildConstraint(pb.BuildConstraintRequest(open=open_), timeout=30)
        answers.append((reply.lark_grammar, reply.structural_tag_json))
    assert answers[0] == answers[1] == answers[2] and "days" in answers[0][1]
    bad = pb.Open(model="qwen3-coder", tools_json=json.dumps([SHAPES["anthropic"], {"type": "web_search"}]))
    with pytest.raises(grpc.RpcError) as error:
        client.stub.BuildConstraint(pb.BuildConstraintRequest(open=bad), timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tools_json[1].type: 'web_search'" in error.value.details()
