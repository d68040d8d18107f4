"""Wire dialects, read by the official SDKs: parsetier's bytes (``Open.wire``), from a real server
over ``Parse`` and ``ParseBatch``, are served through a loopback HTTP endpoint to the ``openai`` and
``anthropic`` Python SDKs, whose own stream accumulators (and body parsers) must rebuild exactly
the final message parsetier reports: reasoning, content, every call's id, name and arguments, the
finish reason mapped per API, usage, logprobs and choice indexes.

Outputs come from the round-trip table (``test_roundtrip``): each family with a packaged real
vocabulary writes, through its own chat template or encoder, a message with reasoning (where the
family has it) and parallel calls (where it allows them), and the ids are split at random into
steps. Qwen3 adds the cases the table does not: a length cut inside a call, a stop string, logprobs
and ``n`` > 1.
"""

from __future__ import annotations

import json
import queue
import random
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import openai
import pytest

import test_roundtrip as rt
from parsetier.engine.call_ids import api_call_id
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import logprob_step, wire_of
from parsetier_client.requests import wire_options
from parsetier_client.result import FINISH_REASON_NAMES
from service_samples import REASONING_AND_TWO_CALLS, WEATHER_TOOLS

DIALECTS = ("openai_chat", "anthropic_messages", "openai_responses")
"""The chat-session dialects (completions is a completion session's: ``test_completions_*``)."""
CREATED = 1_764_633_600


# ------------------------------------------------------------------------------- loopback endpoint
class Loopback:
    """A stdlib HTTP server on 127.0.0.1 that answers each POST with the next queued body,
    as a public API would: ``text/event-stream`` for a stream, ``application/json`` for a body."""

    def __init__(self) -> None:
        self.bodies: queue.SimpleQueue[tuple[bytes, bool, int]] = queue.SimpleQueue()
        self.paths: list[str] = []
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                loopback.paths.append(self.path)
                body, stream, status = loopback.bodies.get_nowait()
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, body: bytes, stream: bool, status: int = 200) -> None:
        """Answer the next POST with ``body``, with HTTP ``status`` (an error body's)."""
        self.bodies.put((body, stream, status))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture(scope="module")
def loopback() -> Iterator[Loopback]:
    server = Loopback()
    yield server
    server.close()


@pytest.fixture(scope="module")
def oai(loopback: Loopback) -> openai.OpenAI:
    return openai.OpenAI(base_url=loopback.url + "/v1", api_key="test", max_retries=0)


@pytest.fixture(scope="module")
def ant(loopback: Loopback) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=loopback.url, api_key="test", max_retries=0)


# ------------------------------------------------------------------------------------ the outputs
@dataclass
class Case:
    """One session's input: what the server is sent."""

    label: str
    model: str
    groups: list[Any]
    """The steps: id lists, or ``pb.Step``s (with logprobs)."""
    options: dict[str, Any] = field(default_factory=dict)
    finish: str = "stop"
    matched_stop: int | str | None = None
    message: dict[str, Any] = field(default_factory=dict)
    """The message the ids were rendered from (the round-trip table's), when there is one."""


def _family_case(family: rt.Family, registry) -> Case:
    """The family's richest message of the first seeded ones: reasoning and the most calls."""
    model = registry.get(family.preset)
    tok = model.tokenizer
    rng = random.Random(f"dialects:{family.label}")
    best: tuple[int, Any] | None = None
    for _ in range(40):
        msg, thinking = rt.message(rng, family)
        score = 2 * bool(msg.get("reasoning_content")) + len(msg.get("tool_calls", ())) + bool(msg["content"])
        if best is None or score > best[0]:
            best = (score, (msg, thinking))
    assert best is not None
    msg, thinking = best[1]
    ids, prompt_ids = family.render_ids(tok, msg, thinking)
    options: dict[str, Any] = {"tools": rt.TOOLS, "prompt_token_ids": prompt_ids}
    if family.thinking_switch:
        options["thinking"] = thinking
    return Case(family.label, family.preset, rt.random_groups(rng, ids), options, message=msg)


