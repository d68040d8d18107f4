"""Logprob resolution: a step's sampled ids and their top-k alternatives → token text and bytes.

The generate side has no tokenizer: per sampled token it reports the id, its logprob and the top-k
alternatives as ids with logprobs. This module fills in what an OpenAI-compatible API returns for
each of them (sans-IO, one ``LogprobResolver`` per session):

* ``bytes``: the token's raw bytes from the tokenizer's byte vocabulary (``token_bytes``). A token
  that is part of a multi-byte character has only that part; concatenating the sampled tokens'
  bytes gives the output exactly.
* ``token``: the text the token settles in the output, in the context of the preceding sampled
  ids. A token that is only part of a character decodes alone as U+FFFD; instead, its bytes are
  carried over (at most three) and the token that completes the character carries the whole
  character, across step boundaries. A token that settles nothing resolves to ``""``. Joining the
  sampled tokens' texts gives the decoded output; bytes that never form a character become U+FFFD,
  as ``tokenizer.decode`` gives them.
* *held tokens*: a token after which bytes are carried (it began or continued a character that is
  not complete yet) is held back, with its logprob, until the character settles: the token that
  completes it (or breaks it) releases the held ones just before itself, and the end of the output
  (``flush``) releases them with the last one carrying what the unfinished character decodes to
  (U+FFFD, as the output ends). Whether the character completes is not known when the token is
  fed, and nothing sent is retracted; so the tokens join to the output even when it is cut (by
  ``length``) in the middle of a character. A held token's entry thus goes out with a later step.
* an alternative's ``token`` is the text it would have settled had it been sampled at that
  position (same carried bytes); its ``bytes`` are its own.
* ``text_offset``: the code-point offset of the token's text in the joined texts (OpenAI
  completions' ``text_offset``, relative to the start of the output).

The carried bytes, the held tokens (at most three) and the offset are the whole state, so resolving a
step costs O(step · (1 + k)).

``StepAnnotator`` attaches what a step reports besides text — its resolved logprobs and, with
``return_token_ids``, its ids — to the last delta that step produced (a delta with no text when the
step produced none), and drops the logprobs of reasoning tokens when reasoning is not delivered.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Callable, Sequence

from parsetier.messages import Delta, StepLogprobs, TokenLogprob, TopLogprob
from parsetier.token_bytes import TokenBytes

_UTF8 = codecs.getincrementaldecoder("utf-8")


class LogprobError(ValueError):
    """Logprob input that cannot be resolved; the message names the field."""


def _check_floats(values: Sequence[float], what: str) -> None:
    total = sum(values)  # NaN or +inf anywhere makes the sum NaN or +inf: one C loop
    if total != total or total == math.inf:
        for i, value in enumerate(values):
            if math.isnan(value) or value == math.inf:
                raise LogprobError(f"{what}[{i}] is {value}; a logprob must be a number <= 0 or -inf")


def check(ids: Sequence[int], step: StepLogprobs, check_ids: Callable[[Sequence[int], str], None]) -> int:
    """Validate one step's logprobs against its ids; the number of alternatives per id (k).

    ``check_ids`` is the session's vocabulary check (it raises naming the field)."""
    n = len(ids)
    if n == 0:
        raise LogprobError("logprobs need the step's token_ids (a text step has no logprobs)")
    if len(step.token_logprobs) != n:
        raise LogprobError(
            f"logprobs.token_logprobs has {len(step.token_logprobs)} entries for {n} token ids"
        )
    tops = len(step.top_token_ids)
    if tops % n:
        raise LogprobError(
            f"logprobs.top_token_ids has {tops} entries, not the same number of alternatives for "
            f"each of the {n} token ids"
        )
    if len(step.top_logprobs) != tops:
        raise LogprobError(
            f"logprobs.top_logprobs has {len(step.top_logprobs)} entries for {tops} top_token_ids"
        )
    _check_floats(step.token_logprobs, "logprobs.token_logprobs")
    _check_floats(step.top_logprobs, "logprobs.top_logprobs")
    check_ids(step.top_token_ids, "logprobs.top_token_ids")
    return tops // n


