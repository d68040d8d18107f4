"""An Open's tools_json is parsed once per text and shared; bad tools are refused every time."""

from __future__ import annotations

import json

import pytest

from parsetier import convert
from parsetier.status import ProtocolError
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
