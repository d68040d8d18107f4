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

from parsetier.protocol import SessionCounts

SESSION_LOG = logging.getLogger("parsetier.session")
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


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", ...fields}``; extra fields come from ``extra={"fields": {...}}``,
    and ``static`` fields (e.g. which worker process wrote the line) are on every line."""

    def __init__(self, static: dict[str, object] | None = None) -> None:
        super().__init__()
        self.static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **self.static,
        }
        data.update(getattr(record, "fields", {}))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def configure(
    level: str = "INFO", stream: TextIO | None = None, fields: dict[str, object] | None = None
) -> None:
    """Send parsetier's logs to ``stream`` (stderr) as JSON lines, each carrying ``fields``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(fields))
    root = logging.getLogger("parsetier")
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

    def emit(self) -> None:
        level = logging.INFO if self.outcome in ("OK", "CANCELLED") else logging.WARNING
        if not SESSION_LOG.isEnabledFor(level):
            return
        # Every field is a str, int or float: read them directly (``dataclasses.asdict`` copies
        # recursively, a third of a ParseBatch session's end).
        line = {name: getattr(self, name) for name in _LOGGED}
        line["duration_ms"] = round((time.monotonic() - self.started) * 1000, 3)
        for key in ("model", "request_id", "finish_reason"):
            line[key] = clip(line[key])
        if self.error:
            line["error"] = clip(self.error, MAX_MESSAGE_CHARS)
        else:
            del line["error"]
        SESSION_LOG.log(level, "session_end", extra={"fields": line})


_COUNTS_FIELDS = {f.name for f in fields(SessionCounts)} | {"started"}
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
