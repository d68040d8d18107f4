"""Model output that is hostile to a JSON reader (nested a thousand deep, numbers of thousands of
digits) is a malformed call under the documented policy, for every family: the session ends
normally, deltas join to the final message, and complete-call mode delivers only JSON objects."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine_helpers import check_consistent, chunks, run
from hostile_outputs import PAYLOADS, deep_array, ids, samples
from parsetier.engine import json_bounds
from parsetier.engine.json_bounds import MAX_DEPTH, JsonBoundsError, nesting_depth
from parsetier.engine.json_scan import COMPLETE, MALFORMED, JsonValueScanner


def _hostile_cases() -> list:
    """Every preset x payload x delivery. The quick lane runs every preset and payload streamed,
    and complete calls for the first preset; the rest of the complete ones is `slow`."""
    presets = sorted(samples())
    return [
        pytest.param(
            preset,
            payload,
            complete,
            id=f"{preset}-{payload}-{'complete' if complete else 'streamed'}",
            marks=pytest.mark.slow if complete and preset != presets[0] else (),
        )
        for preset in presets
        for payload in sorted(PAYLOADS)
        for complete in (False, True)
    ]


@pytest.mark.parametrize(("preset", "payload", "complete"), _hostile_cases())
def test_hostile_argument_value(preset: str, payload: str, complete: bool) -> None:
    sample = samples()[preset]
    options = dataclasses.replace(sample.options, complete_tool_calls=complete)
    output = ids(sample, PAYLOADS[payload])
    for groups in ([output], list(chunks(output, (7,)))):
        streamed = run(sample.model, groups, options)
        check_consistent(streamed, written_ids=sample.model.grammar.grammar.tool_call_id == "format")
        for call in streamed.final.message.tool_calls:
            assert nesting_depth(call.arguments) <= MAX_DEPTH + 1
            if complete:
                assert isinstance(json.loads(call.arguments), dict)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ('"[[["', 0),
        ("[]", 1),
        ('[[], {"a": [[1]]}, "]]]]"]', 4),
        ('{"k\\"[": [1, {"x": "\\\\"}]}', 3),
        ("[" * 5000 + "]" * 5000, 5000),
        ("[1," * 300 + "]" * 300, 300),
    ],
)
def test_nesting_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth


@pytest.mark.parametrize(
    "text", [deep_array(MAX_DEPTH + 1), "9" * 5000, "[1e99999]", "NaN", '{"a": -Infinity}']
)
def test_loads_refuses_what_python_would_fail_on_or_json_cannot_hold(text: str) -> None:
    with pytest.raises(JsonBoundsError):
        json_bounds.loads(text)
    assert json_bounds.loads(deep_array(MAX_DEPTH)) is not None


@pytest.mark.parametrize("text", ["\u0345x}", "\u00f1x}", "\u00b2}", "\u0663}"])
def test_a_json_value_starts_with_an_ascii_letter_or_digit(text: str) -> None:
    """The scanner's first character as inside a container, in both engines (``json_scan.rs``
    tests the same texts): a combining mark (a letter to Rust's ``is_alphanumeric``, not to
    ``str.isalnum``), a letter of another script or "²" starts nothing; ``x1`` does."""
    scanner = JsonValueScanner()
    assert scanner.scan_from(text) == 0 and scanner.status == MALFORMED
    scanner = JsonValueScanner()
    assert scanner.scan_from("x1}") == 2 and scanner.status == COMPLETE