PACKAGED = [f for f in rt.FAMILIES if f.tokenizer != "marker"]
"""The round-trip families on packaged real vocabularies."""


def _qwen_ids(registry, text: str) -> list[int]:
    return registry.get("qwen3").tokenizer.encode(text, add_special_tokens=False).ids


def qwen_cases(registry) -> list[Case]:
    """Cases the table does not make: a length cut inside the second call, a stop string."""
    ids = _qwen_ids(registry, REASONING_AND_TWO_CALLS)
    cut = ids[: len(ids) - 6]
    return [
        Case("qwen3 length cut in a call", "qwen3", [[i] for i in cut], {"tools": WEATHER_TOOLS}, "length"),
        Case(
            "qwen3 stop string",
            "qwen3",
            [[i] for i in _qwen_ids(registry, "<think>\nok\n</think>\n\nThe answer is 4.")],
            {},
            "stop",
            "END",
        ),
    ]


def _logprob_groups(ids: list[int], seed: int) -> list[pb.Step]:
    """One step per id, with its logprob and two alternatives (the id itself and a neighbour)."""
    rng = random.Random(seed)
    steps = []
    for tid in ids:
        lp = -rng.random() * 3
        steps.append(logprob_step([tid], [lp], [{tid: lp, (tid + 1) % 1000: lp - 1.5}]))
    return steps


# ------------------------------------------------------------------------------------- the runs
def wire(dialect: str, stream: bool, index: int = 0) -> dict[str, Any]:
    return {
        "dialect": dialect,
        "response_id": {"openai_chat": "chatcmpl-t1", "openai_completions": "cmpl-t1"}.get(dialect, "resp_t1")
        if dialect != "anthropic_messages"
        else "msg_t1",
        "model": "served-model",
        "created": CREATED,
        "stream": stream,
        "include_usage": True,
        "prompt_tokens": 11,
    }


def run_parse(client, case: Case, dialect: str, stream: bool, **extra: Any) -> tuple[bytes, pb.Final]:
    result = client.parse_stream(
        case.model,
        case.groups,
        case.finish,
        matched_stop=case.matched_stop,
        output="final",
        wire=wire(dialect, stream),
        **case.options,
        **extra,
    )
    return result.wire, result.final


def run_batch(
    client, sessions: dict[str, tuple[Case, dict[str, Any]]], last: str | None = None
) -> tuple[bytes, dict[str, pb.Final]]:
    """Sessions over one ParseBatch stream, one step each per message: the outputs' ``wire`` in
    the order the replies carry them (what a gateway forwards as it goes), and each session's
    final result (whose ``wire`` holds the closing bytes). ``last``: a session finished after all
    the others, with their usage (``n`` > 1: the choice whose closing bytes are forwarded)."""
    replies: list[bytes] = []
    finals: dict[str, pb.Final] = {}
    with client.batch() as batch:
        for key, (case, open_options) in sessions.items():
            batch.open(key, case.model, output="final", **case.options, **open_options)
        n = 0
        while len(finals) < len(sessions):
            for key, (case, _) in sessions.items():
                if n < len(case.groups):
                    batch.feed(key, case.groups[n])
                elif key == last and key not in finals and len(finals) == len(sessions) - 1:
                    others = other_usage(finals.values())
                    batch.finish(key, case.finish, case.matched_stop, other_choices_usage=others)
                elif n == len(case.groups) and key != last:
                    batch.finish(key, case.finish, case.matched_stop)
            n += 1
            outputs = batch.step()
            assert not any(out.HasField("status") for out in outputs.values()), outputs
            replies += [out.wire for out in outputs.values()]
            finals |= {key: out.final for key, out in outputs.items() if out.HasField("final")}
    return b"".join(replies), finals


def run_one_batch(client, case: Case, dialect: str, stream: bool, **extra: Any) -> tuple[bytes, pb.Final]:
    body, finals = run_batch(client, {"only": (case, {"wire": wire(dialect, stream), **extra})})
    return body + finals["only"].wire, finals["only"]


