"""The delta value types keep their dataclass contract with hand-written (faster) constructors."""

from __future__ import annotations

import dataclasses

import pytest

from parsetier.messages import Delta, ToolCallDelta


def test_delta_constructors_store_every_field_positionally_and_by_keyword():
    call = ToolCallDelta(2, '{"a"', "call-1", "f")
    assert (call.index, call.arguments, call.id, call.name) == (2, '{"a"', "call-1", "f")
    assert ToolCallDelta(index=2, arguments='{"a"', id="call-1", name="f") == call
    assert ToolCallDelta(0) == ToolCallDelta(0, "", None, None)
    delta = Delta("think", "say", (call,), (), (7, 8))
    assert Delta(reasoning="think", content="say", tool_calls=(call,), token_ids=(7, 8)) == delta
    assert Delta() == Delta("", "", (), (), ())
    assert Delta("", "x") != Delta("x")


def test_deltas_stay_frozen_hashable_dataclasses():
    delta = Delta(content="x", tool_calls=(ToolCallDelta(0, "{}"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        delta.content = "y"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        delta.tool_calls[0].arguments = "[]"  # type: ignore[misc]
    assert hash(delta) == hash(Delta(content="x", tool_calls=(ToolCallDelta(0, "{}"),)))
    assert dataclasses.replace(delta, content="y") == Delta(content="y", tool_calls=delta.tool_calls)
    assert [f.name for f in dataclasses.fields(ToolCallDelta)] == ["index", "arguments", "id", "name"]
    assert repr(Delta(content="x")).startswith("Delta(reasoning='', content='x',")
