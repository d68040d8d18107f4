"""Shared glue between the canitoolcall conformance suite and parsetier.

Maps a fixture to what a serving stack would send parsetier (model preset, request options,
output token ids, finish reason) and turns our results into the suite's ``ParseResult`` /
``Observation`` so its own checks judge them. Used by the sans-IO conformance run (fast, for
developing formats) and by the gRPC adapter (the official run through the live service).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from canitoolcall.checks import case_status, run_checks
from canitoolcall.chunking import DEFAULT_STRATEGIES, split
from canitoolcall.fixtures import Family, Fixture, load_families, load_fixtures
from canitoolcall.results import CheckResult, Observation, ParsedToolCall, ParseResult, Status
from tokenizers import Tokenizer

import marker_tokenizers
from parsetier.messages import Message, SessionOptions, Tool
from parsetier.models import Model, ModelRegistry


@dataclass(frozen=True)
class Case:
    """One fixture as a request: which preset, which options, which ids, how it ended."""

    fixture: Fixture
    preset: str
    options: SessionOptions
    units: tuple[int, ...]
    finish_reason: str
    reencoded: bool
    """The fixture's ids are of a tokenizer we do not have (Kimi, Gemma 4): its raw text was
    encoded with the family's marker tokenizer instead (markers keep their token ids)."""
    special_ids: frozenset[int]


@functools.cache
def registry() -> ModelRegistry:
    return marker_tokenizers.registry()


@functools.cache
def fixtures() -> tuple[Fixture, ...]:
    return tuple(load_fixtures())


@functools.cache
def families() -> dict[str, Family]:
    return load_families()


@functools.cache
def _preset_by_repo() -> dict[str, str]:
    table: dict[str, str] = {}
    for spec in registry().specs():
        for repo in spec.serves:
            table.setdefault(repo, spec.name)
    return table


def preset_for(fixture: Fixture) -> str | None:
    """The preset that serves the fixture's reference model, or None (unsupported)."""
    return preset_for_model(fixture.models[0])


def preset_for_model(repo: str) -> str | None:
    """The preset that serves a Hugging Face repo (the suite's ``supports(family, model)`` asks by repo)."""
    return _preset_by_repo().get(repo)


def tools_of(fixture: Fixture) -> tuple[Tool, ...]:
    out = []
    for spec in fixture.tools:
        fn = spec.get("function", spec)
        out.append(Tool(fn["name"], dict(fn.get("parameters") or {}), fn.get("description", "")))
    return tuple(out)


@functools.cache
def _special_ids(model_name: str) -> frozenset[int]:
    model = registry().get(model_name)
    return frozenset(model.grammar.token_text)


def case_for(fixture: Fixture, complete_tool_calls: bool = False) -> Case | None:
    preset = preset_for(fixture)
    if preset is None:
        return None
    model = registry().get(preset)
    ids = tuple(fixture.output_token_ids or ())
    reencoded = not ids or model.tokenizer.decode(list(ids), skip_special_tokens=False) != fixture.raw_output
    if reencoded:
        ids = reencode(model.tokenizer, fixture.raw_output, ids)
    family = families().get(fixture.family)
    reference = family.reference_for(fixture.models[0]) if family else None
    prompt = fixture.generation_prompt
    if prompt is None and reference is not None:
        prompt = reference.default_generation_prompt
    prompt_ids = tuple(model.tokenizer.encode(prompt, add_special_tokens=False).ids) if prompt else ()
    options = SessionOptions(
        tools=tools_of(fixture),
        thinking=fixture.thinking,
        prompt_token_ids=prompt_ids,
        complete_tool_calls=complete_tool_calls,
    )
    return Case(
        fixture,
        preset,
        options,
        ids,
        "length" if fixture.truncated else "stop",
        reencoded,
        _special_ids(preset),
    )