def run_choices(
    rpc: str, client, cases: list[Case], dialect: str, stream: bool
) -> tuple[bytes, list[pb.Final]]:
    """``n`` > 1: one session per choice (same request id, ``choice_index`` 0 .. n-1), each
    choice's bytes forwarded as they come and the closing bytes of the last only."""
    extra = [
        {"request_id": "req-n", "choice_index": i, "wire": wire(dialect, stream)} for i in range(len(cases))
    ]
    last = f"c{len(cases) - 1}"
    if rpc == "ParseBatch":
        sessions = {f"c{i}": (case, extra[i]) for i, case in enumerate(cases)}
        body, finals = run_batch(client, sessions, last)
        ordered = [finals[f"c{i}"] for i in range(len(cases))]
        return body + finals[last].wire, ordered
    parts, ordered = [], []
    for i, case in enumerate(cases):
        others = other_usage(ordered) if i == len(cases) - 1 else None
        result = client.parse_stream(
            case.model, case.groups, case.finish, matched_stop=case.matched_stop, output="final",
            other_choices_usage=others, **case.options, **extra[i],
        )  # fmt: skip
        parts += [m.wire for m in result.messages]
        ordered.append(result.final)
    return b"".join(parts) + ordered[-1].wire, ordered


RUNS = {"Parse": run_parse, "ParseBatch": run_one_batch}


def other_usage(finals: Iterable[pb.Final]) -> tuple[int, int]:
    """``Finish.other_choices_usage`` of the last choice: the other choices' usage, summed."""
    finals = list(finals)
    return sum(f.usage.completion_tokens for f in finals), sum(f.usage.reasoning_tokens for f in finals)


# --------------------------------------------------------------------------------- the SDKs' view
def expected_calls(final: pb.Final, prefix: str) -> list[tuple[str, str, str]]:
    return [(api_call_id(c.id, prefix), c.name, c.arguments) for c in final.message.tool_calls]


