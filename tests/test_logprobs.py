"""Logprob resolution through a live server, with real tokenizers (Qwen3, DeepSeek V4, gpt-oss,
Mistral tekken, and Mistral v3's SentencePiece byte-fallback pieces ``<0xAB>``).

Random outputs mixing ASCII, CJK, emoji and rare characters are encoded by the real tokenizer,
split at random into steps, and sent with random logprobs and top-k alternatives. What comes back
must agree with the tokenizer itself: every token's text is what ``tokenizer.decode`` adds for it
after the ids before it (so a piece of a multi-byte character settles nothing and the piece that
completes it carries the character), the sampled bytes join to exactly the output's bytes, and
every split gives the same result as sending the whole output at once.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Iterator, Sequence

import grpc
import pytest
from tokenizers.pre_tokenizers import ByteLevel

from grpc_servers import ThreadServer
from parsetier.models import ModelRegistry
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc
from parsetier_client import (
    AsyncClient,
    Client,
    finish_message,
    logprob_step,
    open_message,
    step_logprobs,
    wire_of,
)

MODELS = ("qwen3", "deepseek-v4", "gpt-oss", "mistral-small-3.2", "mistral-7b-v0.3")
"""Byte-level BPE (the first four; tekken is mistral-small-3.2's) and SentencePiece byte fallback."""

POOL = (
    "the cat sat on a mat, 12 34.",
    "你好世界",
    "中文字符测试",
    "日本語のテキスト",
    "🎉",
    "👍🏽",
    "🚀😀",
    "𝄞",
    "ꙮ",
    "ᚠᛇᚻ",
    "é ß ñ",
    "\n",
    " ",
)
"""Pieces of random outputs: multi-byte characters of every UTF-8 length; the rare ones (ꙮ, 𝄞,
runes) have no token of their own in most vocabularies and become byte pieces."""


def random_text(rng: random.Random, pieces: int = 14) -> str:
    return "".join(rng.choice(POOL) for _ in range(pieces))


def random_steps(rng: random.Random, n: int, most: int) -> list[int]:
    """Step sizes adding up to ``n``."""
    sizes, left = [], n
    while left:
        size = min(left, rng.randint(1, most))
        sizes.append(size)
        left -= size
    return sizes


@pytest.fixture(scope="module")
def models() -> ModelRegistry:
    registry = ModelRegistry()
    for name in MODELS:
        registry.get(name)
    return registry


@pytest.fixture(scope="module")
def server(models: ModelRegistry) -> Iterator[ThreadServer]:
    with ThreadServer(models) as server:
        yield server


@pytest.fixture(scope="module")
def client(server: ThreadServer) -> Iterator[Client]:
    with Client(server.target, timeout=60) as client:
        yield client


def check_settled(tokenizer, ids: Sequence[int], before: str, text: str) -> None:
    """``before + text`` is what the client holds after ``ids``; the tokenizer's decode of them
    must say the same wherever it ends on a whole character, and otherwise hold no more text."""
    full = tokenizer.decode(list(ids), skip_special_tokens=False)
    if full.endswith("\ufffd"):
        assert (before + text).startswith(full.rstrip("\ufffd")), (full, before + text)
    else:
        assert before + text == full, (full, before + text)


def check_alternative(tokenizer, ids: Sequence[int], before: str, text: str, byte_runs: bool) -> None:
    """As ``check_settled``, for an alternative at the end of ``ids``. ``byte_runs``: the decoder
    turns a whole run of ``<0xAB>`` pieces into U+FFFD when any of it is broken, even the run's
    complete characters, which parsetier keeps; there an alternative that breaks the character in
    progress is the carried bytes' U+FFFD and its own text."""
    try:
        check_settled(tokenizer, ids, before, text)
    except AssertionError:
        if not byte_runs:
            raise
        base = tokenizer.decode([ids[0]], skip_special_tokens=False)  # the alternative after plain text
        alone = tokenizer.decode([ids[0], ids[-1]], skip_special_tokens=False).removeprefix(base)
        assert text.replace("\ufffd", "") == alone.replace("\ufffd", ""), (text, alone)


def session(
    client: Client,
    model: str,
    ids: Sequence[int],
    sizes: Sequence[int],
    tops: Sequence[Sequence[int]],
    **open_options,
):
    """One Parse stream: the ids in steps of ``sizes``, each id with logprob -i/10 and alternatives
    ``tops[i]`` (logprobs -1, -2, ...)."""
    steps, pos = [], 0
    for size in sizes:
        chunk = range(pos, pos + size)
        steps.append(
            logprob_step(
                [ids[i] for i in chunk],
                [-i / 10 for i in chunk],
                [[(alt, -1.0 - j) for j, alt in enumerate(tops[i])] for i in chunk],
            )
        )
        pos += size
    messages = [pb.ParseRequest(open=open_message(model, **open_options))]
    messages += [pb.ParseRequest(steps=[s]) for s in steps]
    messages.append(pb.ParseRequest(finish=finish_message()))
    return list(client.parse(messages))


def resolved(replies) -> list[tuple]:
    """What a client reads back, as comparable tuples."""
    out = []
    for reply in replies:
        for lp in [lp for d in reply.deltas for lp in d.logprobs] + list(reply.final.logprobs):
            tops = tuple((t.token_id, t.token, t.bytes, t.logprob) for t in lp.top_logprobs)
            out.append((lp.token_id, lp.token, lp.bytes, lp.logprob, lp.text_offset, tops))
    return out


@pytest.mark.parametrize("model", MODELS)
def test_tokens_and_bytes_agree_with_the_tokenizer_under_random_splits(client, models, model):
    tokenizer = models.get(model).tokenizer
    context = tokenizer.encode("ok", add_special_tokens=False).ids  # keeps SentencePiece's leading space
    byte_pieces = 0
    byte_runs = model == "mistral-7b-v0.3"
    for seed in range(3):
        rng = random.Random(f"{model}-{seed}")
        text = random_text(rng)
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        byte_pieces += sum("\ufffd" in tokenizer.decode([i]) for i in ids)
        tops = [[*rng.sample(ids, 3), rng.randrange(models.get(model).vocab_size)] for _ in ids]
        whole = resolved(session(client, model, ids, [len(ids)], tops))
        assert len(whole) == len(ids)

        start = tokenizer.decode(context, skip_special_tokens=False)
        held = ""
        for i, (tid, token, _, logprob, text_offset, alts) in enumerate(whole):
            assert tid == ids[i]
            assert math.isclose(logprob, -i / 10, rel_tol=1e-6, abs_tol=1e-6)
            assert text_offset == len(held)
            before = [*context, *ids[:i]]
            for (alt, alt_token, alt_bytes, _), want in zip(alts, tops[i], strict=True):
                assert alt == want
                alone = tokenizer.decode([alt], skip_special_tokens=False)
                if "\ufffd" not in alone and not tokenizer.id_to_token(alt).startswith("▁"):
                    assert alt_bytes.decode("utf-8") == alone
                check_alternative(tokenizer, [*before, alt], start + held, alt_token, byte_runs)
            check_settled(tokenizer, [*before, tid], start + held, token)
            held += token
        spm_space = b" " if byte_runs else b""  # SentencePiece starts the text with a word boundary
        assert b"".join(t[2] for t in whole) == spm_space + text.encode("utf-8")
        assert start + held == tokenizer.decode([*context, *ids])

        for most in (1, 2, 5):
            split = resolved(session(client, model, ids, random_steps(rng, len(ids), most), tops))
            assert split == whole, f"split into steps of at most {most}"
    assert byte_pieces, "the outputs should contain tokens that are only part of a character"


def test_sentencepiece_byte_fallback_pieces(client, models):
    """``<0xAB>`` pieces: each is one byte; the character's last piece carries it."""
    tokenizer = models.get("mistral-7b-v0.3").tokenizer
    ids = tokenizer.encode("ꙮ", add_special_tokens=False).ids
    pieces = [tokenizer.id_to_token(i) for i in ids]
    assert pieces[-3:] == ["<0xEA>", "<0x99>", "<0xAE>"]
    got = resolved(session(client, "mistral-7b-v0.3", ids, [1] * len(ids), [[] for _ in ids]))
    assert [t[2] for t in got[-3:]] == [b"\xea", b"\x99", b"\xae"]
    assert [t[1] for t in got[-3:]] == ["", "", "ꙮ"]


def byte_tokens(tokenizer, text: str) -> list[int]:
    """The single-byte tokens spelling ``text``'s UTF-8, one id per byte (byte-level vocabularies)."""
    (symbols, _), *_ = ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)
    return [tokenizer.token_to_id(symbol) for symbol in symbols]


