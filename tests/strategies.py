"""Hypothesis strategies for generated assistant messages, and their rendering to model output.

A generated message is the *expected* parse: reasoning, content and calls with JSON arguments.
Rendering turns it into the text the model would write (Hermes JSON envelopes for Qwen3, XML
parameters for Qwen3-Coder) and then into token ids the way the model emits them: the four Qwen3
markers as their special ids, everything else as ordinary tokens (so marker look-alikes in prose
stay text). The tests then check that parsing the ids gives back exactly the generated message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from engine_helpers import MARKER_TEXTS, QWEN3, enc
from family_support import plain

# Characters NFC leaves alone (the Qwen3 tokenizer normalizes to NFC), with multi-byte UTF-8
# sequences of every length: 2 bytes (é, ß), 3 bytes (CJK, ☃), 4 bytes (emoji, 𝄞).
_CHARS = "abcxyzABZ019 _-.,:;!?'\"\\/{}[]()<>=|#\n\t" + "éßñü" + "你好世界中文字" + "☃€→" + "🎉👍🚀😀𝄞"

LOOKALIKES = (
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool",
    "_call>",
    "</think",
    "<|im_end|>",
    "<|im_start|>",
    "<function=f>",
    "<parameter=x>",
    '{"name": "f", "arguments": {}}',
)
"""Marker texts and fragments that, written as ordinary text, must stay text."""

_MARKER_RE = re.compile("|".join(re.escape(m) for m in MARKER_TEXTS))

XML_TAGS = ("</parameter>", "<parameter=", "</function>", "<function=")
"""Qwen3-Coder's literal (non-token) tags: a value cannot contain them, the format has no escape."""


def model_ids(text: str) -> list[int]:
    """Ids as the model emits them: the four Qwen3 markers as special ids, all else as text."""
    ids: list[int] = []
    pos = 0
    for m in _MARKER_RE.finditer(text):
        ids += plain(QWEN3, text[pos : m.start()]) + enc(m.group(0))
        pos = m.end()
    return ids + plain(QWEN3, text[pos:])


def text(min_size: int = 0, max_size: int = 40, lookalikes: bool = True) -> st.SearchStrategy[str]:
    """Prose or a JSON string value: characters and, optionally, marker look-alikes."""
    atoms = st.sampled_from(_CHARS)
    if lookalikes:
        atoms = st.one_of(atoms, atoms, atoms, st.sampled_from(LOOKALIKES))
    return st.lists(atoms, min_size=min_size, max_size=max_size).map("".join)


NAMES = st.one_of(
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True),
    st.sampled_from(["get_weather", "search.web", "run-code", "查询天气", "emoji_🚀"]),
)

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    text(max_size=20),
)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    return st.recursive(
        _SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(text(max_size=8, lookalikes=False), inner, max_size=4),
        ),
        max_leaves=max_leaves,
    )


ARGUMENTS = st.dictionaries(text(min_size=1, max_size=10, lookalikes=False), json_values(), max_size=5)


