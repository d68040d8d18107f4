"""``docs/conformance.md`` from a suite run: the tables, the comparison, and every failure explained.

The document is generated, never hand-edited, so it can be regenerated whenever a format lands.
What a human must add — why a failure happens, and whether it is a policy or a bug — lives in
``tests/conformance/notes.toml`` (keyed by fixture id) and is merged in on every regeneration.
Causes that follow from the run itself (truncated output in default mode, a check that names the
problem) are classified automatically; everything else is marked as awaiting a note.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from canitoolcall.chunking import DEFAULT_STRATEGIES

import canitoolcall_support as support
from conformance.run import (
    MODES,
    TARGET,
    ZERO_TOLERANCE,
    Outcome,
    SuiteRun,
    counts,
    is_truncation_policy,
    ok_share,
    strategies_label,
    streamed_before_known,
    unexplained_default_failures,
    zero_tolerance_failures,
)

NOTES_PATH = Path(__file__).with_name("notes.toml")
COMMAND = "python tests/conformance/generate_report.py --write docs/conformance.md"

ENGINE_SNAPSHOT: tuple[tuple[str, int, int, int], ...] = (
    ("vLLM", 268, 86, 469),
    ("SGLang", 189, 62, 448),
    ("llama.cpp", 278, 46, 438),
)
"""The suite's published snapshot: (engine, pass, soft pass, fixtures it ran)."""

MODE_TITLES = {
    "complete": "`complete_tool_calls`",
    "default": "default streaming",
}
TODO = "**TODO(note)**"
"""Marks a failure nobody has explained yet; fill it in ``notes.toml``."""


@dataclass(frozen=True)
class Note:
    """A human's word on one failure: ``kind`` (policy / bug / fixture) and the explanation."""

    kind: str = ""
    note: str = ""


def load_notes(path: Path = NOTES_PATH) -> dict[str, Note]:
    """Notes by fixture id (``["family/id"]`` tables with ``kind`` and ``note``)."""
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {key: Note(str(v.get("kind", "")), str(v.get("note", ""))) for key, v in data.items()}


# ------------------------------------------------------------------------------- causes
_NAMES = re.compile(r"tool_calls: expected (\[.*?\]), got (\[.*?\])")


def _names_cause(detail: str) -> str | None:
    m = _NAMES.search(detail)
    if not m:
        return None
    try:
        want, got = json.loads(m.group(1).replace("'", '"')), json.loads(m.group(2).replace("'", '"'))
    except json.JSONDecodeError:
        return "tool calls differ from the expected ones"
    if len(got) < len(want):
        return f"tool call not recognised ({len(got)} of {len(want)} returned)"
    if len(got) > len(want):
        return f"extra tool call returned ({len(got)} instead of {len(want)})"
    return "tool names differ from the expected ones"


def auto_cause(outcome: Outcome) -> tuple[str, str]:
    """(kind, cause) from the run alone. Kind ``policy`` or ``harness`` is certain; ``bug?`` and
    ``policy?`` are what the failing checks suggest, and want a note to confirm."""
    if outcome.status.value == "error":
        return "harness", outcome.reason or "harness error"
    if is_truncation_policy(outcome):
        return (
            "policy",
            "policy: arguments stream as generated (the call cut by `max_tokens` was already streamed)",
        )
    if "malformed" in outcome.fixture.tags and streamed_before_known(outcome):
        return (
            "policy?",
            "arguments stream as generated: the malformed call was streamed before its end showed it "
            "invalid (the documented policy names truncated output only)",
        )
    failing = outcome.failing
    for check in ZERO_TOLERANCE:
        if check in failing:
            return "bug?", f"`{check}` fails: {outcome.first_detail(check)}"
    if outcome.service_problems:
        return "bug?", f"service inconsistency: {outcome.service_problems[0]}"
    detail = outcome.first_detail()
    if "parser raised" in detail:
        return "bug?", f"the service returned an error: {detail.removeprefix('parser raised ')}"
    if "expected_error" in failing:
        if "returned" in detail and "tool call" in detail:
            return "bug?", "returns a tool call where the fixture says no valid call exists"
        return "bug?", f"not an accepted error outcome: {detail}"
    if "expected_match" in failing:
        names = _names_cause(detail)
        if names:
            return "bug?", names
        if ".arguments:" in detail:
            return "bug?", "argument values differ from the expected ones"
        if detail.startswith(("content", "reasoning_content")):
            return "bug?", "content / reasoning split differs from the expected one"
    if "parallel_order" in failing:
        return "bug?", f"parallel calls out of order: {outcome.first_detail('parallel_order')}"
    if "arguments_json" in failing or "arguments_schema" in failing:
        return "bug?", f"arguments invalid: {detail}"
    return "bug?", detail or "see the failing checks"