def test_alternative_is_read_with_the_carried_bytes(client, models):
    """At a position inside a character, an alternative is read after the bytes carried so far."""
    tokenizer = models.get("qwen3").tokenizer
    ids = byte_tokens(tokenizer, "你")  # E4 BD A0
    (other,) = byte_tokens(tokenizer, "\u4f61")[2:]  # E4 BD A1: 佡
    tops = [[], [ids[1]], [ids[2], other, *tokenizer.encode("a", add_special_tokens=False).ids]]
    got = resolved(session(client, "qwen3", ids, [1, 1, 1], tops))
    assert [t[1] for t in got] == ["", "", "你"]
    assert [t[2] for t in got] == [b"\xe4", b"\xbd", b"\xa0"]
    assert [a[1] for a in got[1][5]] == [""]
    assert [a[1] for a in got[2][5]] == ["你", "佡", "\ufffda"]
    assert got[2][5][1][2] == b"\xa1"


def test_reasoning_logprobs_are_dropped_when_reasoning_is_not_included(client, models):
    tokenizer = models.get("qwen3").tokenizer
    text = "<think>\nLet me think: 你好 🎉.\n</think>\n\nThe answer is 42 👍🏽."
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    tops = [[] for _ in ids]
    per_token = session(client, "qwen3", ids, [1] * len(ids), tops, include_reasoning=False)
    final = per_token[-1].final
    kept = [t[0] for t in resolved(per_token)]
    assert len(kept) == final.usage.completion_tokens - final.usage.reasoning_tokens
    assert 0 < final.usage.reasoning_tokens < len(ids)
    # counted as the machine counts reasoning tokens: <think> is still content, </think> reasoning
    assert kept == [ids[0], *ids[ids.index(151668) + 1 :]]
    # each step's logprobs come in the reply to that step's message, on its last delta, after those
    # of the tokens of a character it completes (held until it settles: parsetier.logprobs)
    for reply in per_token[:-1]:  # the last one answers Finish
        step = ids[reply.client_messages - 2]  # message 1 is Open
        lps = [lp.token_id for d in reply.deltas for lp in d.logprobs]
        assert lps == [] or lps[-1] == step
        assert all("\ufffd" in tokenizer.decode([held]) for held in lps[:-1])
        assert all(not d.logprobs for d in reply.deltas[:-1])
    rng = random.Random(7)
    for most in (2, 4, 9):
        split = session(
            client, "qwen3", ids, random_steps(rng, len(ids), most), tops, include_reasoning=False
        )
        assert [t[0] for t in resolved(split)] == kept
    shown = session(client, "qwen3", ids, random_steps(rng, len(ids), 3), tops)
    assert len(resolved(shown)) == shown[-1].final.usage.completion_tokens == len(ids)


