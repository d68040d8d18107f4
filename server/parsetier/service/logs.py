"""Structured logs: one JSON object per line on stderr, one ``session_end`` line per session.

Log shippers parse JSON lines without configuration, and one line per session (rather than per
message) keeps the volume proportional to requests, not tokens.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field, fields
from typing import TextIO

from parsetier.protocol.session import SessionCounts

SESSION_LOG = logging.getLogger("parsetier.engine.session")
SERVER_LOG = logging.getLogger("parsetier.server")

MAX_FIELD_CHARS = 256
"""Longest client-given string (model name, request id) a log line repeats."""
MAX_MESSAGE_CHARS = 1024
"""Longest error or status message sent or logged (a status travels in an HTTP/2 header)."""


def clip(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """``text``, cut to ``limit`` characters with a note of how much was cut: a client's 1 MB
    model name must not become a 1 MB log line or status."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit} chars)"


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
"""``json.dumps(…, ensure_ascii=False, default=str)``, made once (``dumps`` with options makes an
encoder per call)."""
_string = json.encoder.encode_basestring
"""How ``_ENCODER`` writes a ``str`` (its quotes and escapes: ``ensure_ascii=False``)."""
_HEAD = ("ts", "level", "logger", "msg")


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...fields}``; extra fields come from ``extra={"fields": {...}}``,
    and ``static`` fields (e.g. which worker process wrote the line) are on every line."""

    def __init__(self, static: dict[str, object] | None = None) -> None:
        super().__init__()
        self.static = dict(static or {})
        self._second, self._stamp = -1, ""
        """The last second a line was made in, as the timestamp shows it (``strftime`` per line
        is a tenth of the line's cost)."""
        self._static_text: str | None = None
        """The static fields as ``line`` writes them, for ``session_end_lines``; None when a
        static field shares a name with a field ``line`` writes (its value would replace that one
        in place), and the lines take ``line``."""
        if all(type(key) is str for key in self.static) and not set(self.static) & _NAMED:
            encode = _ENCODER.encode
            self._static_text = "".join(f", {encode(k)}: {encode(v)}" for k, v in self.static.items())

    def format(self, record: logging.LogRecord) -> str:
        exc = self.formatException(record.exc_info) if record.exc_info else None
        fields = getattr(record, "fields", {})
        return self.line(record.created, record.levelname, record.name, record.getMessage(), fields, exc)

    def line(
        self, created: float, level: str, logger: str, msg: str, fields: dict, exc: str | None = None
    ) -> str:
        """The JSON line of a record made at ``created`` (``time.time()``)."""
        second = int(created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        data = {
            "ts": f"{self._stamp}.{int((created - second) * 1000):03d}Z",
            "level": level.lower(),
            "logger": logger,
            "msg": msg,
            **self.static,
        }
        data.update(fields)
        if exc is not None:
            data["exc"] = exc
        return _ENCODER.encode(data)

    def session_end_lines(self, created: float, logger: str, records: list[tuple[int, SessionRecord]]) -> str:
        """The ``session_end`` lines of ``records`` (each with its level), made at ``created``,
        each ended by a newline: exactly ``line``'s text for each (``SessionRecord.json_fields``
        writes the fields' JSON directly, where ``line`` builds two dicts and encodes them)."""
        if self._static_text is None:
            return "".join(
                self.line(created, logging.getLevelName(level), logger, "session_end", record.line_fields())
                + "\n"
                for level, record in records
            )
        second = int(created)
        if second != self._second:
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        stamp = f"{self._stamp}.{int((created - second) * 1000):03d}Z"
        heads: dict[int, str] = {}
        parts = []
        for level, record in records:
            head = heads.get(level)
            if head is None:
                name = logging.getLevelName(level).lower()
                head = heads[level] = (
                    f'{{"ts": {_string(stamp)}, "level": {_string(name)}, "logger": {_string(logger)}, '
                    f'"msg": "session_end"{self._static_text}, '
                )
            parts.append(head)
            parts.append(record.json_fields())
            parts.append("}\n")
        return "".join(parts)


class JsonLines(logging.StreamHandler):
    """The handler ``configure`` installs: ``JsonFormatter`` lines on a stream. ``write`` writes
    one line with no ``LogRecord``: the ``session_end`` line's path when this handler is the only
    one (a record, its caller lookup and the handler chain cost more than the line itself, and
    there is one line per session: at one-token steps of short sessions, a fifth of a
    ``ParseBatch`` server's CPU went to them)."""

    formatter: JsonFormatter

    def write(self, level: int, logger: str, msg: str, fields: dict[str, object]) -> None:
        self.write_all(logger, msg, [(level, fields)])

    def write_all(self, logger: str, msg: str, lines: list[tuple[int, dict[str, object]]]) -> None:
        """Lines of one ``logger`` and ``msg`` (each its level and fields), made now and written
        with one write and one flush."""
        now, line, end, name = time.time(), self.formatter.line, self.terminator, logging.getLevelName
        self._write("".join(line(now, name(level), logger, msg, fields) + end for level, fields in lines))

    def write_session_ends(self, records: list[tuple[int, SessionRecord]]) -> None:
        """The ``session_end`` lines of ``records`` (each with its level), made now and written
        with one write and one flush: a ``ParseBatch`` message's (``emit_all``)."""
        if self.terminator != "\n":
            self.write_all(
                SESSION_LOG.name, "session_end", [(level, r.line_fields()) for level, r in records]
            )
            return
        self._write(self.formatter.session_end_lines(time.time(), SESSION_LOG.name, records))

    def _write(self, text: str) -> None:
        with self.lock:  # type: ignore[union-attr]  # StreamHandler always has its lock
            self.stream.write(text)
            self.flush()


_PARSETIER_LOG = logging.getLogger("parsetier")


def _direct(level: int) -> JsonLines | None:
    """``configure``'s handler when a ``SESSION_LOG`` record at ``level`` would go to it alone,
    unfiltered (else None: a test's handler, a filter, propagation: the ``logging`` path)."""
    if SESSION_LOG.handlers or SESSION_LOG.filters or _PARSETIER_LOG.filters or _PARSETIER_LOG.propagate:
        return None
    handlers = _PARSETIER_LOG.handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if type(handler) is not JsonLines or handler.filters or level < handler.level:
        return None
    return handler


def configure(
    level: str = "INFO", stream: TextIO | None = None, fields: dict[str, object] | None = None
) -> None:
    """Send parsetier's logs to ``stream`` (stderr) as JSON lines, each carrying ``fields``."""
    handler = JsonLines(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(fields))
    root = _PARSETIER_LOG
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


@dataclass(slots=True)
class SessionRecord(SessionCounts):
    """What the ``session_end`` line says about one session: the protocol's counts (it fills them
    in as the session runs) plus the RPC, the outcome and the duration."""

    rpc: str = ""
    outcome: str = "OK"
    """``OK`` or the gRPC status code name the session ended with."""
    error: str = ""
    started: float = field(default_factory=time.monotonic, repr=False)

    ended_at: float = field(default=0.0, repr=False)
    """When the session ended (``time.monotonic``), for a line written later (``emit_all``);
    0: the line is written as it ends."""

    def emit(self) -> None:
        emit_all([self])

    def level(self) -> int:
        """The ``session_end`` line's level."""
        return logging.INFO if self.outcome in ("OK", "CANCELLED") else logging.WARNING

    def line(self) -> tuple[int, dict[str, object]] | None:
        """The ``session_end`` line's level and fields; None when that level is not logged."""
        level = self.level()
        if not SESSION_LOG.isEnabledFor(level):
            return None
        return level, self.line_fields()

    def line_fields(self) -> dict[str, object]:
        """The ``session_end`` line's fields."""
        # Every field is a str, int or float: read them directly (``dataclasses.asdict`` copies
        # recursively, a third of a ParseBatch session's end).
        line = {name: getattr(self, name) for name in _LOGGED}
        line["duration_ms"] = round(((self.ended_at or time.monotonic()) - self.started) * 1000, 3)
        for key in ("model", "request_id", "finish_reason"):
            line[key] = clip(line[key])
        if self.error:
            line["error"] = clip(self.error, MAX_MESSAGE_CHARS)
        else:
            del line["error"]
        return line

    def json_fields(self) -> str:
        """``line_fields`` as the JSON line writes them (``_ENCODER``: ``, `` and ``: ``
        separators, the strings as ``_string`` writes them, ints and floats as their ``repr``),
        without the braces: written directly, in ``_LOGGED``'s order (a test holds the two
        equal). The counters are read from the ledger itself, not through the properties."""
        ledger = self.ledger
        duration = round(((self.ended_at or time.monotonic()) - self.started) * 1000, 3)
        error = f', "error": {_string(clip(self.error, MAX_MESSAGE_CHARS))}' if self.error else ""
        return (
            f'"model": {_string(clip(self.model))}, "request_id": {_string(clip(self.request_id))}, '
            f'"choice_index": {self.choice_index!r}, "tokens": {ledger.tokens!r}, '
            f'"text_bytes": {self.text_bytes!r}, "deltas": {ledger.deltas!r}, "events": {ledger.events!r}, '
            f'"client_messages": {ledger.client_messages!r}, "server_messages": {ledger.server_messages!r}, '
            f'"finish_reason": {_string(clip(self.finish_reason))}, "replayed": {self.replayed!r}, '
            f'"rpc": {_string(self.rpc)}, "outcome": {_string(self.outcome)}{error}, '
            f'"duration_ms": {duration!r}'
        )


def emit_all(records: list[SessionRecord]) -> None:
    """The records' ``session_end`` lines, in order. When they go to ``configure``'s handler
    alone they are written with no ``LogRecord``, all in one write (``JsonLines.write_all``): a
    ``ParseBatch`` stream writes the lines of the sessions one message ended together, at that
    message's end (their timestamp is that write's; ``duration_ms`` ends at ``ended_at``)."""
    direct: list[tuple[int, SessionRecord]] = []
    handler: JsonLines | None = None
    handlers: dict[int, JsonLines | None] = {}
    for record in records:
        level = record.level()
        if level in handlers:
            to = handlers[level]
        elif SESSION_LOG.isEnabledFor(level):
            to = handlers[level] = _direct(level)
        else:
            continue
        if to is None:
            SESSION_LOG.log(level, "session_end", extra={"fields": record.line_fields()})
        else:
            handler = to
            direct.append((level, record))
    if handler is None:
        return
    try:
        handler.write_session_ends(direct)
    except Exception:  # as the handler's own emit would: say so on stderr, go on
        for level, record in direct:
            SESSION_LOG.log(level, "session_end", extra={"fields": record.line_fields()})


_COUNTS_FIELDS = {f.name for f in fields(SessionCounts)} | {"started", "ended_at"}
_LOGGED = (
    "model",
    "request_id",
    "choice_index",
    "tokens",
    "text_bytes",
    "deltas",
    "events",
    "client_messages",
    "server_messages",
    "finish_reason",
    "replayed",
    *(f.name for f in fields(SessionRecord) if f.name not in _COUNTS_FIELDS),
)
"""The ``session_end`` line's fields (the counts' own, then the record's; ``error`` only when
there is one). The counters are the ledger's (``SessionCounts``' properties)."""
_NAMED = {*_HEAD, *_LOGGED, "duration_ms", "exc"}
"""Names the ``session_end`` line writes itself (a static field of one of these names is not
written by ``session_end_lines``' direct path)."""
