"""Render's request readers, errors and cache, sans-IO, on real tokenizers and templates; and the
RPC's statuses through a live server (docs/render.md)."""

from __future__ import annotations

import json

import grpc
import pytest

from parsetier.models import ModelRegistry
from parsetier.render import Renderer, RenderOptions
from parsetier.render.encode import PrefixCache, boundaries, encode
from parsetier.render.errors import NoTemplate, PromptTooLong, TemplateRaised, UntrustedTemplate
from parsetier.status import Code, StatusError
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
}
ARGS = '{"city": "Paris"}'
USER = {"role": "user", "content": "x"}
CANONICAL = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "Call the tool.", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]


@pytest.fixture(scope="module")
def models() -> ModelRegistry:
    return ModelRegistry()


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer()


def chat_body(**extra) -> dict:
    messages = [
        {**m, "tool_calls": [{**CALL, "function": {**CALL["function"], "arguments": '{"city": "Paris"}'}}]}
        if m.get("tool_calls")
        else m
        for m in CANONICAL
    ]
    return {"model": "m", "messages": messages, "tools": TOOLS, **extra}


def anthropic_body() -> dict:
    return {
        "model": "m",
        "max_tokens": 100,
        "system": "You are terse.",
        "tools": [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in TOOLS
        ],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Call the tool.", "signature": "x"},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}],
            },
        ],
    }


def responses_body() -> dict:
    return {
        "model": "m",
        "instructions": "You are terse.",
        "tools": [{"type": "function", **t["function"]} for t in TOOLS],
        "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Call the tool."}],
            },
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ARGS},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
    }


def render(renderer: Renderer, models: ModelRegistry, model: str, dialect: str, body: dict):
    return renderer.render(models.get(model), dialect, json.dumps(body).encode())


@pytest.mark.parametrize("model", ["qwen3", "qwen3.5", "glm-4.5", "minimax-m2"])
def test_every_dialect_renders_the_same_conversation_to_the_same_ids(renderer, models, model):
    chat = render(renderer, models, model, "openai_chat", chat_body())
    assert chat.conversation.messages == CANONICAL
    for dialect, body in (("anthropic_messages", anthropic_body()), ("openai_responses", responses_body())):
        other = render(renderer, models, model, dialect, body)
        assert other.conversation.messages == CANONICAL, dialect
        assert other.prompt_ids == chat.prompt_ids, dialect


def test_anthropic_and_responses_tools_keep_their_schema(renderer, models):
    for dialect, body in (("anthropic_messages", anthropic_body()), ("openai_responses", responses_body())):
        conv = render(renderer, models, "qwen3", dialect, body).conversation
        assert conv.tools == TOOLS, dialect