def chat_logprobs_in(wire: bytes) -> list[dict]:
    """The entries of OpenAI chat's ``logprobs.content`` in a streamed session's wire bytes, joined
    across its chunks (strict JSON: no Infinity nor NaN)."""
    entries: list[dict] = []
    for event in wire.decode().split("\n\n"):
        if event.startswith("data: {"):
            for choice in strict_json(event.removeprefix("data: "))["choices"]:
                entries += (choice["logprobs"] or {}).get("content", [])
    return entries


def strict_json(text: str):
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_openai_shapes_come_from_the_wire_and_final_only(client, models):
    """The clients shape no JSON: the server's wire dialects carry the logprobs in OpenAI chat's
    and completions' shapes, the same entries the deltas carry typed."""
    tokenizer = models.get("qwen3").tokenizer
    ids = tokenizer.encode("Hi 你好", add_special_tokens=False).ids
    tops = [[ids[0], ids[-1]] for _ in ids]
    chat = {"dialect": "openai_chat", "response_id": "chatcmpl-lp", "stream": True}
    streamed = session(client, "qwen3", ids, [1] * len(ids), tops, wire=chat)
    logprobs = [lp for r in streamed for d in r.deltas for lp in d.logprobs]
    assert not streamed[-1].final.logprobs, "with deltas, logprobs are only on the deltas"
    content = chat_logprobs_in(wire_of(streamed))
    assert [c["token"] for c in content] == [lp.token for lp in logprobs]
    assert [c["logprob"] for c in content] == pytest.approx([lp.logprob for lp in logprobs])
    assert content[0]["bytes"] == list(b"Hi")
    assert [t["token"] for t in content[0]["top_logprobs"]] == ["Hi", logprobs[-1].top_logprobs[1].token]

    completions = {"dialect": "openai_completions", "response_id": "cmpl-lp", "stream": False}
    body = session(client, "qwen3", ids, [1] * len(ids), tops, wire=completions, completion=True)
    (choice,) = strict_json(wire_of(body))["choices"]
    lists = choice["logprobs"]
    assert lists["tokens"] == [lp.token for lp in logprobs]
    assert lists["text_offset"] == [len("".join(lp.token for lp in logprobs[:i])) for i in range(len(ids))]
    assert lists["top_logprobs"][0] == {"Hi": -1.0, logprobs[-1].top_logprobs[1].token: -2.0}

    final_only = session(client, "qwen3", ids, [1] * len(ids), tops, output="final")
    assert resolved(final_only) == resolved(streamed)
    once = client.parse_once(
        "qwen3",
        ids,
        logprobs=step_logprobs(
            [-i / 10 for i in range(len(ids))], [[(a, -1.0 - j) for j, a in enumerate(t)] for t in tops]
        ),
    )
    assert resolved([once]) == resolved(streamed)


