"""Completion sessions (``/v1/completions``): token ids → plain text, no format.

The same contract as ``Session`` (``feed`` / ``feed_text`` / ``finish`` → ``StepOutput``), so
every driver serves both; ``open_session`` picks one by the request's options. Text comes from
``tokenizers``' ``DecodeStream`` seeded with the prompt's tail, so it is exactly
``tokenizer.decode(ids, skip_special_tokens=…)`` under any split, and from what a stack needs
around the end of a completion:

* stop tokens: the text of an EOS id (the model's, see ``eos``) or of a request stop id is held
  back until the next step shows generation went on, or ``Finish`` drops it (unless
  ``include_stop_text``). A ``Finish`` with no ``matched_stop`` after such an id counts as stopped
  by it, so a stack that sends neither finish reason nor stop id still gets clean text;
* stop strings: text that may still become one of the request's ``stop`` strings is held back, and
  a complete one holds everything from it on; ``Finish.stop_string`` then cuts the text there
  (keeping the string with ``include_stop_text``), so nothing streamed is ever retracted;
* ``spaces_between_special_tokens`` false: an added token right after another added token is its
  bare text, whatever space the decoder would put before it (vLLM's rule).

Work per id is constant apart from the stop-string check, which looks only at the held text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from tokenizers.decoders import DecodeStream

from parsetier.engine.session import (
    FINISH_REASONS,
    InvalidInput,
    Session,
    StepOutput,
    WrongState,
    checked_logprobs,
)
from parsetier.logprobs import StepAnnotator
from parsetier.messages import CompletionOptions, Delta, Final, Message, SessionOptions, StepLogprobs, Usage
from parsetier.models import Model

PROMPT_CONTEXT = 4
"""Prompt ids that seed the decoder (a SentencePiece text does not start with its word space)."""


class CompletionSession:
    """One completion. Not thread-safe: one caller drives it, as one gRPC stream does."""

    def __init__(self, model: Model, options: SessionOptions) -> None:
        self.model = model
        # Only the prompt's last ids matter here: a long prompt is not kept for the session's life.
        self.options = replace(options, prompt_token_ids=options.prompt_token_ids[-PROMPT_CONTEXT:])
        decode = options.completion or CompletionOptions()
        self._tokenizer = model.tokenizer
        self._skip = decode.skip_special_tokens
        self._check_ids(options.prompt_token_ids, "prompt_token_ids")
        context = list(options.prompt_token_ids[-PROMPT_CONTEXT:])
        self._stream = DecodeStream(ids=context or None, skip_special_tokens=self._skip)
        self._context = context
        """The last ids that settled text: decoded with ``_unsettled`` at the end, to flush."""
        self._unsettled: list[int] = []
        added = self._tokenizer.get_added_tokens_decoder()
        self._bare = (
            {tid: tok.content for tid, tok in added.items()}
            if not decode.spaces_between_special_tokens and not self._skip
            else {}
        )
        self._last_added = False
        self._stop_ids = model.eos_token_ids | frozenset(options.stop_token_ids)
        self._stops = tuple(s for s in options.stop if s)
        self._held_stop = ""
        """Text of the last id when that id is a stop token (released by the next id)."""
        self._held = ""
        """Text that may be (or is) the start of a stop string."""
        self._stopped = False
        self._annotator = StepAnnotator(
            model.token_bytes,
            self._check_ids,
            show_reasoning=True,
            return_token_ids=options.return_token_ids,
            collect=options.collect_in_final,
        )
        self._content: list[str] = []
        self._tokens = 0
        self._last_id: int | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        return self._finished

    # ------------------------------------------------------------------ input
    def feed(self, token_ids: Sequence[int], logprobs: StepLogprobs | None = None) -> StepOutput:
        self._check_open()
        self._check_ids(token_ids, "token_ids")
        k = checked_logprobs(self._annotator, token_ids, logprobs)
        self._tokens += len(token_ids)
        pieces: list[str] = []
        for tid in token_ids:
            if self._held_stop:
                pieces.append(self._held_stop)
                self._held_stop = ""
            text = self._piece(tid)
            if tid in self._stop_ids:
                self._held_stop = text  # with any space the decoder put before it
            else:
                pieces.append(text)
            self._last_id = tid
        out = StepOutput(self._deltas("".join(pieces)))
        if logprobs is not None or self.options.return_token_ids:
            self._annotator.annotate(out.deltas, token_ids, logprobs, k, None)
        return out

    def feed_text(self, text: str, tokens: int = 0) -> StepOutput:
        """Already-detokenized text (``tokens`` of output, for usage)."""
        self._check_open()
        if tokens < 0:
            raise InvalidInput("tokens must not be negative")
        self._tokens += tokens
        held, self._held_stop = self._held_stop, ""
        return StepOutput(self._deltas(held + text))

    def finish(self, reason: str = "stop", matched_stop: int | str | None = None) -> StepOutput:
        self._check_open()
        if reason not in FINISH_REASONS:
            raise InvalidInput(f"finish_reason must be one of {', '.join(FINISH_REASONS)}, not {reason!r}")
        self._finished = True
        if reason == "stop" and matched_stop is None and self._last_id in self._stop_ids:
            matched_stop = self._last_id  # the stack stopped on EOS without saying so
        keep_stop = self.options.include_stop_text and reason == "stop"
        tail = self._flush()
        if isinstance(matched_stop, int) and reason == "stop":
            if matched_stop == self._last_id:
                tail += self._held_stop if keep_stop else ""
            else:
                tail += self._held_stop
                if keep_stop:
                    tail += self._tokenizer.decode([matched_stop], skip_special_tokens=self._skip)
        else:
            tail += self._held_stop
        self._held_stop = ""
        text = self._held + tail
        self._held = ""
        if isinstance(matched_stop, str) and matched_stop and reason == "stop":
            at = text.find(matched_stop)
            if at >= 0:
                text = text[: at + len(matched_stop)] if keep_stop else text[:at]
        deltas = [Delta(content=text)] if text else []
        self._annotator.finish(deltas)  # tokens of a character the end cut
        self._content.append(text)
        usage = Usage(self._tokens, 0)
        message = Message(content="".join(self._content))
        final = Final(reason, usage, message, *self._annotator.collected())  # type: ignore[arg-type]
        return StepOutput(deltas, [], final)

    # ------------------------------------------------------------------ text
    def _piece(self, tid: int) -> str:
        try:
            text = self._stream.step(self._tokenizer, tid)
        except Exception:  # tokenizers raises a bare Exception ("Invalid prefix"): see ``_restart``
            text = self._restart(tid)
        if self._bare:
            content = self._bare.get(tid)
            if content is not None and self._last_added:
                text = content  # no space between two added tokens
            self._last_added = content is not None
        if text is None:
            self._unsettled.append(tid)
            return ""
        self._context = [*self._unsettled, tid][-PROMPT_CONTEXT:]
        self._unsettled = []
        return text

    def _restart(self, tid: int) -> str:
        """``DecodeStream`` refuses a step whose decoding no longer starts with the text it has
        settled: byte tokens that are no UTF-8 character held back, then a token the decoder joins
        to them differently (a SentencePiece byte run, then a word). Odd model output is never an
        error: the held ids and this one are decoded after the settled context, as at the end
        (``tokenizer.decode``'s text), and the stream starts again seeded with them."""
        held = [*self._unsettled, tid]
        self._unsettled = []
        self._stream = DecodeStream(ids=held[-PROMPT_CONTEXT:], skip_special_tokens=self._skip)
        return self._after_context(held)

    def _flush(self) -> str:
        """What the decoder still holds at the end (an incomplete character: U+FFFD, as
        ``tokenizer.decode`` gives it)."""
        if not self._unsettled:
            return ""
        unsettled, self._unsettled = self._unsettled, []
        return self._after_context(unsettled)

    def _after_context(self, ids: list[int]) -> str:
        """The text ``ids`` decode to after the last settled ones."""
        decode = self._tokenizer.decode
        base = decode(self._context, skip_special_tokens=self._skip)
        full = decode([*self._context, *ids], skip_special_tokens=self._skip)
        if full.startswith(base):
            return full[len(base) :]
        return decode(ids, skip_special_tokens=self._skip)

    def _deltas(self, text: str) -> list[Delta]:
        text = self._release(text)
        if not text:
            return []
        self._content.append(text)
        return [Delta(content=text)]

    def _release(self, text: str) -> str:
        """The part of ``text`` that can be streamed; the rest waits in ``_held``."""
        if not self._stops:
            return text
        buf = self._held + text
        if self._stopped:
            self._held = buf
            return ""
        found = [at for at in (buf.find(s) for s in self._stops) if at >= 0]
        if found:
            at = min(found)
            self._stopped, self._held = True, buf[at:]
            return buf[:at]
        keep = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buf)), keep, -1):
                if buf.endswith(stop[:n]):
                    keep = n
                    break
        self._held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]

    # ------------------------------------------------------------------ checks
    def _check_open(self) -> None:
        if self._finished:
            raise WrongState("the session has finished; no more input is accepted")

    def _check_ids(self, ids: Sequence[int], what: str) -> None:
        """Ids the tokenizer does not have are refused, as chat sessions refuse them."""
        vocab = self.model.vocab_size
        if ids and (min(ids) < 0 or max(ids) >= vocab):
            bad = next(t for t in ids if not 0 <= t < vocab)
            raise InvalidInput(f"{what}: token id {bad} is not in the vocabulary of {self.model.name!r}")


def open_session(model: Model, options: SessionOptions) -> Session | CompletionSession:
    """The session a request asks for: a completion when it sets completion options, else chat."""
    if options.completion is not None:
        return CompletionSession(model, options)
    return Session(model, options)