class LogprobResolver:
    """One session's logprob state: the bytes of an unfinished character, the tokens held until it
    settles, and the text offset."""

    __slots__ = ("_decoder", "_errors", "_held", "_offset", "_vocab")

    def __init__(self, vocab: TokenBytes) -> None:
        self._vocab = vocab
        self._errors = vocab.errors
        self._decoder = _UTF8(self._errors)
        self._offset = 0
        self._held: list[tuple[TokenLogprob, bool]] = []
        """Tokens of the unfinished character, each with whether it is shown."""

    @property
    def holding(self) -> bool:
        """Tokens are held until their character settles (``flush`` releases them at the end)."""
        return bool(self._held)

    def resolve(
        self, ids: Sequence[int], step: StepLogprobs, k: int, hidden: Sequence[bool] | None = None
    ) -> list[TokenLogprob]:
        """The step's settled tokens, resolved, in order, each after the held tokens it releases
        (already ``check``ed; ``k`` alternatives per id). ``hidden``: per id, whether its entry is
        dropped (reasoning not shown); it still counts in the text and the offset."""
        vocab, decoder = self._vocab, self._decoder
        decode, state = decoder.decode, decoder.getstate
        top_ids, top_lps = step.top_token_ids, step.top_logprobs
        held = self._held
        out: list[TokenLogprob] = []
        carried = state()[0]
        for i, tid in enumerate(ids):
            top: tuple[TopLogprob, ...] = ()
            if k:
                alts, lps = top_ids[i * k : (i + 1) * k], top_lps[i * k : (i + 1) * k]
                pairs = zip(alts, lps, strict=True)
                if carried:
                    after = self._carried_text
                    top = tuple(TopLogprob(a, after(a, carried), vocab[a], lp) for a, lp in pairs)
                else:
                    get, entry = vocab.alone.get, vocab.entry
                    top = tuple([TopLogprob(a, *(get(a) or entry(a)), lp) for a, lp in pairs])
            data = vocab[tid]
            text = decode(data)
            resolved = TokenLogprob(tid, text, data, step.token_logprobs[i], self._offset, top)
            self._offset += len(text)
            shown = hidden is None or not hidden[i]
            carried = state()[0]
            if carried:  # part of a character still open: held until it settles
                held.append((resolved, shown))
                continue
            if held:
                out += [entry for entry, visible in held if visible]
                held.clear()
            if shown:
                out.append(resolved)
        return out

    def flush(self) -> list[TokenLogprob]:
        """At the end of the output: the held tokens (shown ones), the last carrying what the
        unfinished character decodes to, as the output's text ends (U+FFFD). Empty when none."""
        if not self._held:
            return []
        tail = self._decoder.decode(b"", True)
        self._decoder.reset()
        held, self._held = self._held, []
        last, shown = held[-1]
        held[-1] = (last._replace(token=last.token + tail), shown)
        self._offset += len(tail)
        return [entry for entry, visible in held if visible]

    def _carried_text(self, token_id: int, carried: bytes) -> str:
        """An alternative's text after the bytes of an unfinished character."""
        decoder = _UTF8(self._errors)
        decoder.setstate((carried, 0))
        return decoder.decode(self._vocab[token_id])


class StepAnnotator:
    """Puts a step's resolved logprobs and ids on the delta the step produced."""

    __slots__ = (
        "_check_ids", "_collect", "_ids", "_logprobs", "_resolver", "_return_ids", "_show_reasoning",
        "_vocab",
    )  # fmt: skip

    def __init__(
        self,
        vocab: TokenBytes,
        check_ids: Callable[[Sequence[int], str], None],
        *,
        show_reasoning: bool,
        return_token_ids: bool,
        collect: bool,
    ) -> None:
        self._resolver: LogprobResolver | None = None
        self._vocab = vocab
        self._check_ids = check_ids
        self._show_reasoning = show_reasoning
        self._return_ids = return_token_ids
        self._collect = collect
        self._logprobs: list[TokenLogprob] = []
        self._ids: list[int] = []

    def check(self, ids: Sequence[int], step: StepLogprobs | None) -> int:
        """Validate before the step is parsed, so a bad step is refused whole; k per id."""
        return 0 if step is None else check(ids, step, self._check_ids)

    def annotate(
        self,
        deltas: list[Delta],
        ids: Sequence[int],
        step: StepLogprobs | None,
        k: int,
        reasoning: Sequence[bool] | None,
    ) -> list[Delta]:
        """``deltas`` (changed in place) with the step's logprobs and ids on the last one.
        ``reasoning``: per id, whether it was reasoning (its logprob is dropped unless reasoning
        is shown)."""
        resolved: list[TokenLogprob] = []
        if step is not None:
            if self._resolver is None:
                self._resolver = LogprobResolver(self._vocab)
            hidden = None if reasoning is None or self._show_reasoning else reasoning
            resolved = self._resolver.resolve(ids, step, k, hidden)
        token_ids = tuple(ids) if self._return_ids else ()
        return self._attach(deltas, resolved, token_ids)

    def finish(self, deltas: list[Delta]) -> list[Delta]:
        """``deltas`` (the finish's, changed in place) with the tokens still held (a character cut
        at the end of the output) on the last one."""
        if self._resolver is None or not self._resolver.holding:
            return deltas
        return self._attach(deltas, self._resolver.flush(), ())

    def _attach(
        self, deltas: list[Delta], resolved: list[TokenLogprob], token_ids: tuple[int, ...]
    ) -> list[Delta]:
        if not resolved and not token_ids:
            return deltas
        if self._collect:
            self._logprobs += resolved
            self._ids += token_ids
        if deltas:
            last = deltas[-1]
            logprobs = last.logprobs + tuple(resolved)
            token_ids = last.token_ids + token_ids
            deltas[-1] = Delta(last.reasoning, last.content, last.tool_calls, logprobs, token_ids)
        else:
            deltas.append(Delta(logprobs=tuple(resolved), token_ids=token_ids))
        return deltas

    def holds(self) -> bool:
        """Something was collected for ``Final`` (logprobs or ids), or tokens are held that the
        finish releases (``finish``)."""
        return bool(self._logprobs or self._ids) or (self._resolver is not None and self._resolver.holding)

    def collected(self) -> tuple[tuple[TokenLogprob, ...], tuple[int, ...]]:
        """Everything annotated so far, for ``Final`` (empty unless collecting)."""
        return tuple(self._logprobs), tuple(self._ids)