def _refused(client: Client, step: pb.Step, model: str = "qwen3") -> grpc.RpcError:
    messages = [
        pb.ParseRequest(open=open_message(model)),
        pb.ParseRequest(steps=[pb.Step(token_ids=[9]), step]),
    ]
    with pytest.raises(grpc.RpcError) as info:
        list(client.parse(messages))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return info.value


@pytest.mark.parametrize(
    ("step", "field"),
    [
        (
            pb.Step(token_ids=[1, 2], logprobs=pb.StepLogprobs(token_logprobs=[-1.0])),
            "steps[1].logprobs.token_logprobs",
        ),
        (
            pb.Step(
                token_ids=[1, 2],
                logprobs=pb.StepLogprobs(
                    token_logprobs=[-1, -1], top_token_ids=[5, 6, 7], top_logprobs=[-1, -1, -1]
                ),
            ),
            "steps[1].logprobs.top_token_ids",
        ),
        (
            pb.Step(
                token_ids=[1],
                logprobs=pb.StepLogprobs(token_logprobs=[-1], top_token_ids=[5, 6], top_logprobs=[-1]),
            ),
            "steps[1].logprobs.top_logprobs",
        ),
        (
            pb.Step(token_ids=[1], logprobs=pb.StepLogprobs(token_logprobs=[math.nan])),
            "steps[1].logprobs.token_logprobs[0]",
        ),
        (
            pb.Step(
                token_ids=[1],
                logprobs=pb.StepLogprobs(token_logprobs=[-1], top_token_ids=[3], top_logprobs=[math.inf]),
            ),
            "steps[1].logprobs.top_logprobs[0]",
        ),
        (
            pb.Step(
                token_ids=[1],
                logprobs=pb.StepLogprobs(token_logprobs=[-1], top_token_ids=[10**7], top_logprobs=[-1]),
            ),
            "steps[1].logprobs.top_token_ids",
        ),
        (pb.Step(text="hi", logprobs=pb.StepLogprobs(token_logprobs=[-1])), "steps[1].logprobs"),
    ],
)
def test_bad_logprobs_are_invalid_argument_naming_the_field(client, step, field):
    error = _refused(client, step)
    assert field in error.details(), error.details()


