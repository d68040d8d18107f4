"""Running the whole suite through the service, in both delivery modes, and reading the outcome.

One run replays every fixture of the installed canitoolcall: one ``ParseOnce`` plus one ``Parse``
stream per default chunking strategy, per mode, all concurrently over one channel. The checks are
the suite's own (``run_checks`` / ``case_status``); what this module adds is the project's reading
of them — the zero-tolerance checks, the documented streaming policy for truncated output, and the
98% target — so the CI test and ``docs/conformance.md`` apply the very same rules.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from canitoolcall.checks import NONSTREAM, case_status, run_checks
from canitoolcall.chunking import DEFAULT_STRATEGIES, ChunkStrategy, split
from canitoolcall.fixtures import Fixture
from canitoolcall.results import CheckResult, Observation, ParseResult, Status

import canitoolcall_support as support
from conformance.adapter import Connection, HarnessError, ParsetierAdapter

MODES: tuple[str, ...] = ("complete", "default")
"""``complete``: ``complete_tool_calls`` (each call delivered whole once closed and validated);
``default``: argument fragments stream as they are generated."""

ZERO_TOLERANCE: tuple[str, ...] = ("stream_equals_nonstream", "split_invariance", "no_leakage")
"""Checks that must never fail, in either mode: they catch chunking bugs and marker leaks."""

EXPECTED_CHECKS = frozenset({"expected_error", "expected_match"})
POLICY_CHECKS = EXPECTED_CHECKS | {"arguments_json", "arguments_schema"}
"""The checks the truncated-output streaming policy may fail: the expected result (the cut call
was delivered), and — as a consequence of the same cut — the JSON validity and schema of that
call's arguments, which end where generation ended."""

TARGET = 0.98
"""Share of supported fixtures that must pass or soft-pass in ``complete`` mode."""

OK = (Status.PASS, Status.SOFT_PASS)


@dataclass(frozen=True)
class Outcome:
    """One fixture replayed in one mode, judged by the suite's checks."""

    fixture: Fixture
    mode: str
    status: Status
    rows: tuple[CheckResult, ...] = ()
    reason: str | None = None
    """Why it is unsupported, or the harness error."""
    preset: str | None = None
    reencoded: bool = False
    """The fixture's ids were not of our tokenizer; its text was re-encoded (Kimi, Gemma 4)."""
    service_problems: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def supported(self) -> bool:
        return self.status is not Status.UNSUPPORTED

    @property
    def ok(self) -> bool:
        return self.status in OK

    @property
    def failing(self) -> dict[str, list[str]]:
        """Failing check → the parses (``nonstream``, strategy ids, ``*``) it failed on."""
        out: dict[str, list[str]] = {}
        for row in self.rows:
            if row.status in (Status.FAIL, Status.ERROR):
                out.setdefault(row.check, []).append(row.strategy)
        return out

    def first_detail(self, check: str | None = None) -> str:
        for row in self.rows:
            if row.status in (Status.FAIL, Status.ERROR) and (check is None or row.check == check):
                return row.detail or ""
        return self.reason or ""


@dataclass
class SuiteRun:
    """Every outcome of a run, by mode, in fixture order."""

    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)
    seconds: float = 0.0
    target: str = ""

    def by_family(self, mode: str) -> dict[str, list[Outcome]]:
        out: dict[str, list[Outcome]] = {}
        for o in self.outcomes.get(mode, []):
            out.setdefault(o.fixture.family, []).append(o)
        return out

    def outcome(self, mode: str, fixture_id: str) -> Outcome | None:
        return next((o for o in self.outcomes.get(mode, []) if o.fixture.id == fixture_id), None)


# ------------------------------------------------------------------------------- running
def groups_for(case: support.Case, strategy: ChunkStrategy) -> list[list[int]]:
    """The chunk groups a strategy makes of the case's ids (``special`` splits at marker ids)."""
    return split(list(case.units), strategy, special=case.special_ids)