def explain(outcome: Outcome, run: SuiteRun, notes: Mapping[str, Note]) -> tuple[str, str, str]:
    """(kind, cause, note) for one failure: the note's kind wins over the automatic one."""
    kind, cause = auto_cause(outcome)
    if outcome.mode == "default" and kind in ("bug?", "policy?"):
        twin = run.outcome("complete", outcome.fixture.id)
        if twin is not None and twin.supported and not twin.ok:
            cause = f"fails in `complete_tool_calls` mode too — {cause}"
        else:
            cause = f"default mode only — {cause}"
    note = notes.get(outcome.fixture.id)
    if note is not None and note.kind:
        kind = note.kind
    text = note.note if note is not None and note.note else ("" if kind in ("policy", "harness") else TODO)
    return kind, cause, text


# ------------------------------------------------------------------------------- markdown
def _cell(text: str, limit: int = 220) -> str:
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def _pct(num: int, den: int) -> str:
    return f"{100 * num / den:.1f}%" if den else "—"


def _checks_cell(outcome: Outcome) -> str:
    total = 1 + len(DEFAULT_STRATEGIES)
    parts = []
    for check, where in outcome.failing.items():
        label = "the case" if where == ["*"] else strategies_label(where, total)
        parts.append(f"`{check}` ({label})")
    return ", ".join(parts) or "—"