def reencode(tokenizer: Tokenizer, raw: str, fixture_ids: Sequence[int]) -> tuple[int, ...]:
    """``raw`` in a marker tokenizer's ids, keeping the fixture's own choice of marker token vs text.

    A marker's text becomes its token, except where the fixture's ids show the model wrote it as
    ordinary text (Kimi K3 encodes argument text without special tokens, so a value may hold
    ``<|close|>`` as plain characters). Markers sit at their real ids in the marker tokenizers, so
    the fixture's marker ids are anchors: each is matched to the earliest occurrence of its text
    that leaves at least one byte per ordinary token seen since the previous anchor. Occurrences no
    anchor claims are spelled as ordinary bytes. Without anchors every marker text is a marker.
    """
    plain = tuple(tokenizer.encode(raw, add_special_tokens=False).ids)
    id_set = set(fixture_ids)
    anchors = {t.content: tid for tid, t in tokenizer.get_added_tokens_decoder().items() if tid in id_set}
    if not anchors:
        return plain
    text_of = {tid: text for text, tid in anchors.items()}
    found = list(re.finditer("|".join(re.escape(t) for t in sorted(anchors, key=len, reverse=True)), raw))
    real: set[int] = set()
    pos = run = k = 0
    for tid in fixture_ids:
        text = text_of.get(tid)
        if text is None:
            run += 1
            continue
        while k < len(found):
            m = found[k]
            k += 1
            gap = len(raw[pos : m.start()].encode())
            if m.group(0) == text and (gap >= run if run else gap == 0):
                real.add(m.start())
                pos, run = m.end(), 0
                break
        else:
            return plain  # the ids do not align with the text: fall back to marker-everywhere
    ids: list[int] = []
    pos = 0
    for m in found:
        if m.start() in real:
            continue
        ids += tokenizer.encode(raw[pos : m.start()], add_special_tokens=False).ids
        for ch in m.group(0):  # one character never matches a (multi-character) marker
            ids += tokenizer.encode(ch, add_special_tokens=False).ids
        pos = m.end()
    ids += tokenizer.encode(raw[pos:], add_special_tokens=False).ids
    return tuple(ids)


def to_result(message: Message) -> ParseResult:
    return ParseResult(
        content=message.content or None,
        reasoning_content=message.reasoning or None,
        tool_calls=tuple(ParsedToolCall(c.name, c.arguments) for c in message.tool_calls),
    )


ParseFn = Callable[[Case, Sequence[Sequence[int]]], ParseResult]
"""Parse a case fed as the given id groups (one group = the non-streaming parse)."""


def observe(case: Case, parse_nonstream: Callable[[Case], ParseResult], parse_stream: ParseFn) -> Observation:
    streams = {
        strategy.id: parse_stream(case, split(list(case.units), strategy, special=case.special_ids))
        for strategy in DEFAULT_STRATEGIES
    }
    return Observation(nonstream=parse_nonstream(case), streams=streams)


def judge(case: Case, observation: Observation) -> tuple[Status, list[CheckResult]]:
    rows = run_checks(case.fixture, families().get(case.fixture.family), observation)
    return case_status(rows), rows


# ---------------------------------------------------------------- sans-IO driver
def sansio_nonstream(case: Case) -> ParseResult:
    from parsetier.engine.session import parse

    message, _, _ = parse(_model(case), case.options, list(case.units), case.finish_reason)
    return to_result(message)


def sansio_stream(case: Case, groups: Sequence[Sequence[int]]) -> ParseResult:
    """Accumulate the *deltas* as an OpenAI client would (not the final message)."""
    from canitoolcall.results import StreamAccumulator

    from parsetier.engine.session import Session

    session = Session(_model(case), case.options)
    acc = StreamAccumulator()
    outputs = [session.feed(list(g)) for g in groups]
    outputs.append(session.finish(case.finish_reason))
    for out in outputs:
        for d in out.deltas:
            acc.add_content(d.content)
            acc.add_reasoning(d.reasoning)
            for tc in d.tool_calls:
                acc.add_tool_call(tc.index, tc.name, tc.arguments)
    return acc.result()


def _model(case: Case) -> Model:
    return registry().get(case.preset)


def describe_failures(rows: Sequence[CheckResult]) -> str:
    bad = [r for r in rows if r.status in (Status.FAIL, Status.ERROR)]
    return "; ".join(f"{r.check}[{r.strategy}]: {r.detail}" for r in bad[:3])


def main() -> None:  # pragma: no cover - developer tool
    """``PYTHONPATH=server:tests python -m canitoolcall_support [family ...]``: sans-IO table."""
    import sys

    wanted = set(sys.argv[1:])
    complete = "--complete" in wanted
    wanted.discard("--complete")
    counts: dict[str, dict[str, int]] = {}
    for fixture in fixtures():
        if wanted and fixture.family not in wanted:
            continue
        case = case_for(fixture, complete)
        row = counts.setdefault(fixture.family, {})
        if case is None:
            row["unsupported"] = row.get("unsupported", 0) + 1
            continue
        status, rows = judge(case, observe(case, sansio_nonstream, sansio_stream))
        row[status.value] = row.get(status.value, 0) + 1
        if status in (Status.FAIL, Status.ERROR):
            print(f"{status.value:5} {fixture.id}: {describe_failures(rows)}")
    print(json.dumps(counts, indent=1))


if __name__ == "__main__":
    main()
