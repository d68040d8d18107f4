"""One ``Parse`` stream's protocol: open → steps → finish, mapped onto one ``Session``.

Synchronous and free of grpc calls so the rules (what may come when, what one client message
costs) are readable in one place and testable without a network. The servicer only reads,
loads the model, calls ``apply`` and writes what it returns.

Batching: the token ids of consecutive id steps in one client message are concatenated into one
``Session.feed`` call — parsing is split-invariant, so this gives the same output as feeding them
one by one, at a fraction of the per-call cost — and everything a client message produced goes
back in one ``ParseResponse``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from parsetier import session as core
from parsetier.completion import CompletionSession, open_session
from parsetier.models import Model
from parsetier.resume import Replay
from parsetier.service import convert
from parsetier.service.errors import invalid, out_of_order
from parsetier.service.limits import Limits
from parsetier.service.logs import SessionRecord
from parsetier_api.v1 import parsetier_pb2 as pb


def step_runs(steps: Sequence[pb.Step], per_step: bool = False) -> Iterator[list[int] | pb.Step]:
    """Group steps into feed calls: runs of id steps become one id list; a text-only step, and
    an id step with logprobs (or every id step, ``per_step``: its ids belong on its own delta),
    stays a step of its own. A step with ids ignores its text (see ``Step.text``)."""
    ids: list[int] = []
    for step in steps:
        if step.token_ids and (per_step or step.HasField("logprobs")):
            if ids:
                yield ids
                ids = []
            yield step
        elif step.token_ids:
            ids.extend(step.token_ids)
        elif step.text or step.text_tokens or step.HasField("logprobs"):
            if ids:
                yield ids
                ids = []
            yield step
    if ids:
        yield ids


FEED_PIECE = 8192
"""Ids per ``Session.feed`` call. Parsing is split-invariant, so a long run fed in pieces gives
the same output; between pieces the thread that parses a large message (see the servicer) lets
the event loop take the GIL back, which one long call into the tokenizer would not."""


def feed_in_pieces(session: core.Session, ids: Sequence[int]) -> list[core.StepOutput]:
    return [session.feed(ids[at : at + FEED_PIECE]) for at in range(0, len(ids), FEED_PIECE)]


class StreamSession:
    """The state of one stream; ``record`` is what its log line will say."""

    def __init__(self, limits: Limits, record: SessionRecord) -> None:
        self.limits = limits
        self.record = record
        self.model: Model | None = None
        self.session: core.Session | CompletionSession | None = None
        self.want_deltas = True
        self.want_events = False
        self.finished = False
        self.resumable = False
        """The client can resume elsewhere: a draining server hands the session off."""
        self.replay: Replay | None = None
        """A resumed session's silent history (``parsetier.resume``)."""
        self._sequence = 0

    @property
    def opened(self) -> bool:
        return self.session is not None

    def open(self, model: Model, open_: pb.Open) -> None:
        """Start the session (the servicer has looked the model up and ``check_order``ed it)."""
        options = convert.options_of(open_)
        self.record.choice_index = options.choice_index
        self.want_deltas, self.want_events = convert.wants(open_.output, unary=False)
        options = dataclasses.replace(options, collect_in_final=not self.want_deltas)
        self.limits.check_tokens(len(options.prompt_token_ids))
        self.session = open_session(model, options)
        self.model = model
        self.resumable = open_.resumable
        if open_.HasField("resume"):
            self.replay = Replay(open_.resume.client_messages, open_.resume.sequence)
            self.record.replayed = open_.resume.client_messages

    def check_order(self, message: pb.ParseRequest) -> None:
        """Protocol-order errors, checked before anything in the message is applied."""
        has_data = bool(message.steps) or message.HasField("finish")
        if self.finished and (has_data or message.HasField("open")):
            raise out_of_order("the session is finished; no data may follow Finish")
        if message.HasField("open") and self.opened:
            raise out_of_order("the session is already open; Open may only come in the first message")
        if not self.opened and not message.HasField("open") and has_data:
            raise out_of_order("the stream must start with Open before steps or Finish")

    def apply(self, message: pb.ParseRequest) -> pb.ParseResponse | None:
        """Feed the message's steps and finish; the reply, or None when nothing came out.

        ``open`` must already have been applied when the message carries one; the servicer
        counts the message in ``record.client_messages`` when it reads it."""
        self.limits.check_steps(len(message.steps))
        if not message.steps and not message.HasField("finish"):
            if self.replay is not None and self.replay.silent(self.record.client_messages):
                self.replay.replayed(self.record.client_messages, False, False)
            return None  # an Open alone, or an empty keep-alive message
        session = self.session
        assert session is not None and self.model is not None
        outputs: list[core.StepOutput] = []
        for run in step_runs(message.steps, session.options.return_token_ids):
            if isinstance(run, pb.Step) and run.token_ids:
                self.record.tokens += len(run.token_ids)
                self.limits.check_tokens(self.record.tokens)
                outputs.append(_feed_step(session, run, message.steps))
            elif isinstance(run, pb.Step):
                if run.HasField("logprobs"):
                    at = _index(message.steps, run)
                    raise invalid(f"steps[{at}].logprobs: a text step has no logprobs")
                self.record.text_bytes += len(run.text.encode("utf-8"))
                self.limits.check_text(self.record.text_bytes)
                self.record.tokens += run.text_tokens
                self.limits.check_tokens(self.record.tokens)
                outputs.append(session.feed_text(run.text, run.text_tokens))
            else:
                self.record.tokens += len(run)
                self.limits.check_tokens(self.record.tokens)
                outputs += feed_in_pieces(session, run)
        if message.HasField("finish"):
            reason, matched = convert.finish_of(message.finish)
            outputs.append(session.finish(reason, matched_stop=matched))
            self.finished = True
        replay = self.replay
        if replay is not None and replay.silent(self.record.client_messages):
            produced = self._produces(outputs)
            replay.replayed(self.record.client_messages, produced, self.finished)
            self._sequence += produced
            return None
        return self._reply(outputs)

    def _produces(self, outputs: list[core.StepOutput]) -> bool:
        """Whether these outputs make a reply (what ``_reply`` decides, without building it)."""
        return any(
            out.final is not None or (self.want_deltas and out.deltas) or (self.want_events and out.events)
            for out in outputs
        )

    def _reply(self, outputs: list[core.StepOutput]) -> pb.ParseResponse | None:
        reply = pb.ParseResponse(client_messages=self.record.client_messages)
        _fill(reply, outputs, self.want_deltas, self.want_events, self.record)
        if not reply.deltas and not reply.events and not reply.HasField("final"):
            return None
        self._sequence += 1
        reply.sequence = self._sequence
        self.record.deltas += len(reply.deltas)
        self.record.events += len(reply.events)
        self.record.server_messages += 1
        return reply