def _summary(run: SuiteRun) -> list[str]:
    total = len(support.fixtures())
    """The whole suite, also when a run was limited to some families: it is what the engines'
    snapshot is measured against."""
    lines = [
        "| parser | pass | soft pass | fail | unsupported | pass + soft | of supported | of all fixtures |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in MODES:
        if mode not in run.outcomes:
            continue
        c = counts(run.outcomes[mode])
        ok, supported = ok_share(run.outcomes[mode])
        ran = len(run.outcomes[mode])
        lines.append(
            f"| **parsetier**, {MODE_TITLES[mode]} | {c['pass']} | {c['soft_pass']} | {c['fail']} | "
            f"{c['unsupported']} | {ok} of {ran} | {_pct(ok, supported)} | {_pct(ok, total)} |"
        )
    for engine, passed, soft, ran in ENGINE_SNAPSHOT:
        ok = passed + soft
        lines.append(
            f"| {engine} (published snapshot) | {passed} | {soft} | — | — | {ok} of {ran} | "
            f"{_pct(ok, ran)} | {_pct(ok, total) if total else '—'} |"
        )
    return lines


def _targets(run: SuiteRun) -> list[str]:
    lines = []
    if "complete" in run.outcomes:
        ok, supported = ok_share(run.outcomes["complete"])
        met = supported and ok / supported >= TARGET
        lines.append(
            f"- **≥ {TARGET:.0%} of supported fixtures pass or soft-pass** (`complete_tool_calls`): "
            f"{ok} of {supported} = {_pct(ok, supported)} — {'met' if met else '**not met**'}."
        )
    for mode in MODES:
        if mode not in run.outcomes:
            continue
        bad = zero_tolerance_failures(run.outcomes[mode])
        per_check = {check: sum(1 for _, c in bad if c == check) for check in ZERO_TOLERANCE}
        text = ", ".join(f"`{c}` {n}" for c, n in per_check.items())
        verdict = "met" if not bad else "**not met**"
        lines.append(
            f"- **Zero-tolerance checks**, {MODE_TITLES[mode]}: fixtures failing {text} — {verdict}."
        )
    if "default" in run.outcomes:
        policy = sum(is_truncation_policy(o) for o in run.outcomes["default"])
        line = (
            f"- **Default streaming fails only by policy**: {policy} failure(s) are the truncated-output "
            "policy; every other one must also fail in `complete_tool_calls` mode"
        )
        if "complete" in run.outcomes:
            stray = [f"`{o.fixture.id}`" for o in unexplained_default_failures(run)]
            line += " — met." if not stray else f" — **not met**: {', '.join(stray)}."
        lines.append(line + ("" if "complete" in run.outcomes else "."))
    return lines


def _families(run: SuiteRun) -> list[str]:
    modes = [m for m in MODES if m in run.outcomes]
    head = (
        "| family | fixtures | "
        + " | ".join(f"{MODE_TITLES[m]}: pass | soft | fail | unsupported" for m in modes)
        + " |"
    )
    align = "| --- | ---: | " + " | ".join("---: | ---: | ---: | ---:" for _ in modes) + " |"
    lines = [head, align]
    families = sorted({o.fixture.family for m in modes for o in run.outcomes[m]})
    totals = {m: counts([]) for m in modes}
    n_total = 0
    for family in families:
        row = [f"`{family}`"]
        per_mode = {m: [o for o in run.outcomes[m] if o.fixture.family == family] for m in modes}
        n = len(per_mode[modes[0]])
        n_total += n
        row.append(str(n))
        for m in modes:
            c = counts(per_mode[m])
            for k, v in c.items():
                totals[m][k] += v
            row.extend(str(c[k]) for k in ("pass", "soft_pass", "fail", "unsupported"))
        lines.append("| " + " | ".join(row) + " |")
    total_row = ["**all**", f"**{n_total}**"]
    for m in modes:
        total_row.extend(f"**{totals[m][k]}**" for k in ("pass", "soft_pass", "fail", "unsupported"))
    lines.append("| " + " | ".join(total_row) + " |")
    return lines


def _presets(run: SuiteRun) -> list[str]:
    by_family: dict[str, dict[str, int]] = {}
    reasons: dict[str, set[str]] = {}
    for o in next(iter(run.outcomes.values()), []):
        fam = by_family.setdefault(o.fixture.family, {})
        if o.preset:
            fam[o.preset] = fam.get(o.preset, 0) + 1
        elif o.reason and not o.supported:
            reasons.setdefault(o.fixture.family, set()).add(o.reason)
    reencoded: dict[str, int] = {}
    for o in next(iter(run.outcomes.values()), []):
        reencoded[o.fixture.family] = reencoded.get(o.fixture.family, 0) + o.reencoded
    lines = ["| family | presets (fixtures) | token ids |", "| --- | --- | --- |"]
    for family in sorted(set(by_family) | set(reasons)):
        presets = ", ".join(f"`{p}` ({n})" for p, n in sorted(by_family.get(family, {}).items())) or "—"
        if family in reasons:
            presets += " · unsupported: " + "; ".join(sorted(reasons[family]))
        n = reencoded.get(family, 0)
        ids = f"{n} re-encoded from the text (marker tokenizer)" if n else "the fixture's own"
        lines.append(f"| `{family}` | {_cell(presets, 400)} | {ids} |")
    return lines


def _failures(run: SuiteRun, mode: str, notes: Mapping[str, Note], outcomes: list[Outcome]) -> list[str]:
    if not outcomes:
        return ["None."]
    lines = [
        "| fixture | failing checks | cause (automatic) | kind | note |",
        "| --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        kind, cause, note = explain(o, run, notes)
        lines.append(
            f"| `{o.fixture.id}` | {_checks_cell(o)} | {_cell(cause)} | {kind} | {_cell(note, 600)} |"
        )
    return lines


def _policy_failures(outcomes: list[Outcome], notes: Mapping[str, Note]) -> list[str]:
    """The truncated-output policy rows: the cause is the same for all, so it is said once."""
    if not outcomes:
        return ["None."]
    lines = ["| fixture | failing checks | note |", "| --- | --- | --- |"]
    for o in outcomes:
        note = notes.get(o.fixture.id)
        lines.append(f"| `{o.fixture.id}` | {_checks_cell(o)} | {_cell(note.note if note else '', 600)} |")
    return lines


def _failure_sections(run: SuiteRun, notes: Mapping[str, Note]) -> list[str]:
    out: list[str] = []
    for mode in MODES:
        if mode not in run.outcomes:
            continue
        failed = [o for o in run.outcomes[mode] if o.supported and not o.ok]
        out += [f"## Remaining failures: {MODE_TITLES[mode]}", ""]
        if mode != "default":
            out += [*_failures(run, mode, notes, failed), ""]
            continue
        policy = [o for o in failed if is_truncation_policy(o)]
        other = [o for o in failed if not is_truncation_policy(o)]
        out += [
            f"### Truncated output — policy ({len(policy)})",
            "",
            "Cause, classified automatically: **policy — arguments stream as generated.** The output was "
            "cut by `max_tokens` inside a tool call, and the call's fragments had already been streamed "
            "before the cut, so the client holds the call as generated (its arguments end where the "
            "output ended). Criteria: fixture tagged `truncated`; only `expected_error` / "
            "`expected_match` and the cut call's `arguments_json` / `arguments_schema` fail. "
            "`complete_tool_calls` holds calls back until they close and passes these.",
            "",
            *_policy_failures(policy, notes),
            "",
            f"### Other ({len(other)})",
            "",
            "Each must also fail in `complete_tool_calls` mode (then it is the same bug, counted there) — "
            "a default-mode-only failure outside the policy fails `tests/test_conformance.py`.",
            "",
            *_failures(run, mode, notes, other),
            "",
        ]
    return out


def render(run: SuiteRun, notes: Mapping[str, Note] | None = None) -> str:
    """The whole of ``docs/conformance.md``."""
    notes = load_notes() if notes is None else notes
    version = metadata.version("canitoolcall")
    total = len(next(iter(run.outcomes.values()), []))
    strategies = ", ".join(f"`{s.id}`" for s in DEFAULT_STRATEGIES)
    out = [
        "# Conformance: the canitoolcall suite through the gRPC service",
        "",
        f"<!-- Generated by `{COMMAND}`. Do not edit: per-failure notes go in "
        "tests/conformance/notes.toml, then regenerate. -->",
        "",
        f"Every fixture of [canitoolcall](https://pypi.org/project/canitoolcall/) {version} "
        f"({total} real model outputs with token ids) replayed through a live `parsetier serve` "
        "on loopback by the suite's "
        "adapter `parsetier` (`tests/conformance/adapter.py`): the non-streaming parse is one `ParseOnce`; "
        f"each streaming parse is one `Parse` stream per chunking strategy ({strategies}), one client "
        "message per chunk group, deltas accumulated as an OpenAI client does. Requests carry what a "
        "serving stack sends: the fixture's `tools` as `tools_json`, its `thinking` switch, the prompt "
        "tail's token ids, and finish reason `length` for truncated outputs. Statuses and checks are the "
        "suite's own (`spec/README.md` of the package).",
        "",
        "Two delivery modes are replayed: **`complete_tool_calls`** delivers each tool call in one delta "
        "once its closing marker arrived and its arguments validated; **default streaming** sends "
        "argument fragments as they are generated. They differ only on a call that ends badly — cut by "
        "`max_tokens`, or closed but malformed: default mode has already streamed it.",
        "",
        f"Regenerate with `{COMMAND}` (starts its own server; `--server HOST:PORT` uses a running one). "
        "CI runs the same replay as `tests/test_conformance.py`.",
        "",
        "## Summary",
        "",
        *_summary(run),
        "",
        "The engines' numbers are the suite's published snapshot (pass + soft pass of the fixtures each "
        f"engine ran); the last column puts everyone over the suite's {len(support.fixtures())} fixtures.",
        "",
        "## Targets",
        "",
        *_targets(run),
        "",
        "## Per family",
        "",
        *_families(run),
        "",
        "### Presets used",
        "",
        *_presets(run),
        "",
    ]
    out += _failure_sections(run, notes)
    out += [
        "## How to read and update this page",
        "",
        "- *cause (automatic)* is derived from the failing checks; kind `policy` and `harness` are "
        "certain, `bug?` and `policy?` are suspicions until a note confirms them.",
        f"- {TODO} marks failures nobody has explained yet: add a table to `tests/conformance/notes.toml`",
        '  (`["family/fixture-id"]` with `kind = "bug" | "policy" | "fixture"` and `note = "..."`), then '
        "regenerate.",
        "",
    ]
    return "\n".join(out)


# ------------------------------------------------------------------------------- json
def to_json(run: SuiteRun) -> dict[str, Any]:
    """Machine-readable results (``--json``): one record per fixture and mode."""
    return {
        "canitoolcall": metadata.version("canitoolcall"),
        "strategies": [s.id for s in DEFAULT_STRATEGIES],
        "seconds": round(run.seconds, 1),
        "modes": {
            mode: [
                {
                    "fixture": o.fixture.id,
                    "family": o.fixture.family,
                    "status": o.status.value,
                    "preset": o.preset,
                    "reason": o.reason,
                    "failing": o.failing,
                    "details": [
                        {
                            "check": r.check,
                            "strategy": r.strategy,
                            "status": r.status.value,
                            "detail": r.detail,
                        }
                        for r in o.rows
                        if r.status.value in ("fail", "error", "soft_pass")
                    ],
                    "service_problems": list(o.service_problems),
                }
                for o in outcomes
            ]
            for mode, outcomes in run.outcomes.items()
        },
    }


def failure_lines(run: SuiteRun, mode: str, notes: Mapping[str, Note] | None = None) -> Sequence[str]:
    """One line per failure (for terminal output and test messages)."""
    notes = load_notes() if notes is None else notes
    lines = []
    for o in run.outcomes.get(mode, []):
        if o.supported and not o.ok:
            kind, cause, _ = explain(o, run, notes)
            lines.append(f"{o.fixture.id} [{kind}] {', '.join(o.failing)}: {_cell(cause, 300)}")
    return lines
