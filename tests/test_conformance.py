"""The canitoolcall suite through the live gRPC service: every fixture, every default chunking
strategy, both delivery modes — the claims of ``docs/conformance.md``, enforced in CI.

One real ``parsetier serve`` process on loopback; one channel; all sessions concurrent. The run
happens once per test session (the first test pays for it, about a minute) and the per-family
tests read it, so a failure names its family and lists every offending fixture with its cause.

What is asserted, in both modes unless said otherwise:

* zero failures of ``stream_equals_nonstream``, ``split_invariance`` and ``no_leakage``;
* every stream's ``Final`` message equals its joined deltas (the service's own contract);
* ``complete_tool_calls``: at least 98% of supported fixtures pass or soft-pass;
* default streaming: every failure is the documented truncated-output policy (tag ``truncated``,
  only the expected result and the cut call's arguments differ), or a fixture that fails in
  ``complete_tool_calls`` mode too (a bug, counted against the 98% there).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest
from canitoolcall.adapters.worker import replay
from canitoolcall.chunking import DEFAULT_STRATEGIES
from canitoolcall.runner import evaluate

import canitoolcall_support as support
import marker_tokenizers
from conformance.adapter import Connection, ParsetierAdapter
from conformance.report import failure_lines
from conformance.run import (
    MODES,
    TARGET,
    SuiteRun,
    ok_share,
    run_suite,
    unexplained_default_failures,
    zero_tolerance_failures,
)
from grpc_servers import ProcessServer

pytestmark = pytest.mark.slow  # the public conformance suite

FAMILIES = sorted(support.families())


def _warm() -> None:
    """Build every request (loads the presets' tokenizers here, the serving-stack side) while the
    server process loads its own: the two start-ups overlap instead of adding up."""
    for fixture in support.fixtures():
        if support.preset_for(fixture) is not None:
            support.case_for(fixture)


@pytest.fixture(scope="module")
def server() -> Iterator[ProcessServer]:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        warming = pool.submit(_warm)
        config = str(marker_tokenizers.config_file())
        with ProcessServer("--config", config, "--max-loop-lag-ms", "0") as process:
            warming.result()
            yield process


@pytest.fixture(scope="module")
def connection(server: ProcessServer) -> Iterator[Connection]:
    with Connection(server.target) as conn:
        yield conn


@pytest.fixture(scope="module")
def suite(connection: Connection) -> SuiteRun:
    return run_suite(connection, MODES)


def _family(run: SuiteRun, mode: str, family: str):
    outcomes = run.by_family(mode).get(family, [])
    assert any(o.supported for o in outcomes), f"no preset serves the {family} fixtures"
    return outcomes


def _listing(lines: list[str]) -> str:
    return "\n  " + "\n  ".join(lines)


def test_a_preset_serves_every_family() -> None:
    """Every fixture family of the suite maps to a preset, so no family's checks run on nothing."""
    served = {f.family for f in support.fixtures() if support.preset_for(f) is not None}
    assert not set(FAMILIES) - served, f"families no preset serves: {sorted(set(FAMILIES) - served)}"


def test_every_preset_the_suite_needs_has_its_tokenizer(connection: Connection) -> None:
    """A missing tokenizer makes its fixtures 'unsupported' and silently shrinks the run."""
    served = connection.models()
    needed = {support.preset_for(f) for f in support.fixtures()} - {None}
    missing = sorted(p for p in needed if p in served and not served[p].tokenizer_available)
    assert not missing, f"install the tokenizers extra (pip install -e '.[tokenizers]'): {missing}"
    not_served = sorted(p for p in needed if p not in served)
    assert not not_served, f"presets the suite maps to but the server does not list: {not_served}"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_streams_agree_and_nothing_leaks(suite: SuiteRun, mode: str, family: str) -> None:
    outcomes = _family(suite, mode, family)
    bad = [
        f"{o.fixture.id}: {check}: {o.first_detail(check)[:300]}"
        for o, check in zero_tolerance_failures(outcomes)
    ]
    assert not bad, f"{len(bad)} zero-tolerance failure(s) in {mode} mode:" + _listing(bad)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_final_message_is_the_joined_deltas(suite: SuiteRun, mode: str, family: str) -> None:
    outcomes = _family(suite, mode, family)
    bad = [f"{o.fixture.id}: {p}" for o in outcomes for p in o.service_problems]
    assert not bad, "the service contradicted itself:" + _listing(bad[:20])


@pytest.mark.parametrize("family", FAMILIES)
def test_default_mode_fails_only_by_the_truncation_policy(suite: SuiteRun, family: str) -> None:
    _family(suite, "default", family)
    bad = [o.fixture.id for o in unexplained_default_failures(suite) if o.fixture.family == family]
    lines = [line for line in failure_lines(suite, "default") if line.split(" ", 1)[0] in bad]
    assert not bad, "default-mode failures that are not the truncated-output policy:" + _listing(lines)


@pytest.mark.parametrize("family", FAMILIES)
def test_no_harness_errors(suite: SuiteRun, family: str) -> None:
    errors = [
        f"{o.mode} {o.fixture.id}: {o.reason}"
        for mode in MODES
        for o in suite.by_family(mode).get(family, [])
        if o.status.value == "error"
    ]
    assert not errors, "replays that could not be carried out:" + _listing(errors)


def test_complete_mode_meets_the_target(suite: SuiteRun) -> None:
    ok, supported = ok_share(suite.outcomes["complete"])
    assert supported, "no supported fixtures at all"
    share = ok / supported
    assert share >= TARGET, (
        f"complete_tool_calls: {ok}/{supported} = {share:.1%} pass or soft-pass, below {TARGET:.0%}:"
        + _listing(list(failure_lines(suite, "complete")))
    )


def test_the_suites_own_worker_sees_the_same(suite: SuiteRun, connection: Connection) -> None:
    """The adapter's synchronous contract, driven by canitoolcall's own worker ``replay`` and
    runner ``evaluate``, judges a sample exactly like the bulk run (one fixture per family, both
    modes): the concurrent driver adds speed, not a different answer."""
    sample = {}
    for fixture in support.fixtures():
        if fixture.family not in sample and support.preset_for(fixture) is not None:
            sample[fixture.family] = fixture
    assert sample
    for mode in MODES:
        adapter = ParsetierAdapter(connection=connection, complete_tool_calls=mode == "complete")
        for fixture in sample.values():
            family = support.families().get(fixture.family)
            case = evaluate(fixture, family, replay(adapter, fixture, family, DEFAULT_STRATEGIES))
            bulk = suite.outcome(mode, fixture.id)
            assert bulk is not None
            assert case.status == bulk.status, (mode, fixture.id, case.checks)
            assert _rows(case.checks) == _rows(bulk.rows), (mode, fixture.id)


def _rows(rows) -> list[tuple[str, str, str, str]]:
    return sorted((r.check, r.strategy, r.status.value, r.detail or "") for r in rows)