@pytest.mark.parametrize(
    ("dialect", "body", "path"),
    [
        ("openai_chat", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
         "messages[0].content[0].type"),
        ("openai_chat", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ("openai_chat", {"messages": [{"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}]},
         "messages[0].tool_calls[0].function.arguments"),
        ("openai_chat", {"messages": [{"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{nope"}}]}]},
         "messages[0].tool_calls[0].function.arguments"),
        ("openai_chat", {"messages": [USER], "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "date"}}}]},
         "tools[0].function.parameters"),
        ("openai_chat", {"messages": [USER], "tool_choice": "required"}, "tool_choice"),
        ("openai_chat", {"messages": [USER], "temperature": "hot"}, "temperature"),
        ("openai_chat", {"messages": [USER], "logit_bias": {"1": 2}}, "logit_bias"),
        ("anthropic_messages", {"messages": [USER]}, "max_tokens"),
        ("anthropic_messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {}}]}]}, "messages[0].content[0].type"),
        ("anthropic_messages", {"max_tokens": 5, "messages": [USER],
                                "tools": [{"name": "f", "input_schema": 3}]}, "tools[0].input_schema"),
        ("openai_responses", {"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ("openai_responses", {"input": [{"type": "function_call", "name": "f", "arguments": "7"}]},
         "input[0].arguments"),
        ("openai_completions", {"prompt": ["a", "b"]}, "prompt"),
        ("openai_completions", {"prompt": "a", "echo": True}, "echo"),
    ],
)  # fmt: skip
def test_a_bad_request_is_invalid_argument_naming_the_json_path(renderer, models, dialect, body, path):
    with pytest.raises(StatusError) as caught:
        render(renderer, models, "qwen3", dialect, body)
    assert caught.value.code is Code.INVALID_ARGUMENT
    assert str(caught.value).startswith((path + ": ", path + " must")), caught.value


def test_a_templates_raise_exception_is_its_message(renderer, models):
    # Qwen3.5's template refuses a second system message
    body = {"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]}
    with pytest.raises(TemplateRaised) as caught:
        render(renderer, models, "qwen3.5", "openai_chat", body)
    assert caught.value.refused
    assert (
        str(caught.value) == "the chat template refused the request: System message must be at the beginning."
    )


def test_a_request_template_is_refused_unless_trusted(models):
    body = {"messages": [{"role": "user", "content": "hi"}], "chat_template": "{{ messages[0].content }}!"}
    with pytest.raises(UntrustedTemplate):
        render(Renderer(), models, "qwen3", "openai_chat", body)
    trusted = render(
        Renderer(RenderOptions(trust_request_templates=True)), models, "qwen3", "openai_chat", body
    )
    assert trusted.text == "hi!"


def test_a_model_without_a_template_is_failed_precondition(renderer, models):
    with pytest.raises(NoTemplate):
        render(renderer, models, "qwen3-coder", "openai_chat", {"messages": [USER]})


def test_the_prompt_limit_names_both_numbers(models):
    small = Renderer(RenderOptions(max_prompt_tokens=5))
    with pytest.raises(PromptTooLong, match=r"has \d+ tokens; this server's limit is 5"):
        render(small, models, "qwen3", "openai_chat", chat_body())


def test_deepseek_templates_that_join_arguments_as_text_get_the_clients_text(renderer, models):
    out = render(renderer, models, "deepseek-r1", "openai_chat", chat_body())
    assert '```json\n{"city": "Paris"}\n```' in out.text


def test_the_prefix_cache_gives_the_same_ids_as_encoding_whole(models):
    model = models.get("qwen3")
    bounds = boundaries(model.tokenizer)
    assert "<|im_start|>" in bounds.ids and "<tool_call>" not in bounds.ids  # not special: not a cut
    cache = PrefixCache()
    turns = [{"role": "system", "content": "S " * 1500}]
    for i in range(6):
        turns.append({"role": "user", "content": f"question {i} é ✓ <|im_start|> look-alike " * 40})
        text = Renderer().render(model, "openai_chat", json.dumps({"messages": turns}).encode()).text
        assert cache.encode(model.tokenizer, bounds, "qwen3", text) == encode(model.tokenizer, text)
        turns.append({"role": "assistant", "content": f"answer {i}\n\n" * 30})
    assert cache.hits >= 4


@pytest.fixture(scope="module")
def stub(grpc_server):
    with grpc.insecure_channel(grpc_server.target) as channel:
        yield pb_grpc.ParserServiceStub(channel)


def call(stub, model: str, dialect: int, body: bytes | dict, **fields) -> pb.RenderResponse:
    from test_render_exact import retried

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return retried(stub.Render, pb.RenderRequest(model=model, dialect=dialect, request_json=data, **fields))


@pytest.mark.parametrize(
    ("model", "dialect", "body", "code"),
    [
        ("no-such-model", pb.WIRE_DIALECT_OPENAI_CHAT, b"{}", grpc.StatusCode.NOT_FOUND),
        ("qwen3", pb.WIRE_DIALECT_UNSPECIFIED, b"{}", grpc.StatusCode.INVALID_ARGUMENT),
        ("qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, b"{not json", grpc.StatusCode.INVALID_ARGUMENT),
        ("qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, b"\xff\xfe", grpc.StatusCode.INVALID_ARGUMENT),
        ("qwen3-coder", pb.WIRE_DIALECT_OPENAI_CHAT, {"messages": [USER]},
         grpc.StatusCode.FAILED_PRECONDITION),
        ("qwen3", pb.WIRE_DIALECT_OPENAI_CHAT,
         {"messages": [USER], "chat_template": "{{ 1 }}"},
         grpc.StatusCode.PERMISSION_DENIED),
    ],
)  # fmt: skip
def test_render_statuses_through_the_service(stub, model, dialect, body, code):
    with pytest.raises(grpc.RpcError) as caught:
        call(stub, model, dialect, body)
    assert caught.value.code() == code, caught.value.details()


def test_the_open_and_sampling_come_from_the_request(stub):
    body = chat_body(
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False, max_completion_tokens=77, temperature=0.5, top_p=0.9, seed=3,
        stop=["END"], n=2, logprobs=True, top_logprobs=3, stream=True,
        stream_options={"include_usage": True}, chat_template_kwargs={"enable_thinking": False},
    )  # fmt: skip
    out = call(stub, "qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, body, request_id="req-1", created=1700000000)
    assert out.prompt_tokens == len(out.prompt_token_ids) > 0
    o = out.open
    assert o.model == "qwen3" and o.request_id == "req-1"
    assert json.loads(o.tools_json) == TOOLS
    assert o.tool_choice.function_name == "get_weather" and o.parallel_tool_calls is False
    assert o.thinking is False and o.chat_template_kwargs["enable_thinking"] == "false"
    assert list(o.prompt_token_ids) == list(out.prompt_token_ids)[-512:]
    assert list(o.stop) == ["END"]
    w = o.wire
    assert (w.dialect, w.model, w.created, w.stream, w.include_usage, w.prompt_tokens) == (
        pb.WIRE_DIALECT_OPENAI_CHAT, "m", 1700000000, True, True, out.prompt_tokens,
    )  # fmt: skip
    assert w.response_id.startswith("chatcmpl-")
    s = out.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.seed, s.n, s.logprobs, s.top_logprobs) == (
        77, 0.5, 0.9, 3, 2, True, 3,
    )  # fmt: skip
    assert 151645 in s.stop_token_ids  # <|im_end|>, the model's end of turn
    assert out.constraint.triggers == ["<tool_call>"]  # a named function: BuildConstraint's answer


def test_no_constraint_without_a_forced_tool_or_a_json_format(stub):
    out = call(stub, "qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, chat_body())
    assert not out.HasField("constraint")
    body = {
        "messages": [USER],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": {"type": "object"}},
        },
    }
    out = call(stub, "qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, body)
    assert "%json" in out.constraint.lark_grammar  # fmt: skip


def test_the_python_clients_render_and_then_parse_with_the_open_unchanged(grpc_server, registry):
    import asyncio

    from parsetier_client import AsyncClient, Client

    body = {"model": "Qwen3", "messages": [CANONICAL[1]], "tools": TOOLS}
    tok = registry.get("qwen3").tokenizer
    output = tok.encode(
        "<think>\nLook it up.\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
        add_special_tokens=False,
    ).ids
    with Client(grpc_server.target, timeout=60) as client:
        rendered = client.render("qwen3", body, request_id="r-1")
        assert rendered.prompt_tokens == len(rendered.prompt_token_ids) and rendered.constraint is None
        stream = client.open(rendered.open)
        stream.send(output[:-1])
        stream.finish("stop", matched_stop=output[-1])
        deltas = list(stream.deltas())
        message = stream.final.message
        assert message.reasoning == "Look it up."
        calls = [(c.name, json.loads(c.arguments)) for c in message.tool_calls]
        assert calls == [("get_weather", {"city": "Paris"})]
        assert deltas
        with pytest.raises(TypeError):
            client.open(rendered.open, tools=TOOLS)

    async def run() -> list[int]:
        async with AsyncClient(grpc_server.target, timeout=60) as client:
            again = await client.render("qwen3", json.dumps(body), "openai_chat", request_id="r-1")
            return again.prompt_token_ids

    assert asyncio.run(run()) == rendered.prompt_token_ids


def test_a_long_render_and_every_constraint_run_off_the_event_loop(stub, monkeypatch):
    import threading

    from parsetier.service import render as render_module
    from parsetier.service import servicer

    threads: list[str] = []

    def recording(work):
        def run(*args):
            threads.append(threading.current_thread().name)
            return work(*args)

        return run

    monkeypatch.setattr(servicer, "render_request", recording(servicer.render_request))
    long = chat_body()
    long["messages"][1] = {"role": "user", "content": "Weather? " * 5000}  # a body past OFF_LOOP_BYTES
    call(stub, "qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, long)
    assert len(threads) == 1 and threads[0].startswith("parsetier-render")
    forced = chat_body(tool_choice="required")
    monkeypatch.setattr(render_module, "build_constraint", recording(render_module.build_constraint))
    assert call(stub, "qwen3", pb.WIRE_DIALECT_OPENAI_CHAT, forced).constraint.triggers
    assert len(threads) == 2 and threads[1].startswith("parsetier-render")


def test_a_templates_output_and_time_are_bounded(models):
    from parsetier.render.errors import TemplateLimit
    from parsetier.render.jinja import TemplateLimits

    body = {"messages": [USER], "chat_template": "{% for i in range(100000) %}{{ i }} {% endfor %}"}
    small = Renderer(RenderOptions(trust_request_templates=True, template=TemplateLimits(max_chars=1000)))
    with pytest.raises(TemplateLimit, match="passed 1000 characters"):
        render(small, models, "qwen3", "openai_chat", body)
    hasty = Renderer(RenderOptions(trust_request_templates=True, template=TemplateLimits(max_seconds=0.0)))
    with pytest.raises(TemplateLimit, match="took more than"):
        render(hasty, models, "qwen3", "openai_chat", body)
    assert len(render(Renderer(RenderOptions(trust_request_templates=True)), models, "qwen3", "openai_chat",
                      body).text) > 1000  # fmt: skip


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        (pb.WIRE_DIALECT_OPENAI_CHAT, chat_body()),
        (pb.WIRE_DIALECT_ANTHROPIC_MESSAGES, anthropic_body()),
        (pb.WIRE_DIALECT_OPENAI_RESPONSES, responses_body()),
        (pb.WIRE_DIALECT_OPENAI_COMPLETIONS, {"model": "m", "prompt": "Once upon a time", "max_tokens": 5}),
    ],
)
def test_the_rendered_open_parses_into_the_requests_own_api_body(stub, registry, dialect, body):
    """Render's Open, sent unchanged, gives the body the request's API returns, valid for the
    official SDK's own type, strictly."""
    import anthropic.types
    import openai.types
    import openai.types.chat
    import openai.types.responses

    types = {
        pb.WIRE_DIALECT_OPENAI_CHAT: openai.types.chat.ChatCompletion,
        pb.WIRE_DIALECT_ANTHROPIC_MESSAGES: anthropic.types.Message,
        pb.WIRE_DIALECT_OPENAI_RESPONSES: openai.types.responses.Response,
        pb.WIRE_DIALECT_OPENAI_COMPLETIONS: openai.types.Completion,
    }
    rendered = call(stub, "qwen3", dialect, body, request_id="r-7", created=1700000000)
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    if dialect == pb.WIRE_DIALECT_OPENAI_COMPLETIONS:
        text = " there was a"
    output = registry.get("qwen3").tokenizer.encode(text, add_special_tokens=False).ids
    request = pb.ParseOnceRequest(open=rendered.open, token_ids=output)
    from test_render_exact import retried

    final = retried(stub.ParseOnce, request).final
    parsed = json.loads(final.wire)
    types[dialect].model_validate(parsed, strict=True)
    if dialect != pb.WIRE_DIALECT_OPENAI_COMPLETIONS:
        assert "get_weather" in final.wire.decode() and "Paris" in final.wire.decode()
    assert str(rendered.prompt_tokens) in final.wire.decode()  # the usage counts the rendered prompt


def test_thinking_switched_off_reaches_the_template_and_the_open_alike(stub):
    """Each dialect's own "no thinking" renders Qwen3.5 without its opened <think> and tells the
    parser so (the prompt tail and Open.thinking agree)."""
    offs = [
        (
            pb.WIRE_DIALECT_OPENAI_CHAT,
            {"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}},
        ),
        (
            pb.WIRE_DIALECT_ANTHROPIC_MESSAGES,
            {"messages": [USER], "max_tokens": 5, "thinking": {"type": "disabled"}},
        ),
        (pb.WIRE_DIALECT_OPENAI_RESPONSES, {"input": "x", "reasoning": {"effort": "none"}}),
    ]
    for dialect, body in offs:
        out = call(stub, "qwen3.5", dialect, body, return_prompt_text=True)
        assert out.prompt_text.endswith("<think>\n\n</think>\n\n"), (dialect, out.prompt_text[-40:])
        assert out.open.thinking is False


def test_undecodable_render_bytes_are_invalid_argument(grpc_server):
    with grpc.insecure_channel(grpc_server.target) as channel:
        raw = channel.unary_unary("/parsetier.v1.ParserService/Render")
        with pytest.raises(grpc.RpcError) as caught:
            raw(b"\n\x05qwen3\x10\x01\x1a\xff\xff", timeout=30)  # request_json's length past the end
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
