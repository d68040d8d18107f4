"""Driving a session and reading what a client sees, for every engine test.

* ``run`` / ``run_text`` feed deltas to a fresh ``Session`` and finish it; ``accumulate`` rebuilds
  the message from the deltas the way an OpenAI client does; ``check_consistent`` and ``shape``
  compare what came out; ``parse_shape`` / ``parsed`` give the one-call ``parse`` reference.
* ``chunks`` / ``cut`` split ids into deltas; ``tools`` builds tool definitions.
* The real Qwen3 models of the session tests, their marker ids, and ``enc`` (Qwen3 text to ids).

Token ids for any model (``enc(model, text)``, ``plain``) and the split-invariance check every
family test uses (``split_check``) are in ``family_support``.

Model loading happens once per test process (the registry caches the bound grammar), so importing
this module is cheap after the first time.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import marker_tokenizers
from parsetier.engine.session import Session, parse
from parsetier.messages import Delta, Final, Message, SessionOptions, Tool, ToolCall
from parsetier.models import Model

_REGISTRY = marker_tokenizers.registry()
QWEN3: Model = _REGISTRY.get("qwen3")
QWEN3_CODER: Model = _REGISTRY.get("qwen3-coder")
TOKENIZER = QWEN3.tokenizer

THINK_OPEN = 151667
THINK_CLOSE = 151668
CALL_OPEN = 151657
CALL_CLOSE = 151658
IM_START = 151644
IM_END = 151645
ENDOFTEXT = 151643

MARKER_TEXTS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
"""The Qwen3 markers that are single added tokens: ``enc`` turns them into their ids."""

CALL_ID = re.compile(r"chatcmpl-tool-[0-9a-f]{24}")

Shape = tuple[str, str, tuple[tuple[str, str], ...]]
"""A message without its call ids: (content, reasoning, ((name, arguments), …))."""


def enc(text: str) -> list[int]:
    """Qwen3 token ids as the model emits them: added-token texts become their special ids."""
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def tools(*specs: tuple[str, dict[str, Any]] | str, **named: dict[str, Any]) -> tuple[Tool, ...]:
    """Tool definitions: a bare name (no properties), ``(name, properties)``, or ``name=properties``;
    ``tools("f", ("g", {"a": {"type": "integer"}}), h={})``."""
    pairs = [(spec, {}) if isinstance(spec, str) else spec for spec in specs] + list(named.items())
    return tuple(Tool(name, {"type": "object", "properties": props}) for name, props in pairs)


JSON_TYPES: dict[str, dict[str, Any]] = {
    "i": {"type": "integer"},
    "n": {"type": "number"},
    "b": {"type": "boolean"},
    "o": {"type": "object"},
    "a": {"type": "array"},
    "s": {"type": "string"},
    "z": {"type": "null"},
    "ns": {"type": ["string", "null"]},
}
"""One property per JSON type, named by its initial (``ns``: string or null): what the families'
typing tests convert written values by."""


def typed(*names: str) -> dict[str, Any]:
    """The properties ``names`` of ``JSON_TYPES``, in that order (``| {...}`` adds others)."""
    return {name: copy.deepcopy(JSON_TYPES[name]) for name in names}


# ---------------------------------------------------------------------------------------------- splits
def chunks(ids: Sequence[int], sizes: Sequence[int]) -> Iterator[list[int]]:
    """``ids`` cut into consecutive deltas of the given sizes (cycled); sizes must be positive."""
    pos, k = 0, 0
    while pos < len(ids):
        n = sizes[k % len(sizes)]
        k += 1
        yield list(ids[pos : pos + n])
        pos += n


def cut(ids: Sequence[int], cuts: Sequence[int]) -> list[list[int]]:
    """``ids`` split at the given positions (any order, duplicates give empty deltas)."""
    bounds = [0, *sorted(c % (len(ids) + 1) for c in cuts), len(ids)]
    return [list(ids[a:b]) for a, b in itertools.pairwise(bounds)]


# ---------------------------------------------------------------------------------------------- driver
@dataclass
class Streamed:
    """What a streaming client ends up with, plus the session's own final result."""

    deltas: list[Delta]
    final: Final
    per_feed: list[list[Delta]] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)

    @property
    def message(self) -> Message:
        """The message rebuilt from the deltas alone, as an OpenAI client accumulates them."""
        return accumulate(self.deltas)


