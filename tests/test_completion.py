"""Completion sessions through a live server, with real tokenizers: plain incremental
detokenization (``skip_special_tokens``, ``spaces_between_special_tokens``), stop tokens and stop
strings without retraction, EOS when the stack says nothing, ``return_token_ids``, several
choices, and a user-configured tokenizer."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from grpc_servers import ThreadServer
from parsetier.models import ModelRegistry, ModelSpec, builtin_presets
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import Client, finish_message, logprob_step, open_message
from test_logprobs import POOL, random_steps

MODELS = ("qwen3", "deepseek-v4", "gpt-oss", "mistral-small-3.2", "mistral-7b-v0.3")
QWEN_IM_START, QWEN_IM_END, QWEN_THINK = 151644, 151645, 151667


def wordpiece_dir(tmp: Path, generation_eos: object = None) -> Path:
    """A user's tokenizer whose decoder puts spaces between tokens (WordPiece), with special
    and non-special added tokens. Its EOS is tokenizer_config.json's ``eos_token``, or, given
    ``generation_eos``, generation_config.json's ``eos_token_id`` alone (one id or a list)."""
    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "##s": 3, "a": 4}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens([AddedToken("[EOS]", special=True), AddedToken("<x>", special=True)])
    tok.add_tokens([AddedToken("<think>", special=False)])
    tok.save(str(tmp / "tokenizer.json"))
    if generation_eos is None:
        (tmp / "tokenizer_config.json").write_text('{"eos_token": "[EOS]"}', encoding="utf-8")
    else:
        config = {"eos_token_id": generation_eos}
        (tmp / "generation_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tmp


GENERATION_EOS = {"user-generation-eos-list": [5, 6], "user-generation-eos-int": 6}
"""User tokenizers whose stop ids come from generation_config.json: [EOS] is 5, <x> 6."""


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> ModelRegistry:
    specs = builtin_presets()
    user = wordpiece_dir(tmp_path_factory.mktemp("wordpiece"))
    specs["user-wordpiece"] = ModelSpec("user-wordpiece", "qwen3", str(user))
    for name, eos in GENERATION_EOS.items():
        folder = wordpiece_dir(tmp_path_factory.mktemp(name), generation_eos=eos)
        specs[name] = ModelSpec(name, "qwen3", str(folder))
    registry = ModelRegistry(specs)
    for name in (*MODELS, "user-wordpiece", *GENERATION_EOS):
        registry.get(name)
    return registry


@pytest.fixture(scope="module")
def client(registry) -> Iterator[Client]:
    with ThreadServer(registry) as server, Client(server.target, timeout=60) as client:
        yield client


def complete(
    client: Client, model: str, steps: Sequence[Sequence[int] | pb.Step], finish: pb.Finish, **options
):
    messages = [pb.ParseRequest(open=open_message(model, completion=True, **options))]
    messages += [
        pb.ParseRequest(steps=[s if isinstance(s, pb.Step) else pb.Step(token_ids=s)]) for s in steps
    ]
    messages.append(pb.ParseRequest(finish=finish))
    replies = list(client.parse(messages))
    streamed = "".join(d.content for r in replies for d in r.deltas)
    final = replies[-1].final
    if options.get("output") != "final":
        assert streamed == final.message.content
    assert not final.message.reasoning and not final.message.tool_calls
    return replies, streamed


def split(ids: Sequence[int], sizes: Sequence[int]) -> list[list[int]]:
    out, pos = [], 0
    for n in sizes:
        out.append(list(ids[pos : pos + n]))
        pos += n
    return out


@pytest.mark.parametrize("model", MODELS)
def test_text_is_the_tokenizers_decode_for_every_split(client, registry, model):
    tokenizer = registry.get(model).tokenizer
    specials = sorted(tokenizer.get_added_tokens_decoder())[:40]
    rng = random.Random(model)
    for _ in range(3):
        text = "".join(rng.choice(POOL) for _ in range(12))
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        for _ in range(4):  # special and added tokens anywhere
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        for skip in (True, False):
            want = tokenizer.decode(ids, skip_special_tokens=skip)
            for most in (1, 3, len(ids)):
                steps = split(ids, random_steps(rng, len(ids), most))
                _, got = complete(client, model, steps, finish_message("length"), skip_special_tokens=skip)
                assert got == want, (skip, most)


def test_the_prompt_tail_gives_the_first_token_its_context(client, registry):
    """A SentencePiece text starts without its word space; after a prompt it keeps it."""
    tokenizer = registry.get("mistral-7b-v0.3").tokenizer
    prompt = tokenizer.encode("Say", add_special_tokens=False).ids
    ids = tokenizer.encode("Say hello world", add_special_tokens=False).ids[len(prompt) :]
    _, alone = complete(client, "mistral-7b-v0.3", [ids], finish_message("length"))
    _, after = complete(client, "mistral-7b-v0.3", [ids], finish_message("length"), prompt_token_ids=prompt)
    assert alone == "hello world" == tokenizer.decode(ids)
    assert after == " hello world"


def test_an_incomplete_character_at_the_end_is_replacement_characters(client, registry):
    tokenizer = registry.get("qwen3").tokenizer
    ids = tokenizer.encode("ok 🎉", add_special_tokens=False).ids
    cut = ids[:-1] if tokenizer.decode(ids[:-1]).endswith("\ufffd") else ids
    _, got = complete(client, "qwen3", [[i] for i in cut], finish_message("length"))
    assert got == tokenizer.decode(cut)


def test_eos_is_a_stop_when_the_stack_sends_neither_reason_nor_stop_id(client, registry):
    tokenizer = registry.get("qwen3").tokenizer
    ids = tokenizer.encode("Hello 你好", add_special_tokens=False).ids
    steps = [[i] for i in [*ids, QWEN_IM_END]]
    replies, got = complete(client, "qwen3", steps, pb.Finish(), skip_special_tokens=False)
    assert got == "Hello 你好"
    assert replies[-1].final.finish_reason == pb.FINISH_REASON_STOP
    assert replies[-1].final.usage.completion_tokens == len(ids) + 1
    _, kept = complete(client, "qwen3", steps, pb.Finish(), skip_special_tokens=False, include_stop_text=True)
    assert kept == "Hello 你好<|im_end|>"
    # the id was only held: when generation goes on, its text is output
    _, going_on = complete(client, "qwen3", [*steps, ids[:1]], pb.Finish(), skip_special_tokens=False)
    assert going_on == "Hello 你好<|im_end|>" + tokenizer.decode(ids[:1])
    _, cut = complete(client, "qwen3", steps, finish_message("length"), skip_special_tokens=False)
    assert cut == "Hello 你好<|im_end|>"


@pytest.mark.parametrize(("model", "eos"), [("gpt-oss", "<|return|>"), ("mistral-small-3.2", "</s>")])
def test_eos_of_presets_whose_vocabulary_ships_no_config(client, registry, model, eos):
    tokenizer = registry.get(model).tokenizer
    ids = tokenizer.encode("Hello 你好", add_special_tokens=False).ids
    eos_id = tokenizer.token_to_id(eos)
    assert eos_id in registry.get(model).eos_token_ids
    _, got = complete(client, model, [ids, [eos_id]], pb.Finish(), skip_special_tokens=False)
    assert got == tokenizer.decode(ids)


def test_eos_from_the_user_tokenizer_config(client, registry):
    model = registry.get("user-wordpiece")
    eos = model.tokenizer.token_to_id("[EOS]")
    assert model.eos_token_ids == {eos}
    _, got = complete(client, "user-wordpiece", [[1], [2, 3], [eos]], pb.Finish(), skip_special_tokens=False)
    assert got == "hello worlds"


@pytest.mark.parametrize("model", sorted(GENERATION_EOS))
def test_eos_from_generation_config(client, registry, model):
    """generation_config.json's eos_token_id (one id or a list) makes those ids stops: a Finish
    with neither reason nor stop id drops the last one's text; other specials stay text."""
    tok = registry.get(model).tokenizer
    eos, x = tok.token_to_id("[EOS]"), tok.token_to_id("<x>")
    listed = GENERATION_EOS[model]
    want = set(listed) if isinstance(listed, list) else {listed}
    assert registry.get(model).eos_token_ids == want == ({eos, x} if isinstance(listed, list) else {x})
    for stop in sorted(want):
        _, got = complete(client, model, [[1], [2, 3], [stop]], pb.Finish(), skip_special_tokens=False)
        assert got == "hello worlds", stop
    if eos not in want:
        _, kept = complete(client, model, [[1], [2, 3], [eos]], pb.Finish(), skip_special_tokens=False)
        assert kept == "hello worlds [EOS]", "an id the config does not list is not a stop"


def test_request_stop_token_ids_are_held_back_too(client, registry):
    tokenizer = registry.get("qwen3").tokenizer
    ids = tokenizer.encode("Hi", add_special_tokens=False).ids
    replies, got = complete(
        client,
        "qwen3",
        [ids, [QWEN_IM_START]],
        pb.Finish(),
        skip_special_tokens=False,
        stop_token_ids=[QWEN_IM_START],
    )
    assert got == "Hi"
    assert "<|im_start|>" not in "".join(d.content for r in replies for d in r.deltas)


def test_stop_strings_are_never_streamed_and_cut_at_finish(client, registry):
    tokenizer = registry.get("qwen3").tokenizer
    ids = tokenizer.encode("one two END three", add_special_tokens=False).ids
    steps = [[i] for i in ids]
    replies, got = complete(client, "qwen3", steps, finish_message("stop", "END"), stop=["END", "xyz"])
    assert got == "one two "
    streamed_before_finish = "".join(d.content for r in replies[:-1] for d in r.deltas)
    assert "E" not in streamed_before_finish
    _, kept = complete(
        client, "qwen3", steps, finish_message("stop", "END"), stop=["END"], include_stop_text=True
    )
    assert kept == "one two END"
    _, not_matched = complete(client, "qwen3", steps, finish_message("length"), stop=["END"])
    assert not_matched == "one two END three", "without a stop at Finish, the held text is released"
    _, unlisted = complete(client, "qwen3", steps, finish_message("stop", "END"))
    assert unlisted == "one two END three", "a stop string not listed in Open was streamed already"


def test_spaces_between_special_tokens(client, registry):
    """vLLM's rule: off, an added token right after another added token has no decoder space."""
    tok = registry.get("user-wordpiece").tokenizer
    x, think = tok.token_to_id("<x>"), tok.token_to_id("<think>")
    ids = [1, x, think, 2, 3]
    _, spaced = complete(
        client, "user-wordpiece", [[i] for i in ids], finish_message("length"), skip_special_tokens=False
    )
    assert spaced == tok.decode(ids, skip_special_tokens=False) == "hello <x> <think> worlds"
    _, tight = complete(
        client,
        "user-wordpiece",
        [[i] for i in ids],
        finish_message("length"),
        skip_special_tokens=False,
        spaces_between_special_tokens=False,
    )
    assert tight == "hello <x><think> worlds"
    _, skipped = complete(client, "user-wordpiece", [ids], finish_message("length"))
    assert skipped == tok.decode(ids, skip_special_tokens=True) == "hello <think> worlds"


def test_completion_ignores_the_format(client, registry):
    """Markers are plain text in a completion: `<think>` stays in the content."""
    tokenizer = registry.get("qwen3").tokenizer
    ids = tokenizer.encode(
        "<think>\nhm</think>\n\n<tool_call>\n{}\n</tool_call>", add_special_tokens=False
    ).ids
    assert QWEN_THINK in ids
    _, got = complete(client, "qwen3", [ids], finish_message("length"))
    assert got == tokenizer.decode(ids, skip_special_tokens=True)


def test_logprobs_and_token_ids_in_a_completion(client, registry):
    tokenizer = registry.get("qwen3").tokenizer
    ids = tokenizer.encode("Hi 你好 🎉", add_special_tokens=False).ids
    steps = [logprob_step([i], [-0.5], [[(i, -0.5)]]) for i in ids]
    replies, got = complete(client, "qwen3", steps, finish_message("length"), return_token_ids=True)
    logprobs = [lp for r in replies for d in r.deltas for lp in d.logprobs]
    assert (
        [lp.token_id for lp in logprobs] == ids == [i for r in replies for d in r.deltas for i in d.token_ids]
    )
    assert "".join(lp.token for lp in logprobs) == got
    offsets = [lp.text_offset for lp in logprobs]
    assert offsets == [len("".join(lp.token for lp in logprobs[:k])) for k in range(len(logprobs))]
    final_only = complete(
        client, "qwen3", steps, finish_message("length"), return_token_ids=True, output="final"
    )
    assert list(final_only[0][-1].final.token_ids) == ids
    assert [lp.token_id for lp in final_only[0][-1].final.logprobs] == ids


def test_several_choices_are_several_sessions_of_one_request(client, registry):
    """n = 2: two sessions, same request id and prompt, choice_index 0 and 1; their tool calls
    get different ids, each the same on every run."""
    tokenizer = registry.get("qwen3").tokenizer
    ids = tokenizer.encode(
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', add_special_tokens=False
    ).ids
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]

    def call_id(choice: int) -> str:
        result = client.parse_stream("qwen3", [ids], tools=tools, request_id="req-1", choice_index=choice)
        return result.message.tool_calls[0].id

    assert call_id(0) != call_id(1)
    assert call_id(1) == call_id(1)
    # or n keys of one ParseBatch stream: the same ids as the separate streams give
    with client.batch() as batch:
        for choice in (0, 1):
            key = f"choice-{choice}"
            batch.open(key, "qwen3", tools=tools, request_id="req-1", choice_index=choice)
            batch.feed(key, ids)
            batch.finish(key)
        outputs = batch.step()
    batched = [outputs[f"choice-{choice}"].final.message.tool_calls[0].id for choice in (0, 1)]
    assert batched == [call_id(0), call_id(1)]
    streams = [client.open("qwen3", completion=True, request_id="req-2", choice_index=n) for n in range(2)]
    texts = ["first choice", "second choice"]
    for stream, text in zip(streams, texts, strict=True):
        stream.finish("length", steps=[tokenizer.encode(text, add_special_tokens=False).ids])
    assert ["".join(d.content for d in stream.deltas()) for stream in streams] == texts


def test_a_broken_byte_run_then_a_word_is_text_in_every_split(client, registry):
    """Byte tokens that are no UTF-8 character, then a word: ``DecodeStream`` refuses the word's
    step ("Invalid prefix"); the session decodes what it held after the settled text and goes on,
    whatever the split, instead of ending with INTERNAL. ``C2 80`` settles as U+0080 as soon as it
    is complete, so the lone ``80`` after it is one U+FFFD (a whole decode, which sees the run at
    once, gives three): nothing streamed is taken back."""
    tokenizer = registry.get("mistral-7b-v0.3").tokenizer
    ids = [tokenizer.token_to_id(t) for t in ("<0xC2>", "<0x80>", "<0x80>")]
    ids += tokenizer.encode("ok then", add_special_tokens=False).ids
    for sizes in ([len(ids)], [1] * len(ids), [2, 2, len(ids) - 4], [3, len(ids) - 3]):
        _, got = complete(client, "mistral-7b-v0.3", split(ids, sizes), finish_message("length"))
        assert got == "\x80\ufffd ok then", sizes