def test_infinitely_unlikely_is_a_logprob(client):
    replies = session(client, "qwen3", [9], [1], [[10]])
    del replies
    step = pb.Step(
        token_ids=[9],
        logprobs=pb.StepLogprobs(token_logprobs=[-math.inf], top_token_ids=[3], top_logprobs=[-math.inf]),
    )
    messages = [
        pb.ParseRequest(open=open_message("qwen3")),
        pb.ParseRequest(steps=[step], finish=finish_message()),
    ]
    (reply,) = list(client.parse(messages))
    assert reply.deltas[-1].logprobs[0].logprob == -math.inf


def test_async_client_sends_logprob_steps_and_reads_them_back(server, client, models):
    """The asyncio client: logprob steps in, the resolved logprobs out, as the sync client reads them."""
    tokenizer = models.get("qwen3").tokenizer
    ids = tokenizer.encode("Hi 🎉 你好", add_special_tokens=False).ids
    tops = [[i, ids[0]] for i in ids]
    want = resolved(session(client, "qwen3", ids, [1] * len(ids), tops))

    async def run() -> list[pb.ParseResponse]:
        async with AsyncClient(server.target, timeout=60) as aio:
            stream = await aio.open("qwen3")
            for i, tid in enumerate(ids):
                await stream.send(
                    logprob_step([tid], [-i / 10], [[(a, -1.0 - j) for j, a in enumerate(tops[i])]])
                )
            await stream.finish()
            return [m async for m in stream]

    replies = asyncio.run(run())
    assert resolved(replies) == want
    logprobs = [lp for r in replies for d in r.deltas for lp in d.logprobs]
    assert "".join(lp.token for lp in logprobs) == "Hi 🎉 你好"


REASONING_OUTPUTS = {
    "qwen3": "<think>\nLet me think: 你好 🎉.\n</think>\n\nThe answer is 42 👍🏽.",
    "deepseek-v4": "<think>Let me think: 你好 🎉.</think>The answer is 42 👍🏽.",
    "gpt-oss": (
        "<|channel|>analysis<|message|>Let me think: 你好 🎉.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>The answer is 42 👍🏽.<|return|>"
    ),
}


@pytest.mark.parametrize("model", sorted(REASONING_OUTPUTS))
def test_hidden_reasoning_drops_the_same_logprobs_under_every_split(client, models, model):
    """Which tokens' logprobs are dropped does not depend on how the output is split into steps,
    and their number is the reasoning token count."""
    tokenizer = models.get(model).tokenizer
    ids = tokenizer.encode(REASONING_OUTPUTS[model], add_special_tokens=False).ids
    tops = [[] for _ in ids]
    reference = session(client, model, ids, [1] * len(ids), tops, include_reasoning=False)
    usage = reference[-1].final.usage
    kept = [t[0] for t in resolved(reference)]
    assert 0 < usage.reasoning_tokens < len(ids)
    assert len(kept) == usage.completion_tokens - usage.reasoning_tokens
    rng = random.Random(model)
    for most in (2, 3, 6, len(ids)):
        split = session(client, model, ids, random_steps(rng, len(ids), most), tops, include_reasoning=False)
        assert [t[0] for t in resolved(split)] == kept, most