def run(
    model: Model,
    deltas: Sequence[Sequence[int]],
    options: SessionOptions | None = None,
    reason: str = "stop",
    matched_stop: int | str | None = None,
) -> Streamed:
    """Feed each id delta to a fresh session, then finish."""
    session = Session(model, options or SessionOptions())
    out: list[Delta] = []
    per_feed: list[list[Delta]] = []
    events: list[Any] = []
    for ids in deltas:
        step = session.feed(ids)
        per_feed.append(step.deltas)
        out += step.deltas
        events += step.events
    last = session.finish(reason, matched_stop)
    assert last.final is not None
    per_feed.append(last.deltas)
    return Streamed(out + last.deltas, last.final, per_feed, events + last.events)


def run_text(
    model: Model, pieces: Sequence[str], options: SessionOptions | None = None, reason: str = "stop"
) -> Streamed:
    """Feed already-detokenized text steps (``Session.feed_text``), then finish."""
    session = Session(model, options or SessionOptions())
    out: list[Delta] = []
    for piece in pieces:
        out += session.feed_text(piece).deltas
    last = session.finish(reason)
    assert last.final is not None
    return Streamed(out + last.deltas, last.final)


def accumulate(deltas: Sequence[Delta]) -> Message:
    """Concatenate deltas into a message; checks the OpenAI delta discipline on the way: a call's
    first fragment carries its id and name, later fragments carry neither, indices are 0, 1, 2…"""
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for d in deltas:
        content.append(d.content)
        reasoning.append(d.reasoning)
        for tc in d.tool_calls:
            if tc.index == len(calls):
                assert tc.id is not None and tc.name is not None, f"first fragment of call {tc.index}: {tc}"
                calls.append({"id": tc.id, "name": tc.name, "arguments": [tc.arguments]})
            else:
                assert 0 <= tc.index < len(calls), f"tool call index {tc.index} out of order"
                assert tc.id is None and tc.name is None, f"id/name repeated on a later fragment: {tc}"
                calls[tc.index]["arguments"].append(tc.arguments)
    return Message(
        "".join(content),
        "".join(reasoning),
        tuple(ToolCall(c["id"], c["name"], "".join(c["arguments"])) for c in calls),
    )


def shape(message: Message) -> Shape:
    """A message without its call ids (they derive from each request), for comparing different sessions."""
    return message.content, message.reasoning, tuple((c.name, c.arguments) for c in message.tool_calls)


def check_consistent(streamed: Streamed, written_ids: bool = False) -> None:
    """Deltas concatenate to the session's final message, ids included; ids are unique and look
    like the ones the service makes up, unless the model writes its own (``written_ids``, Kimi K2)."""
    assert streamed.message == streamed.final.message
    ids = [c.id for c in streamed.final.message.tool_calls]
    assert len(set(ids)) == len(ids)
    if not written_ids:
        for call_id in ids:
            assert CALL_ID.fullmatch(call_id), call_id


def parse_shape(
    model: Model, ids: Sequence[int], options: SessionOptions | None = None, reason: str = "stop"
) -> tuple[Shape, Final]:
    """The one-call ``parse`` (the reference every split is compared with) and its final result."""
    message, final, deltas = parse(model, options or SessionOptions(), list(ids), reason)
    assert accumulate(deltas) == message
    return shape(message), final


def parsed(
    model: Model, ids: Sequence[int], options: SessionOptions | None = None, reason: str = "stop"
) -> Shape:
    """``parse_shape`` without the final result: what the one-call ``parse`` makes of ``ids``."""
    return parse_shape(model, ids, options, reason)[0]


def calls_json(message: Message) -> list[tuple[str, Any]]:
    """(name, parsed arguments) for every call; fails if some arguments are not valid JSON."""
    return [(c.name, json.loads(c.arguments)) for c in message.tool_calls]