def _index(steps: Sequence[pb.Step], step: pb.Step) -> int:
    return next(i for i, s in enumerate(steps) if s is step)


def _feed_step(
    session: core.Session | CompletionSession, step: pb.Step, steps: Sequence[pb.Step]
) -> core.StepOutput:
    """One id step fed on its own, with its logprobs; errors in them name the step."""
    if not step.HasField("logprobs"):
        return session.feed(step.token_ids)
    try:
        return session.feed(step.token_ids, convert.step_logprobs_of(step.logprobs))
    except core.InvalidInput as exc:
        raise invalid(f"steps[{_index(steps, step)}].{exc}") from None


def parse_once(
    model: Model, request: pb.ParseOnceRequest, limits: Limits, record: SessionRecord
) -> pb.ParseOnceResponse:
    """The unary call: one session fed the whole output, then finished."""
    options = convert.options_of(request.open)
    want_deltas, want_events = convert.wants(request.open.output, unary=True)
    options = dataclasses.replace(options, collect_in_final=not want_deltas)
    ids = list(request.token_ids)
    record.tokens = len(ids) or request.text_tokens
    limits.check_tokens(record.tokens + len(options.prompt_token_ids))
    record.text_bytes = len(request.text.encode("utf-8")) if not ids else 0
    limits.check_text(record.text_bytes)
    reason, matched = convert.finish_of(request.finish)
    session = open_session(model, options)
    outputs = []
    if request.HasField("logprobs") and not ids:
        raise invalid("logprobs: they need token_ids (text has no logprobs)")
    if ids and request.HasField("logprobs"):
        outputs.append(session.feed(ids, convert.step_logprobs_of(request.logprobs)))
    elif ids:
        outputs += feed_in_pieces(session, ids)
    elif request.text or request.text_tokens:
        outputs.append(session.feed_text(request.text, request.text_tokens))
    outputs.append(session.finish(reason, matched_stop=matched))
    response = pb.ParseOnceResponse()
    _fill(response, outputs, want_deltas, want_events, record)
    record.deltas = len(response.deltas)
    record.events = len(response.events)
    return response


def _fill(
    target: pb.ParseResponse | pb.ParseOnceResponse,
    outputs: list[core.StepOutput],
    want_deltas: bool,
    want_events: bool,
    record: SessionRecord,
) -> None:
    """Put the outputs' deltas, events (as asked) and final result into a reply; both reply types
    name these fields alike."""
    for out in outputs:
        if want_deltas:
            target.deltas.extend(convert.delta_to_pb(d) for d in out.deltas)
        if want_events:
            target.events.extend(convert.event_to_pb(e) for e in out.events)
        if out.final is not None:
            target.final.CopyFrom(convert.final_to_pb(out.final))
            record.finish_reason = out.final.finish_reason
