"""JSON envelopes that carry the name with the arguments (Hermes, Llama 3, Mistral's list)."""

from __future__ import annotations

from collections.abc import Callable

import regex

from parsetier.engine import json_bounds
from parsetier.engine.json_scan import COMPLETE, MALFORMED, OPEN, JsonValueScanner
from parsetier.engine.readers.common import SENTINEL, CallsReader, Emit

# A JSON string's body up to its closing quote. Possessive: a body cannot end before an unescaped
# quote, so giving characters back never finds another match, and the regex engine (partial
# matches above all) would otherwise retry every split of it (over a quarter of a head match's cost).
_STRING_BODY = r'(?:[^"\\]++|\\.)*+'
# Keys a call object may carry besides its name and arguments, skipped before and between them:
# ``"type": "function"`` (Llama 3's example) and the id the model numbered the call with (Cohere
# Command's ``"tool_call_id": "0"``; the delivered id is still derived, docs/engine.md).
_SKIPPED = r'(?:(?:"type"\s*:\s*"function"|"(?:id|tool_call_id)"\s*:\s*"' + _STRING_BODY + r'")\s*,\s*)*'
_NAME_KEY = r'"(?:name|tool_name)"'
# Arguments are a JSON object, or a JSON string holding one: a call starts only once its
# arguments begin as one of these. Anything else (``"arguments": invalid}``) means the envelope
# never yields a call, and its text is passed through as content (docs/service.md, "Malformed
# model output"): decided before anything of the call streamed, so nothing is retracted.
_ARGUMENTS_START = r'(?=[{"])'
_HEAD = regex.compile(
    r"\s*\{\s*"
    + _SKIPPED
    + _NAME_KEY
    + r'\s*:\s*"(?P<name>'
    + _STRING_BODY
    + r')"\s*,\s*'
    + _SKIPPED
    + r'"(?:arguments|parameters|args)"\s*:\s*'
    + _ARGUMENTS_START,
    regex.DOTALL,
)
_HEAD_ARGS_FIRST = regex.compile(
    r"\s*\{\s*" + _SKIPPED + r'"(?:arguments|parameters|args)"\s*:\s*' + _ARGUMENTS_START, regex.DOTALL
)
_NAME_AFTER = regex.compile(
    r"\s*,\s*" + _NAME_KEY + r'\s*:\s*"(?P<name>' + _STRING_BODY + r')"', regex.DOTALL
)
# Either the opening bracket, or (no bracket) the first non-space character of a bare call list; written
# without an optional "[" so that a buffer ending right after "[" is a complete match, not a partial one.
_LIST_OPEN = regex.compile(r"\s*(?:(?P<open>\[)|(?=[^\s\[]))", regex.DOTALL)
_LIST_NEXT = regex.compile(r"\s*(?:(?P<sep>[,;\]])|(?=\{))", regex.DOTALL)
_HEAD_LIMIT = 4096
_STRUCTURE = {"list?": _LIST_OPEN, "head": _HEAD, "next": _LIST_NEXT, "name-after": _NAME_AFTER}
# Keyed objects (Apertus): the tool's name is the only key and its value the arguments,
# ``{"get_weather": {"city": "Paris"}}``; arguments that are not an object are no call.
_HEAD_KEYED = regex.compile(r'\s*\{\s*"(?P<name>' + _STRING_BODY + r')"\s*:\s*(?=\{)', regex.DOTALL)


