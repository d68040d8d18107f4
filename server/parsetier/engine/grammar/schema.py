"""The format file's schema: what a validated grammar is made of.

A format file declares *terminals* (literal marker texts), *states* (each of a kind that says what
its text means) and *transitions* (state × terminal → actions + next state); ``[[presets]]`` name
the models that speak it. These frozen dataclasses are the grammar as data, after validation
(``load.py``) and before binding to a vocabulary (``bind.py``); the constants are the vocabulary
of the file format itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

STATE_KINDS = frozenset({"content", "reasoning", "skip", "capture", "value", "json", "envelope", "elements"})
"""content/reasoning: text is shown as such; skip: text is dropped; capture: text is collected
for the next transition (a tool name, a parameter key, a header); value: text is one parameter
value of the current call; json: text is the call's arguments as one JSON value; envelope: text is
a JSON object carrying the name and the arguments (``{"name": …, "arguments": …}``); elements:
text is the call's arguments as one element per argument, tags starting with the ``tag``
terminal (MiniMax-M3's ``]<]minimax[>[<city>Paris]<]minimax[>[</city>``)."""

ACTIONS = frozenset({"call_begin", "call_end", "param_begin", "param_end"})
DIALECTS = frozenset({"json", "gemma", "python", "python_json", "keyed"})
ENVELOPE_NAME_KEYS = frozenset({"name", "tool_name"})
ENVELOPE_ARGUMENT_KEYS = frozenset({"arguments", "parameters", "args"})
ENVELOPE_ID_KEYS = frozenset({"id", "tool_call_id"})
"""The keys an envelope reads (``engine/readers/envelope.py``, which skips a string-valued id
member); ``keys`` picks the written ones."""
UNESCAPES = frozenset({"none", "xml"})

SENTINEL_BASE = 0xF0000
"""Token-id terminals travel through the text as code points from Supplementary Private Use
Area-A, one per bound added token; real model text essentially never contains them."""

SENTINEL_RE = re.compile("[\U000f0000-\U000ffffd]")


class GrammarError(ValueError):
    """A format file that cannot work; the message names the file's offending part."""


@dataclass(frozen=True, slots=True)
class Rule:
    """For capture states: when the captured text matches, use its groups and go to ``next``."""

    pattern: re.Pattern[str]
    next: str
    actions: tuple[str, ...] = ()
    write: str | None = None
    """The text a derived constraint writes for this rule (Harmony's header
    ``<|channel|>commentary to=functions.{name} <|constrain|>json``), ``{name}`` standing for the
    tool's name. The parser never reads it; the constraint checks that the rule reads it back."""


@dataclass(frozen=True, slots=True)
class Transition:
    next: str
    actions: tuple[str, ...] = ()
    keep: bool = False
    """The terminal's text is not consumed: the next state reads it again (Llama's bare ``{``)."""
    follow: tuple[str, ...] = ()
    """If set, the terminal counts only where, after optional whitespace, one of these terminals
    (or, for ``"end"``, the end of the output) follows; elsewhere its text is the state's own text.
    For closers that may also be data: ``</function>`` inside a parameter value is text unless the
    call's structure goes on after it. The machine waits (holds back) only until it can tell."""
    turn_close: str = ""
    """If set (``ends_turn.close``), the terminal opens calls only where they end the model's turn:
    where, after each ``turn_close`` closer, only whitespace, the terminal again, or the end of the
    output follows, and no ``turn_unless`` terminal comes before. Elsewhere (the reasoning goes on
    after the block, or closes) its text is the state's own text: a call the model describes in its
    reasoning is not executed. The machine holds from the terminal on until it can tell."""
    turn_unless: tuple[str, ...] = ()
    """``ends_turn.unless``: terminals that, met before the decision, make the terminal text."""


@dataclass(frozen=True, slots=True)
class State:
    name: str
    kind: str
    on: Mapping[str, Transition]
    """terminal name → transition."""
    done: Transition | None = None
    """json/envelope states: where to go once the JSON value is complete (else wait for a terminal)."""
    rules: tuple[Rule, ...] = ()
    """capture states: tried in order on the captured text when a transition leaves the state."""
    allow_list: bool = False
    """envelope states: the JSON may be a list of call objects (several calls in one envelope)."""
    text_next: str | None = None
    """On the first non-whitespace text that is not a terminal, move to this state (a state that
    only looks at how the output *starts*, like Llama's bare JSON call)."""
    dialect: str = "json"
    """json states: ``json``, or ``gemma`` (Gemma 4's unquoted keys and ``<|"|>`` strings); envelope
    states: ``json``, ``python`` (pythonic call lists ``[f(a=1), g()]``, Llama 4) or ``python_json``
    (the same, JSON's true/false/null accepted as literals: LFM2) or ``keyed`` (JSON objects whose
    one key is the tool's name: ``{"f": {…}}``, Apertus)."""
    end: Transition | None = None
    """What the end of the output means here when the model stopped by itself (finish ``stop``):
    GLM's ``<tool_call>NAME`` then the stop token is a call without arguments. Not used when the
    output was cut (``length``/``abort``): a capture cut short is not known to be whole."""
    item: str = "item"
    """elements states: the name of an array's child elements (``<item>``), for arrays the
    schema does not type."""
    unescape: str = "none"
    """capture states: ``xml`` decodes XML character references (``&amp;`` ``&quot;`` ``&#38;``…)
    in the rule's groups, for names and keys written as attribute values (Kimi K3's ``key="q&amp;a"``)."""
    keys: tuple[str, str] = ("name", "arguments")
    """envelope states: the keys the model writes for the name and the arguments (Cohere's
    ``tool_name`` / ``parameters``). The parser reads either spelling; a derived constraint writes
    these."""
    id_key: str = ""
    """envelope states: an id member a derived constraint writes first, the call's number as a
    string (Cohere's ``"tool_call_id": "0"``); the parser skips it and derives the ids."""
    write_list: bool = False
    """envelope states with ``list``: a derived constraint writes the calls as one JSON list
    (Cohere's ``[{…}, {…}]``), as the template does, rather than one object per call."""
    markup: bool = False
    """skip states: the state's text is markup the format consumes (the id Mistral numbers a call
    with after ``[CALL_ID]``, a message to another recipient). Without it only whitespace is: any
    other text a skip state meets is the model's, shown as content."""
    lead: str = ""
    """capture states: the text a derived constraint writes first when the output enters the
    state through a terminal (Harmony's role ``assistant`` after ``<|start|>``); where the output
    starts in the state, the prompt wrote it."""


@dataclass(frozen=True, slots=True)
class Preset:
    """A model that speaks a format: one ``[[presets]]`` table of the format file."""

    name: str
    tokenizer: str | None
    """A packaged vocabulary's key, or None: no package ships this family's vocabulary, so the
    preset serves only once the user configures the model's tokenizer directory."""
    description: str = ""
    thinking: bool | None = None
    """The chat template's default thinking switch, used when a request leaves it unset."""
    serves: tuple[str, ...] = ()
    """Hugging Face repos whose output this preset parses (informational, shown by ListModels)."""
    eos_token_ids: tuple[int, ...] = ()
    """Ids that end the output, for vocabularies shipped without a generation_config.json or
    tokenizer_config.json that would name them (see ``parsetier.eos``)."""


@dataclass(frozen=True, slots=True)
class Grammar:
    """A format, validated but not yet bound to a vocabulary."""

    name: str
    description: str
    terminals: Mapping[str, str]
    states: Mapping[str, State]
    initial: str
    thinking_off: str | None = None
    """Start state when the request turns thinking off (and the prompt does not say)."""
    thinking_on: str | None = None
    """Start state when the request turns thinking on (and the prompt does not say)."""
    prompt: Mapping[str, str] = field(default_factory=dict)
    """terminal name → start state, decided by the last of these terminals found in the prompt."""
    value_trim: str = "newline"
    """How parameter values are trimmed: ``newline`` drops one leading and one trailing newline."""
    tool_call_id: str = "derived"
    """``derived`` (``chatcmpl-tool-<hex>`` from the request, see ``parsetier.engine.call_ids``) or
    ``format`` (the id the model wrote, e.g. Kimi's)."""
    presets: tuple[Preset, ...] = ()
    """Models that speak this format (the file's ``[[presets]]`` tables)."""
    token_suffix: str = ""
    """A regex: an added token spelled like a marker with this suffix before its closing ``>``
    (Hunyuan Hy3's ``<tool_calls:opensource>``) stands for that marker when the vocabulary has
    no token spelled exactly like it. The suffix is read off the vocabulary, never assumed."""

    @property
    def has_reasoning(self) -> bool:
        return any(s.kind == "reasoning" for s in self.states.values())

    @property
    def has_tool_calls(self) -> bool:
        return any(s.kind in ("json", "envelope", "value", "elements") for s in self.states.values())