async def _observe(
    adapter: ParsetierAdapter, case: support.Case, strategies: Sequence[ChunkStrategy]
) -> Observation:
    """Non-streaming parse plus one stream per strategy, all in flight at once."""
    tools = list(case.fixture.tools)
    nonstream = adapter.parse_once_async(case, tools)
    streams = [adapter.parse_stream_async(case, groups_for(case, s), tools, s.id) for s in strategies]
    results: list[ParseResult] = await asyncio.gather(nonstream, *streams)
    return Observation(
        nonstream=results[0], streams={s.id: r for s, r in zip(strategies, results[1:], strict=True)}
    )


def _prepare(adapter: ParsetierAdapter, fixture: Fixture) -> support.Case | Outcome:
    """The case to replay, or the outcome that says why there is none."""
    sup = adapter.supports(fixture.family, fixture.models[0])
    if not sup:
        return Outcome(fixture, adapter.mode, Status.UNSUPPORTED, reason=sup.reason)
    try:
        return adapter.case(fixture)
    except Exception as exc:  # a local tokenizer that does not load is a setup problem
        return Outcome(fixture, adapter.mode, Status.ERROR, reason=f"cannot build the request: {exc}")


def judge(
    case: support.Case, mode: str, observation: Observation, problems: Iterable[str], seconds: float
) -> Outcome:
    """The suite's checks on one observation (the same rows ``canitoolcall run`` records)."""
    family = support.families().get(case.fixture.family)
    rows = tuple(run_checks(case.fixture, family, observation))
    return Outcome(
        case.fixture,
        mode,
        case_status(rows),
        rows,
        preset=case.preset,
        reencoded=case.reencoded,
        service_problems=tuple(problems),
        seconds=seconds,
    )


def run_suite(
    connection: Connection,
    modes: Sequence[str] = MODES,
    families: Iterable[str] | None = None,
    strategies: Sequence[ChunkStrategy] = DEFAULT_STRATEGIES,
) -> SuiteRun:
    """Replay the selected fixtures (default: all) in each mode through the server behind
    ``connection``. Sessions of all fixtures and modes overlap; the connection's limit caps them."""
    wanted = set(families) if families is not None else None
    fixtures = [f for f in support.fixtures() if wanted is None or f.family in wanted]
    adapters = {
        mode: ParsetierAdapter(connection=connection, complete_tool_calls=mode == "complete")
        for mode in modes
    }
    started = time.perf_counter()

    pending: list[tuple[str, support.Case]] = []
    done: dict[tuple[str, str], Outcome] = {}
    for mode, adapter in adapters.items():
        for fixture in fixtures:
            prepared = _prepare(adapter, fixture)
            if isinstance(prepared, Outcome):
                done[mode, fixture.id] = prepared
            else:
                pending.append((mode, prepared))

    async def timed(mode: str, case: support.Case) -> tuple[Observation | str, float]:
        t0 = time.perf_counter()
        try:
            obs: Observation | str = await _observe(adapters[mode], case, strategies)
        except HarnessError as exc:
            obs = f"harness error: {exc}"
        return obs, time.perf_counter() - t0

    async def everything() -> list[tuple[Observation | str, float]]:
        return await asyncio.gather(*(timed(mode, case) for mode, case in pending))

    observed = connection.run(everything())
    # Judging is CPU work: done here, not on the connection's loop, which only does I/O.
    for (mode, case), (obs, seconds) in zip(pending, observed, strict=True):
        if isinstance(obs, str):
            done[mode, case.fixture.id] = Outcome(
                case.fixture, mode, Status.ERROR, reason=obs, preset=case.preset
            )
            continue
        problems = adapters[mode].service_problems.get(case.fixture.id, [])
        done[mode, case.fixture.id] = judge(case, mode, obs, problems, seconds)

    run = SuiteRun(seconds=time.perf_counter() - started, target=connection.target)
    for mode in modes:
        run.outcomes[mode] = [done[mode, f.id] for f in fixtures]
    return run