class EnvelopeReader(CallsReader):
    """``{"name": N, "arguments": {...}}`` (or a list of them) → call start + streamed arguments.

    With ``allow_list`` several call objects may follow each other: inside ``[…]`` separated by
    commas (Mistral's older form), or bare, separated by ``;`` or ``,`` (Llama); bare calls end at
    the first text that is not a separator.

    Callbacks: ``begin(name)`` once the name and the first character of the arguments are seen,
    ``args(fragment)``, ``end(text, at)`` when the object closes at ``text[at]``. ``raw`` keeps the
    text consumed before the first call began, for passthrough when the envelope turns out malformed.

    The short structural parts (the head up to the arguments, the separators of a list) are
    matched with partial regexes on a small bounded buffer; the arguments value itself streams
    through ``JsonValueScanner`` without being buffered.
    """

    __slots__ = (
        "_args",
        "_begin",
        "_bracketed",
        "_buffer",
        "_end",
        "_head",
        "_keyed",
        "_list",
        "_phase",
        "_scanner",
        "_space",
        "calls",
        "raw",
        "status",
    )

    def __init__(
        self, allow_list: bool, begin: Emit, args: Emit, end: Callable[[str, int], None], keyed: bool = False
    ) -> None:
        """``keyed``: call objects are ``{"NAME": ARGUMENTS}`` (dialect ``keyed``, Apertus)."""
        self._begin, self._args, self._end = begin, args, end
        self._keyed = keyed
        self._phase = "list?" if allow_list else "head"
        self._list = allow_list
        self._bracketed = False
        self._head = ""
        self._scanner = JsonValueScanner()
        self._buffer: list[str] = []
        self.raw: list[str] = []
        self.calls = 0
        self._space = ""
        self.status = OPEN

    def read_from(self, text: str, pos: int) -> int:
        """Consume ``text`` from ``pos``; return where reading stopped."""
        n = len(text)
        while pos < n and self.status == OPEN:
            start, phase = pos, self._phase
            if phase in ("args", "args-first", "tail"):
                pos = self._body(text, pos)
            else:
                pos = self._structure(text, pos)
            if self.calls == 0:
                self.raw.append(text[start:pos])
            # A structural part may match empty (an unbracketed list has no "["): only a step that
            # neither consumed text nor moved on to another phase waits for more text.
            if (
                pos == start
                and self.status == OPEN
                and self._phase == phase
                and phase not in ("args", "args-first", "tail")
            ):
                break
        return pos

    def _structure(self, text: str, pos: int) -> int:
        """Match one structural part; return the text position just past it (or where we wait)."""
        stop_m = SENTINEL.search(text, pos)
        stop = stop_m.start() if stop_m else len(text)
        before = len(self._head)
        self._head += text[pos:stop]
        pattern = _HEAD_KEYED if self._keyed and self._phase == "head" else _STRUCTURE[self._phase]
        m = pattern.match(self._head, partial=True)
        if m is None and self._phase == "head" and not self._keyed:
            m2 = _HEAD_ARGS_FIRST.match(self._head, partial=True)
            if m2 is not None and not m2.partial:
                self._head = ""
                self._phase = "args-first"
                self._scanner = JsonValueScanner()
                return pos + (m2.end() - before)
            if m2 is not None:
                m = m2
        if m is None and self._phase == "next" and not self._bracketed:
            # Unbracketed calls end at the first thing that is not a separator. The whitespace
            # before it that earlier pieces left in the head is not consumed (``rest`` shows it
            # with that thing, as when both arrive in one piece).
            self._space += self._head[:before]
            self._head = ""
            self.status = COMPLETE
            return pos
        # The limit is on the structure's own length, not on the text after it, so a long run of
        # text arriving at once is judged as the same text arriving id by id.
        if m is None or m.end() > _HEAD_LIMIT or (m.partial and stop_m is not None):
            # Not consumed: the text from where the structure broke is the model's (``rest``),
            # the part earlier pieces left in the head included, however the text was split.
            self.status = MALFORMED
            if self.calls > 0:
                self._space += self._head[:before]
            self._head = ""
            return pos
        if m.partial:
            return stop
        consumed = pos + (m.end() - before)
        self._head = ""
        phase = self._phase
        if phase == "list?":
            self._phase = "head"
            self._bracketed = bool(m.group("open"))
        elif phase == "next":
            if m.group("sep") == "]":
                self.status = COMPLETE
            else:
                self._phase = "head"
        elif phase == "head":
            self._start_call(m.group("name"))
            self._phase = "args"
            self._scanner = JsonValueScanner()
        else:  # name-after: the arguments came first and are buffered
            self._start_call(m.group("name"))
            self._args(self._unwrap("".join(self._buffer)))
            self._buffer = []
            self._enter_tail()
        return consumed

    def _body(self, text: str, pos: int) -> int:
        scanner = self._scanner
        end = scanner.scan_from(text, pos)
        chunk = text[pos:end]
        if self._phase == "tail":
            if scanner.status == COMPLETE:
                self._end(text, end)
                if self._list:
                    self._phase = "next"
                else:
                    self.status = COMPLETE
            elif scanner.status == MALFORMED:
                self.status = MALFORMED
            return end
        buffered = self._phase == "args-first" or scanner.first == '"'
        if buffered:
            self._buffer.append(chunk)
        elif chunk:
            self._args(chunk)
        if scanner.status == COMPLETE:
            if self._phase == "args-first":
                self._phase = "name-after"
            else:
                if buffered:
                    self._args(self._unwrap("".join(self._buffer)))
                    self._buffer = []
                self._enter_tail()
        elif scanner.status == MALFORMED:
            self.status = MALFORMED
        return end

    def _enter_tail(self) -> None:
        """The rest of the envelope object, up to its closing brace (extra keys are skipped)."""
        self._phase = "tail"
        self._scanner = JsonValueScanner()
        self._scanner.started = True
        self._scanner._depth = 1

    def _start_call(self, escaped_name: str) -> None:
        self.calls += 1
        self._begin(_unescape(escaped_name))

    @staticmethod
    def _unwrap(raw: str) -> str:
        """Arguments written as a JSON string that holds JSON (double-encoded): unwrap it."""
        if raw.lstrip().startswith('"'):
            try:
                inner = json_bounds.decode(raw)
                json_bounds.loads(inner)
                return inner
            except (ValueError, TypeError):
                return raw
        return raw


def _unescape(json_string_body: str) -> str:
    if "\\" not in json_string_body:  # no escape: decoding would give the text back, or fail
        return json_string_body
    try:
        return json_bounds.decode(f'"{json_string_body}"')
    except ValueError:
        return json_string_body
