"""Formats as data: the grammar schema (``schema.py``), its loading and validation (``load.py``),
and binding to a tokenizer's vocabulary (``bind.py``).

Everything that affects transitions is in this package and ``engine/machine.py``; a family needs
engine code only when it needs a new state kind or argument style, and then every format can use
it. Import the public names from here; the file format's constants (``STATE_KINDS``, ``ACTIONS``…)
are in ``schema.py``.
"""

from parsetier.engine.grammar.bind import BoundGrammar
from parsetier.engine.grammar.load import grammar_from_dict
from parsetier.engine.grammar.schema import (
    SENTINEL_BASE,
    SENTINEL_RE,
    Grammar,
    GrammarError,
    Preset,
    Rule,
    State,
    Transition,
)

__all__ = [
    "SENTINEL_BASE",
    "SENTINEL_RE",
    "BoundGrammar",
    "Grammar",
    "GrammarError",
    "Preset",
    "Rule",
    "State",
    "Transition",
    "grammar_from_dict",
]