# ------------------------------------------------------------------------------- reading
def counts(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """pass / soft_pass / fail / unsupported (harness errors count as fail)."""
    out = {"pass": 0, "soft_pass": 0, "fail": 0, "unsupported": 0}
    for o in outcomes:
        if o.status is Status.ERROR:
            out["fail"] += 1
        else:
            out[o.status.value] += 1
    return out


def ok_share(outcomes: Iterable[Outcome]) -> tuple[int, int]:
    """(pass + soft pass, supported fixtures)."""
    supported = [o for o in outcomes if o.supported]
    return sum(o.ok for o in supported), len(supported)


def zero_tolerance_failures(outcomes: Iterable[Outcome]) -> list[tuple[Outcome, str]]:
    """(outcome, check) for every zero-tolerance check an outcome failed."""
    return [(o, check) for o in outcomes for check in o.failing if check in ZERO_TOLERANCE]


def streamed_before_known(outcome: Outcome) -> bool:
    """The default-mode failure pattern of a call that was streamed before its end could show it
    incomplete or invalid: only the expected result (the call is there) and that call's
    ``arguments_*`` checks fail. Which fixtures this is *accepted* for is ``POLICY_TAGS``."""
    failing = set(outcome.failing)
    return (
        outcome.mode == "default"
        and outcome.status is Status.FAIL
        and bool(failing & EXPECTED_CHECKS)
        and failing <= POLICY_CHECKS
    )


POLICY_TAGS = frozenset({"truncated", "malformed"})
"""Fixture tags for which ``streamed_before_known`` is the documented streaming policy
(docs/engine.md): arguments stream as generated and are never retracted, so a call cut by
``max_tokens`` (``truncated``) or one whose JSON turns out broken only at its end (``malformed``)
keeps what was streamed. ``complete_tool_calls`` is the mode that withholds such calls."""


def is_truncation_policy(outcome: Outcome) -> bool:
    """A default-mode failure that is the documented streaming policy, not a bug: the output was
    cut by ``max_tokens`` (tag ``truncated``), and only the expected result differs — argument
    fragments of the cut call were already streamed, as generated, before the cut (so the call
    is there, with arguments that stop where the output stopped)."""
    return bool(POLICY_TAGS & set(outcome.fixture.tags)) and streamed_before_known(outcome)


def unexplained_default_failures(run: SuiteRun) -> list[Outcome]:
    """Default-mode failures that are neither the truncation policy nor a fixture that fails in
    complete mode too (those are bugs already counted against the complete-mode target)."""
    out = []
    for o in run.outcomes.get("default", []):
        if o.ok or not o.supported or is_truncation_policy(o):
            continue
        twin = run.outcome("complete", o.fixture.id)
        if twin is not None and twin.supported and not twin.ok:
            continue
        out.append(o)
    return out


def strategies_label(strategies: Sequence[str], total: int) -> str:
    """``all parses`` or a compact list (``nonstream, one, rand×5``) for reports."""
    if len(strategies) >= total:
        return "all parses"
    rand = [s for s in strategies if s.startswith("rand:")]
    rest = [s for s in strategies if not s.startswith("rand:")]
    if len(rand) > 1:
        rest.append(f"rand×{len(rand)}")
    else:
        rest.extend(rand)
    return ", ".join(rest)


def parses_per_case(strategies: Sequence[ChunkStrategy] = DEFAULT_STRATEGIES) -> int:
    return 1 + len(strategies)


__all__ = [
    "MODES",
    "NONSTREAM",
    "TARGET",
    "ZERO_TOLERANCE",
    "Outcome",
    "SuiteRun",
    "counts",
    "is_truncation_policy",
    "ok_share",
    "run_suite",
    "unexplained_default_failures",
    "zero_tolerance_failures",
]