def check_chat(
    oai: openai.OpenAI,
    loopback: Loopback,
    body: bytes,
    final: pb.Final,
    stream: bool,
    finals: list[pb.Final] = (),
) -> Any:
    """The SDK's chat completion from parsetier's bytes equals parsetier's final result (each
    choice's, with ``finals``: ``n`` > 1)."""
    finals = list(finals) or [final]
    loopback.serve(body, stream)
    request = {"model": "served-model", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        with oai.chat.completions.stream(**request, stream_options={"include_usage": True}) as events:
            for _ in events:
                pass
            if final.finish_reason == pb.FINISH_REASON_LENGTH:  # the SDK refuses to "parse" a cut one
                completion = events.current_completion_snapshot
            else:
                completion = events.get_final_completion()
    else:
        completion = oai.chat.completions.create(**request)
    assert completion.id == "chatcmpl-t1" and completion.model == "served-model"
    assert completion.created == CREATED
    assert [choice.index for choice in completion.choices] == list(range(len(finals)))
    for choice, final in zip(completion.choices, finals, strict=True):
        message = choice.message
        assert (message.content or "") == final.message.content
        assert (getattr(message, "reasoning_content", None) or "") == final.message.reasoning
        calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        assert calls == expected_calls(final, "call_")
        assert all(c.type == "function" for c in message.tool_calls or ())
        assert choice.finish_reason == FINISH_REASON_NAMES[final.finish_reason]
        if final.logprobs:
            assert choice.logprobs is not None
            got = [(e.token, e.logprob, e.bytes, [(t.token, t.logprob, t.bytes) for t in e.top_logprobs])
                   for e in choice.logprobs.content]  # fmt: skip
            assert got == [
                (
                    e.token,
                    e.logprob,
                    list(e.bytes),
                    [(t.token, t.logprob, list(t.bytes)) for t in e.top_logprobs],
                )
                for e in final.logprobs
            ]
        else:
            assert choice.logprobs is None
    usage = completion.usage  # with n > 1, every choice's (as OpenAI reports it)
    assert usage is not None
    completion_tokens, reasoning_tokens = other_usage(finals)
    assert (usage.prompt_tokens, usage.completion_tokens) == (11, completion_tokens)
    assert usage.total_tokens == 11 + completion_tokens
    assert usage.completion_tokens_details.reasoning_tokens == reasoning_tokens
    return completion


_STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn", "abort": "end_turn"}


def check_anthropic(
    ant: anthropic.Anthropic, loopback: Loopback, body: bytes, final: pb.Final, stream: bool, stop: Any = None
) -> None:
    loopback.serve(body, stream)
    request = {"model": "served-model", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        with ant.messages.stream(**request) as events:
            for _ in events:
                pass
            message = events.get_final_message()
    else:
        message = ant.messages.create(**request)
    assert message.id == "msg_t1" and message.model == "served-model"
    blocks = message.content
    thinking = "".join(b.thinking for b in blocks if b.type == "thinking")
    text = "".join(b.text for b in blocks if b.type == "text")
    assert (thinking, text) == (final.message.reasoning, final.message.content)
    calls = [(b.id, b.name, b.input) for b in blocks if b.type == "tool_use"]
    want = [(i, n, _input(a, final, stream)) for i, n, a in expected_calls(final, "toolu_")]
    assert calls == want
    reason = _STOP_REASONS[FINISH_REASON_NAMES[final.finish_reason]]
    if isinstance(stop, str):
        assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
    else:
        assert (message.stop_reason, message.stop_sequence) == (reason, None)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (11, final.usage.completion_tokens)


def _input(arguments: str, final: pb.Final, stream: bool) -> Any:
    """What a call's ``input`` is: its JSON object; a call cut off by the length limit is, streamed
    or in a body alike, what the SDK's partial JSON parser makes of its text."""
    try:
        return json.loads(arguments)
    except ValueError:
        assert final.finish_reason == pb.FINISH_REASON_LENGTH
        import jiter

        return jiter.from_json(arguments.encode(), partial_mode=True)


def check_responses(
    oai: openai.OpenAI, loopback: Loopback, body: bytes, final: pb.Final, stream: bool
) -> None:
    loopback.serve(body, stream)
    request = {"model": "served-model", "input": "hi"}
    streamed = {"reasoning": "", "text": "", "arguments": ""}
    response: Any = None
    if stream:
        with oai.responses.stream(**request) as events:
            for event in events:
                if event.type == "response.reasoning_text.delta":
                    streamed["reasoning"] += event.delta
                elif event.type == "response.output_text.delta":
                    streamed["text"] += event.delta
                elif event.type == "response.function_call_arguments.delta":
                    streamed["arguments"] += event.delta
                elif event.type == "response.incomplete":  # a length cut ends so, not completed
                    response = event.response
            if response is None:
                response = events.get_final_response()
        want_arguments = "".join(c.arguments for c in final.message.tool_calls)
        assert streamed == {
            "reasoning": final.message.reasoning,
            "text": final.message.content,
            "arguments": want_arguments,
        }
    else:
        response = oai.responses.create(**request)
    assert response.id == "resp_t1" and response.model == "served-model"
    reasoning = "".join(
        c.text for item in response.output if item.type == "reasoning" for c in item.content or ()
    )
    assert reasoning == final.message.reasoning
    text = "".join(c.text for item in response.output if item.type == "message" for c in item.content)
    assert text == final.message.content
    calls = [(i.call_id, i.name, i.arguments) for i in response.output if i.type == "function_call"]
    assert calls == expected_calls(final, "call_")
    if final.finish_reason == pb.FINISH_REASON_LENGTH:
        assert response.status == "incomplete"
    else:
        assert response.status == "completed"
        assert response.usage.output_tokens == final.usage.completion_tokens
        assert response.usage.output_tokens_details.reasoning_tokens == final.usage.reasoning_tokens


def check(
    dialect: str, sdks: tuple, loopback: Loopback, body: bytes, final: pb.Final, stream: bool, case: Case
):
    oai, ant = sdks
    assert body, "no bytes rendered"
    json.loads(body) if not stream else None  # a body is one strict JSON document
    if dialect == "openai_chat":
        check_chat(oai, loopback, body, final, stream)
    elif dialect == "anthropic_messages":
        check_anthropic(ant, loopback, body, final, stream, case.matched_stop)
    else:
        check_responses(oai, loopback, body, final, stream)


# ------------------------------------------------------------------------------------------ tests
def _family_sdk_cases() -> list:
    """Every family x dialect x (streamed or body) x RPC. The quick lane runs every family streamed
    over Parse, and every dialect, delivery and RPC for the first family; the rest is `slow`."""
    cases = []
    for family in PACKAGED:
        for dialect in DIALECTS:
            for stream in (True, False):
                for rpc in RUNS:
                    quick = (stream and rpc == "Parse") or family is PACKAGED[0]
                    cases.append(
                        pytest.param(
                            family,
                            dialect,
                            stream,
                            rpc,
                            id=f"{family.label}-{dialect}-{'stream' if stream else 'body'}-{rpc}",
                            marks=() if quick else pytest.mark.slow,
                        )
                    )
    return cases


def test_the_family_cases_hold_reasoning_and_parallel_calls(registry) -> None:
    """What the SDK runs below prove rests on the messages holding every kind of part: reasoning
    where a family has it, parallel calls where it allows them, content."""
    cases = [_family_case(family, registry) for family in PACKAGED]
    assert sum(bool(c.message.get("reasoning_content")) for c in cases) >= 2 * len(cases) // 3
    assert all(len(c.message.get("tool_calls", ())) >= 2 for c in cases)


@pytest.mark.parametrize(("family", "dialect", "stream", "rpc"), _family_sdk_cases())
def test_family_through_sdk(family, dialect, stream, rpc, registry, client, loopback, oai, ant) -> None:
    case = _family_case(family, registry)
    body, final = RUNS[rpc](client, case, dialect, stream)
    check(dialect, (oai, ant), loopback, body, final, stream, case)


@pytest.mark.parametrize("rpc", RUNS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("which", [0, 1], ids=["length cut in a call", "stop string"])
def test_cuts_and_stops_through_sdk(
    which, dialect, stream, rpc, registry, client, loopback, oai, ant
) -> None:
    case = qwen_cases(registry)[which]
    body, final = RUNS[rpc](client, case, dialect, stream)
    check(dialect, (oai, ant), loopback, body, final, stream, case)


def _logprob_cases(registry) -> list[Case]:
    first = _qwen_ids(registry, REASONING_AND_TWO_CALLS)
    second = _qwen_ids(
        registry,
        "<think>\nShort: 2 + 2 = 4, caf\u00e9 \u2028 \u00e9t\u00e9.\n</think>\n\nIt is 4 \U0001f600.",
    )
    return [
        Case("qwen3 calls with logprobs", "qwen3", _logprob_groups(first, 1), {"tools": WEATHER_TOOLS}),
        Case("qwen3 answer with logprobs", "qwen3", _logprob_groups(second, 2), {"tools": WEATHER_TOOLS}),
    ]


@pytest.mark.parametrize("rpc", RUNS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_chat_logprobs_and_n_choices(stream, rpc, registry, client, loopback, oai) -> None:
    """Two choices of one request, with logprobs (unicode, and a line separator that must not
    split an SSE event): the SDK sees both at their indexes, each with its own tokens."""
    cases = _logprob_cases(registry)
    body, finals = run_choices(rpc, client, cases, "openai_chat", stream)
    if not stream:  # a body holds one session's choice: check each session's on its own
        for case, final in zip(cases, finals, strict=True):
            one, final = RUNS[rpc](client, case, "openai_chat", False)
            check_chat(oai, loopback, one, final, False)
        return
    assert b"\xe2\x80\xa8" not in body  # U+2028 is escaped
    check_chat(oai, loopback, body, finals[-1], True, finals)


# ------------------------------------------------------------------------------------ completions
def _completion_case(registry, text: str, seed: int, finish: str = "stop") -> Case:
    ids = _qwen_ids(registry, text)
    return Case(f"completion {seed}", "qwen3", _logprob_groups(ids, seed), {"completion": True}, finish)


@pytest.mark.parametrize("rpc", RUNS)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_completions_through_sdk(stream, rpc, registry, client, loopback, oai) -> None:
    """A completion request with ``n`` = 2 and logprobs: the SDK's chunks (or bodies) give each
    choice's text, finish reason and the four logprob lists; usage comes last."""
    cases = [
        _completion_case(registry, "Once upon a time, in caf\u00e9s \u4e2d\u6587 \U0001f600,", 3),
        _completion_case(registry, "def add(a, b):\n    return a + b\n\nprint(add(2, 2))", 4, "length"),
    ]
    if stream:
        body, finals = run_choices(rpc, client, cases, "openai_completions", True)
        loopback.serve(body, True)
        texts: dict[int, str] = {}
        logprobs: dict[int, dict[str, list]] = {}
        reasons: dict[int, str] = {}
        usage = None
        for chunk in oai.completions.create(model="served-model", prompt="hi", stream=True):
            assert chunk.id == "cmpl-t1" and chunk.object == "text_completion"
            usage = chunk.usage or usage
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + choice.text
                if choice.logprobs is not None:
                    into = logprobs.setdefault(
                        choice.index, {"tokens": [], "lp": [], "top": [], "offset": []}
                    )
                    into["tokens"] += choice.logprobs.tokens
                    into["lp"] += choice.logprobs.token_logprobs
                    into["top"] += choice.logprobs.top_logprobs
                    into["offset"] += choice.logprobs.text_offset
                if choice.finish_reason:
                    reasons[choice.index] = choice.finish_reason
        assert usage is not None and usage.completion_tokens == other_usage(finals)[0]  # every choice's
        got = [(texts[i], reasons[i], logprobs[i]) for i in range(len(cases))]
    else:
        got, finals = [], []
        for i, case in enumerate(cases):
            one, final = RUNS[rpc](client, case, "openai_completions", False, choice_index=i)
            finals.append(final)
            loopback.serve(one, False)
            completion = oai.completions.create(model="served-model", prompt="hi")
            (choice,) = completion.choices
            assert choice.index == i and completion.usage.completion_tokens == final.usage.completion_tokens
            lp = choice.logprobs
            lists = {"tokens": lp.tokens, "lp": lp.token_logprobs, "top": lp.top_logprobs}
            got.append((choice.text, choice.finish_reason, lists | {"offset": lp.text_offset}))
    want = [
        (
            final.message.content,
            FINISH_REASON_NAMES[final.finish_reason],
            {
                "tokens": [e.token for e in final.logprobs],
                "lp": [e.logprob for e in final.logprobs],
                "top": [{t.token: t.logprob for t in e.top_logprobs} for e in final.logprobs],
                "offset": [e.text_offset for e in final.logprobs],
            },
        )
        for final in finals
    ]
    assert got == want


def test_parse_once_renders_the_whole_body(registry, client, loopback, ant) -> None:
    """ParseOnce with a wire dialect: the body in ``final.wire``, the events in ``wire``."""
    ids = _qwen_ids(registry, REASONING_AND_TWO_CALLS)
    once = client.parse_once("qwen3", ids, tools=WEATHER_TOOLS, wire=wire("anthropic_messages", False))
    assert not once.wire
    check_anthropic(ant, loopback, once.final.wire, once.final, False)
    once = client.parse_once("qwen3", ids, tools=WEATHER_TOOLS, wire=wire("anthropic_messages", True))
    check_anthropic(ant, loopback, once.wire + once.final.wire, once.final, True)


def test_unset_dialect_is_invalid_argument(client) -> None:
    import grpc

    with pytest.raises(grpc.RpcError) as error:
        client.parse_once("qwen3", [1, 2], wire=pb.WireOptions(model="x"))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "wire.dialect" in error.value.details()


@pytest.mark.parametrize("dialect", [*DIALECTS, "openai_completions"])
def test_a_resumed_session_forwards_the_same_bytes(dialect, client, encode) -> None:
    """Resumed after any reply (its history replayed in other pieces), a session's bytes go on
    exactly as the unbroken stream's: ids, block and item indexes, sequence numbers and all."""
    import test_resume

    messages = test_resume.session(encode, "final")
    messages[0].open.wire.CopyFrom(wire_options(wire(dialect, True)))
    if dialect == "openai_completions":
        messages[0].open.completion.SetInParent()
    full = list(client.parse(messages))
    whole = wire_of(full)
    assert whole.count(b"\n\n") > 20
    for at, last in enumerate([None, *full[:-1]]):
        rest = list(client.parse(test_resume.resumed(messages, last)))
        assert wire_of(full[:at]) + wire_of(rest) == whole, at


def test_stream_wire_iterators_give_the_bytes_as_they_come(grpc_server, client, encode) -> None:
    """``ParseStream.wire()`` and ``AsyncParseStream.wire()``: each reply's bytes as it arrives,
    joined equal to the ``ParseResult.wire`` of the same session."""
    import asyncio

    from parsetier_client import AsyncClient

    ids = encode(REASONING_AND_TWO_CALLS)
    options = {
        "tools": WEATHER_TOOLS,
        "output": "final",
        "wire": wire("anthropic_messages", True),
        "request_id": "req-wire-iterators",  # the same call ids in every session compared
    }
    whole = client.parse_stream("qwen3", [[i] for i in ids], **options).wire
    stream = client.open("qwen3", **options)
    for tid in ids:
        stream.send([tid])
    stream.finish("stop")
    pieces = list(stream.wire())
    assert len(pieces) > 20 and all(pieces) and b"".join(pieces) == whole
    assert pieces[-1] == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'

    async def run() -> list[bytes]:
        async with AsyncClient(grpc_server.target, timeout=30) as aclient:
            stream = await aclient.open("qwen3", **options)
            for tid in ids:
                await stream.send([tid])
            await stream.finish("stop")
            return [piece async for piece in stream.wire()]

    assert asyncio.run(run()) == pieces


def _strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("dialect", ["openai_chat", "openai_completions", "openai_responses"])
def test_minus_infinity_logprobs_are_strict_json(dialect, client, registry) -> None:
    """A logprob of -inf (the generate side may report one) is written -9999.0: every event and
    body parses as strict JSON, with no Infinity or NaN anywhere."""
    ids = _qwen_ids(registry, "It is 4.")
    steps = [logprob_step([tid], [float("-inf")], [{tid: float("-inf"), 11: -1.0}]) for tid in ids]
    options: dict[str, Any] = {"output": "final", "completion": dialect == "openai_completions"}
    for stream in (True, False):
        result = client.parse_stream("qwen3", steps, wire=wire(dialect, stream), **options)
        text = result.wire.decode()
        assert "Infinity" not in text and "NaN" not in text and "-9999.0" in text
        events = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: {")]
        for payload in events if stream else [text]:
            _strict(payload)


_PARTIAL_TEXTS = [
    '{"city": "Paris", "unit": "celsius", "n": -12.5e-3, "ok": true, "x": null, "deep": {"l": [1, 2.0,'
    ' {"a": [false]}, "s\\u00e9\\n\\"q"]}, "e": {}, "f": []}',
    '{ "東京" : [ 1 , -0 , 3E+10 , "天気 🌧️" ] , "k" : { } }',
    '[1, {"a": "b"}]',
    '{"a": 1} trailing',
    '{"a": x}',
]


@pytest.mark.parametrize("text", _PARTIAL_TEXTS)
def test_cut_call_input_is_what_the_sdk_rebuilds(text: str) -> None:
    """A cut call's ``input`` in an Anthropic body (``tool_input``) is, for every prefix of its
    arguments, what the ``anthropic`` SDK's accumulator makes of the same text streamed
    (``jiter``'s partial mode): stream and body agree; an object always."""
    import jiter

    from parsetier.engine.wire.anthropic import tool_input

    for end in range(1, len(text) + 1):
        prefix = text[:end]
        try:
            want = jiter.from_json(prefix.encode(), partial_mode=True)
        except ValueError:
            want = {}
        if not isinstance(want, dict):
            want = {}
        try:
            json.loads(prefix)
        except ValueError:
            pass
        else:  # complete JSON: json.loads's value (jiter ignores what follows a value)
            want = json.loads(prefix) if isinstance(json.loads(prefix), dict) else {}
        assert tool_input(prefix) == want, prefix