def test_a_resumable_client_keeps_logprob_steps_whole():
    """The clients' resume ledger keeps a step with logprobs whole in the answered history (its
    logprobs would be lost on the new stream as a bare run of ids), and merges plain id steps."""
    from parsetier_client.resume import Ledger

    ledger = Ledger(open_message("qwen3"))
    step = logprob_step([9, 10], [-0.5, -1.0], [[(3, -2.0)], [(4, -3.0)]])
    ledger.send(pb.ParseRequest(steps=[step]))
    ledger.send(pb.ParseRequest(steps=[pb.Step(token_ids=[11])]))
    ledger.send(pb.ParseRequest(steps=[pb.Step(token_ids=[12])]))
    ledger.received(1, 4, 7)
    point = ledger.point().resume
    assert list(point.history) == [step, pb.Step(token_ids=[11, 12])]
    assert (point.sequence, point.output_digest) == (1, 7)


@pytest.mark.parametrize("model", sorted(REASONING_OUTPUTS))
def test_return_token_ids_in_a_chat_session_are_never_dropped(client, models, model):
    """With return_token_ids, each step's ids come back on the delta it produced, hidden reasoning
    included (unlike its logprobs), under any split; FINAL_ONLY puts them all in Final.token_ids."""
    tokenizer = models.get(model).tokenizer
    ids = tokenizer.encode(REASONING_OUTPUTS[model], add_special_tokens=False).ids
    rng = random.Random(f"ids-{model}")
    for most in (1, 3, len(ids)):
        sizes = random_steps(rng, len(ids), most)
        messages = [pb.ParseRequest(open=open_message(model, include_reasoning=False, return_token_ids=True))]
        pos = 0
        for size in sizes:
            messages.append(pb.ParseRequest(steps=[pb.Step(token_ids=ids[pos : pos + size])]))
            pos += size
        messages.append(pb.ParseRequest(finish=finish_message()))
        replies = list(client.parse(messages))
        assert [i for r in replies for d in r.deltas for i in d.token_ids] == ids, most
        assert not any(d.reasoning for r in replies for d in r.deltas)
        for reply in replies[:-1]:  # one reply per step message, carrying exactly that step's ids
            step = messages[reply.client_messages - 1].steps[0]
            assert [i for d in reply.deltas for i in d.token_ids] == list(step.token_ids)
    final = client.parse_once(model, ids, include_reasoning=False, return_token_ids=True).final
    assert list(final.token_ids) == ids


@pytest.mark.parametrize(
    ("logprobs", "field"),
    [
        (pb.StepLogprobs(token_logprobs=[-1.0]), "logprobs.token_logprobs"),
        (
            pb.StepLogprobs(token_logprobs=[-1, -1], top_token_ids=[10**7, 1], top_logprobs=[-1, -1]),
            "logprobs.top_token_ids",
        ),
        (pb.StepLogprobs(token_logprobs=[math.nan, -1]), "logprobs.token_logprobs[0]"),
    ],
)
def test_parse_once_names_its_own_logprob_fields(server, logprobs, field):
    """ParseOnceRequest has no steps: its errors name its own `logprobs` field."""
    request = pb.ParseOnceRequest(open=open_message("qwen3"), token_ids=[9707, 0], logprobs=logprobs)
    with grpc.insecure_channel(server.target) as channel:
        once = pb_grpc.ParserServiceStub(channel).ParseOnce
        with pytest.raises(grpc.RpcError) as info:
            once(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(field), info.value.details()