@dataclass
class Call:
    name: str
    arguments: dict[str, Any]
    style: str = "name_first"
    """Hermes envelope shape: ``name_first``, ``args_first`` or ``parameters`` (the key's name)."""

    @property
    def arguments_text(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class Generated:
    """An expected message and how it is written out."""

    reasoning: str | None
    """None: the model wrote no ``<think>`` block."""
    content: str
    calls: list[Call] = field(default_factory=list)
    block: str = "each"
    """How calls are wrapped: ``each`` in its own ``<tool_call>`` block, or all in one block as a
    JSON ``list`` or as objects one after another (``objects``)."""

    def expected_reasoning(self) -> str:
        return (self.reasoning or "").strip()

    def expected_content(self) -> str:
        return self.content.strip()


@st.composite
def hermes_messages(draw: st.DrawFn, lookalikes: bool = True, max_calls: int = 3) -> Generated:
    reasoning = draw(st.none() | text(lookalikes=lookalikes))
    content = draw(text(lookalikes=lookalikes))
    calls = [
        Call(
            draw(NAMES),
            draw(ARGUMENTS),
            draw(st.sampled_from(["name_first", "name_first", "args_first", "parameters"])),
        )
        for _ in range(draw(st.integers(0, max_calls)))
    ]
    block = draw(st.sampled_from(["each", "each", "list", "objects"]))
    return Generated(reasoning, content, calls, block)


def _envelope(call: Call) -> str:
    name = json.dumps(call.name, ensure_ascii=False)
    if call.style == "args_first":
        return f'{{"arguments": {call.arguments_text}, "name": {name}}}'
    key = "parameters" if call.style == "parameters" else "arguments"
    return f'{{"name": {name}, "{key}": {call.arguments_text}}}'


def render_hermes(msg: Generated) -> str:
    """The Qwen3 chat template's rendering of an assistant turn (without ``<|im_end|>``)."""
    out = ""
    if msg.reasoning is not None:
        out += f"<think>\n{msg.reasoning}\n</think>\n\n"
    out += msg.content
    bodies = [_envelope(call) for call in msg.calls]
    if msg.block == "list" and bodies:
        bodies = ["[" + ", ".join(bodies) + "]"]
    elif msg.block == "objects" and bodies:
        bodies = ["\n".join(bodies)]
    for i, body in enumerate(bodies):
        out += ("\n\n" if i == 0 else "\n") + f"<tool_call>\n{body}\n</tool_call>"
    return out


def hermes_ids(msg: Generated, lookalikes: bool = True) -> list[int]:
    """Prose look-alikes as plain tokens when ``lookalikes``; JSON always as the model emits it."""
    if not lookalikes:
        return model_ids(render_hermes(msg))
    ids: list[int] = []
    if msg.reasoning is not None:
        ids += enc("<think>\n") + plain(QWEN3, msg.reasoning) + enc("\n</think>\n\n")
    ids += plain(QWEN3, msg.content)
    tail = render_hermes(Generated(None, "", msg.calls, msg.block))
    return ids + model_ids(tail)


# ---------------------------------------------------------------------------------------------- coder
XML_TYPES = ("string", "integer", "number", "boolean", "null", "object", "array", "untyped")


def _xml_safe(value: str) -> bool:
    return not any(tag in value for tag in XML_TAGS) and "</tool_call>" not in value


_XML_TEXT = text(max_size=30).filter(_xml_safe)


def _typed(kind: str) -> st.SearchStrategy[Any]:
    if kind in ("string", "untyped"):
        return _XML_TEXT
    if kind == "integer":
        return st.integers(-(10**9), 10**9)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=64)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "object":
        return st.dictionaries(text(max_size=6, lookalikes=False), json_values(6), max_size=3).filter(
            lambda v: _xml_safe(json.dumps(v, ensure_ascii=False))
        )
    return st.lists(json_values(4), max_size=3).filter(lambda v: _xml_safe(json.dumps(v, ensure_ascii=False)))


@dataclass
class XmlCall:
    name: str
    params: list[tuple[str, str, Any]]
    """(key, schema type, value); ``untyped`` keys are not in the schema."""

    @property
    def arguments(self) -> dict[str, Any]:
        return {k: v for k, _, v in self.params}

    def schema(self) -> dict[str, Any]:
        props = {k: {"type": t} for k, t, _ in self.params if t != "untyped"}
        return {"type": "object", "properties": props}


_KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)


@st.composite
def xml_calls(draw: st.DrawFn) -> XmlCall:
    name = draw(st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True))
    keys = draw(st.lists(_KEYS, unique=True, max_size=4))
    params = []
    for key in keys:
        kind = draw(st.sampled_from(XML_TYPES))
        params.append((key, kind, draw(_typed(kind))))
    return XmlCall(name, params)


def xml_value_text(value: Any) -> str:
    """How the model writes a value: strings raw, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_xml_call(call: XmlCall) -> str:
    params = "".join(f"<parameter={k}>\n{xml_value_text(v)}\n</parameter>\n" for k, _, v in call.params)
    return f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"


@dataclass
class GeneratedXml:
    reasoning: str | None
    content: str
    calls: list[XmlCall] = field(default_factory=list)


@st.composite
def coder_messages(draw: st.DrawFn, max_calls: int = 3, lookalikes: bool = True) -> GeneratedXml:
    """Prose never holds ``<function=``: it has no token id, and the format reads it as a call opener
    at the start of the answer or of a line (models do skip ``<tool_call>``)."""
    prose = text(lookalikes=lookalikes).filter(lambda s: "<function=" not in s)
    reasoning = draw(st.none() | prose)
    content = draw(prose)
    calls = draw(st.lists(xml_calls(), max_size=max_calls))
    return GeneratedXml(reasoning, content, calls)


def coder_ids(msg: GeneratedXml) -> list[int]:
    """Prose look-alikes as plain tokens; calls as the model emits them (markers as ids)."""
    ids: list[int] = []
    if msg.reasoning is not None:
        ids += enc("<think>\n") + plain(QWEN3, msg.reasoning) + enc("\n</think>\n\n")
    ids += plain(QWEN3, msg.content)
    for i, call in enumerate(msg.calls):
        ids += plain(QWEN3, "\n\n" if i == 0 else "\n") + model_ids(render_xml_call(call))
    return ids


def render_coder(msg: GeneratedXml) -> str:
    out = f"<think>\n{msg.reasoning}\n</think>\n\n" if msg.reasoning is not None else ""
    out += msg.content
    for i, call in enumerate(msg.calls):
        out += ("\n\n" if i == 0 else "\n") + render_xml_call(call)
    return out
