"""The ``session_end`` line written directly by ``configure``'s handler (no ``LogRecord``) is the
line the ``logging`` path writes, and any other handler, filter or propagation gets records."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator

import pytest

from parsetier.service import logs


def _only_configured() -> None:
    """Drop the capture handlers pytest adds for each test phase: ``configure``'s handler alone
    is what a server has."""
    root = logging.getLogger("parsetier")
    root.handlers[:] = [h for h in root.handlers if type(h) is logs.JsonLines]


@pytest.fixture()
def configured() -> Iterator[io.StringIO]:
    root = logging.getLogger("parsetier")
    saved = root.handlers[:], root.level, root.propagate
    sink = io.StringIO()
    logs.configure("INFO", sink, fields={"worker": 3})
    try:
        yield sink
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def _record() -> logs.SessionRecord:
    record = logs.SessionRecord(rpc="ParseBatch", model="qwen3", request_id='é"\n\x00x')
    record.tokens, record.deltas = 112, 40
    return record


def _same_but_times(direct: str, via_logging: str) -> None:
    a, b = json.loads(direct), json.loads(via_logging)
    for varies in ("ts", "duration_ms"):
        assert a.pop(varies) and b.pop(varies)
    assert list(a.items()) == list(b.items())


def test_the_direct_line_is_the_logging_line(configured: io.StringIO) -> None:
    _only_configured()
    record = _record()
    assert logs._direct(logging.INFO) is not None
    record.emit()
    logging.getLogger("parsetier").propagate = True  # not the direct path now
    assert logs._direct(logging.INFO) is None
    record.emit()
    direct, via_logging = configured.getvalue().splitlines()
    _same_but_times(direct, via_logging)
    assert json.loads(direct)["worker"] == 3 and json.loads(direct)["request_id"] == 'é"\n\x00x'


def test_errors_are_warnings_on_both_paths(configured: io.StringIO) -> None:
    _only_configured()
    record = _record()
    record.outcome, record.error = "INVALID_ARGUMENT", "bad id"
    record.emit()
    logging.getLogger("parsetier.engine.session").addFilter(lambda _: True)
    try:
        record.emit()
    finally:
        logging.getLogger("parsetier.engine.session").filters.clear()
    direct, via_logging = configured.getvalue().splitlines()
    _same_but_times(direct, via_logging)
    assert json.loads(direct)["level"] == "warning" and json.loads(direct)["error"] == "bad id"


def test_another_handler_gets_the_records(configured: io.StringIO) -> None:
    _only_configured()
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logging.getLogger("parsetier").addHandler(handler)
    _record().emit()
    assert [r.getMessage() for r in seen] == ["session_end"]
    assert seen[0].fields["tokens"] == 112  # type: ignore[attr-defined]
    assert len(configured.getvalue().splitlines()) == 1  # configure's handler wrote it too


def test_a_level_above_info_writes_no_line(configured: io.StringIO) -> None:
    _only_configured()
    logging.getLogger("parsetier").setLevel(logging.WARNING)
    _record().emit()
    assert configured.getvalue() == ""


def test_timestamps_are_the_formatters() -> None:
    formatter = logs.JsonFormatter()
    for created in (1700000000.0, 1700000000.9996, 1700000001.5, 1700000001.001, 1700000000.25):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        millis = int((created - int(created)) * 1000)
        assert json.loads(formatter.line(created, "INFO", "a", "b", {}))["ts"] == f"{stamp}.{millis:03d}Z"


@pytest.mark.parametrize("static", [{}, {"worker": 3, "pid": 'x"y\u2028'}, {"model": "clash"}, {"ts": 1}])
def test_session_end_lines_are_the_formatters_lines(static: dict[str, object]) -> None:
    """The ``session_end`` lines written directly (``SessionRecord.json_fields``) are, byte for
    byte, the formatter's lines of the records' fields: strings that need escapes, long ones
    clipped, an error or none, each level, static fields (one named as a line's field takes the
    formatter's path)."""
    formatter = logs.JsonFormatter(static)
    records = []
    cases = [
        ("qwen3", "", "", "OK"),
        ('é"\\\n\x01💥', "r" * 300, "bad \u2028 thing " * 100, "INVALID_ARGUMENT"),
        ("m", "id", "", "CANCELLED"),
    ]
    for i, (model, request_id, error, outcome) in enumerate(cases):
        record = logs.SessionRecord(
            rpc="ParseBatch", model=model, request_id=request_id, error=error, outcome=outcome
        )
        record.finish_reason, record.choice_index, record.text_bytes, record.replayed = "tool_calls", i, 7, 3
        record.tokens, record.deltas, record.events = 10**12 + i, 5, 2
        record.client_messages, record.server_messages = 9, 8
        record.ended_at = record.started + 0.123456 * i
        records.append((record.level(), record))
    now = 1700000001.0015
    direct = formatter.session_end_lines(now, "parsetier.engine.session", records)
    name = logging.getLevelName
    lines = [
        formatter.line(now, name(lv), "parsetier.engine.session", "session_end", r.line_fields())
        for lv, r in records
    ]
    assert direct == "".join(line + "\n" for line in lines)
