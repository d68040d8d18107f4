"""A tokenizer directory with a ``response_template`` is all a model needs: ``parsetier serve
--model-dir`` serves Parse, ParseBatch, ParseOnce and BuildConstraint for it with no format file,
and ListModels says where its grammar comes from. A real server process on loopback, the packaged
real Qwen3 and Qwen3.5 tokenizers, transformers' own templates."""

from __future__ import annotations

import json
from pathlib import Path

import llguidance
import pytest

from grpc_servers import ProcessServer
from parsetier.models import ModelRegistry
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import Client
from response_templates import FAMILIES, TEMPLATES, encode, m, write_dir

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    root: Path = tmp_path_factory.mktemp("served")
    dirs = {name: write_dir(root, f"dir-{name}", FAMILIES[name].tokenizer, TEMPLATES[FAMILIES[name].template])
            for name in ("qwen3", "qwen3.5")}  # fmt: skip
    local = ModelRegistry({})
    for name, path in dirs.items():
        local.add_model_dir(path, name)
    args = [a for name, path in dirs.items() for a in ("--model-dir", f"rt-{name}={path}")]
    with ProcessServer(*args, "--preload", "none") as server:
        yield server, local


def _call_ids(local: ModelRegistry) -> tuple[list[int], list[int]]:
    model = local.get("qwen3")
    call = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    out = f"{m('<think>')}\nHm.\n{m('</think>')}\n\nSure.\n{m('<tool_call>')}\n{call}\n{m('</tool_call>')}"
    return encode(model, FAMILIES["qwen3"].prompt), encode(model, out + m("<|im_end|>"))


def test_list_models_says_the_source(served) -> None:
    server, _ = served
    with Client(server.target, timeout=60) as client:
        models = {info.name: info for info in client.list_models()}
    for name in ("rt-qwen3", "rt-qwen3.5"):
        assert models[name].format == "response_template"
        assert models[name].format_source == pb.FORMAT_SOURCE_RESPONSE_TEMPLATE
        assert models[name].tokenizer_status == pb.TOKENIZER_STATUS_READY
        assert models[name].capabilities.reasoning and models[name].capabilities.tool_calls
    assert models["qwen3"].format == "qwen3", "the presets are still there"
    assert models["qwen3"].format_source == pb.FORMAT_SOURCE_FORMAT_FILE


def test_parse_parse_once_and_batch_serve_the_template(served) -> None:
    server, local = served
    prompt, ids = _call_ids(local)
    with Client(server.target, timeout=60) as client:
        once = client.parse_once("rt-qwen3", ids, prompt_token_ids=prompt, tools=[WEATHER], request_id="r")
        message, deltas = client.parse_stream(
            "rt-qwen3", [[i] for i in ids], "stop", prompt_token_ids=prompt, tools=[WEATHER], request_id="r"
        )
        with client.batch() as batch:
            batch.open("k", "rt-qwen3", prompt_token_ids=prompt, tools=[WEATHER], request_id="r")
            batch.feed("k", ids)
            batch.finish("k")
            batched = batch.step()["k"].final.message
    for got in (once.final.message, message, batched):
        assert got.reasoning == "Hm."
        assert got.content == "Sure."
        assert [(c.name, json.loads(c.arguments)) for c in got.tool_calls] == [
            ("get_weather", {"city": "Paris"})
        ]
    assert len(deltas) > 3, "streamed"
    views = {
        (got.content, got.reasoning, tuple((c.id, c.name, c.arguments) for c in got.tool_calls))
        for got in (once.final.message, message, batched)
    }
    assert len(views) == 1, views


def test_build_constraint_from_the_template(served) -> None:
    server, local = served
    model = local.get("qwen3")
    prompt = encode(model, f"{FAMILIES['qwen3'].prompt}{m('<think>')}\n")
    with Client(server.target, timeout=60) as client:
        answer = client.build_constraint(
            "rt-qwen3", tools=[WEATHER], tool_choice="required", prompt_token_ids=prompt
        )
    assert answer.reasoning == pb.CONSTRAINT_REASONING_CONTINUED, "the prompt opened the reasoning"
    anchors = {(a.text, a.in_reasoning) for a in answer.message_start_anchors}
    assert anchors == {("<|im_start|>assistant\n", False), ("<think>", True), ("</think>", False)}
    assert list(answer.triggers) == ["<tool_call>"]
    body = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    good = encode(model, f"ok\n{m('</think>')}\n\n{m('<tool_call>')}\n{body}\n{m('</tool_call>')}")
    tokenizer = llguidance.LLTokenizer(model.tokenizer.to_str(), n_vocab=model.vocab_size)
    matcher = llguidance.LLMatcher(tokenizer, answer.lark_grammar, log_level=0)
    assert matcher.consume_tokens(good) and matcher.is_accepting()
    matcher = llguidance.LLMatcher(tokenizer, answer.lark_grammar, log_level=0)
    no_call = encode(model, f"ok\n{m('</think>')}\n\nNo call.")
    assert not (matcher.consume_tokens(no_call) and matcher.is_accepting())
