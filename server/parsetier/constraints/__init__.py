"""Constrained decoding from the format files: the same grammar that parses a model's output
derives the constraint an engine decodes it under.

Sans-IO, like the engine: ``derive(bound_grammar, ConstraintRequest(...))`` returns one
``ir.Root``, rendered as an xgrammar structural tag (``to_structural_tag``) and an llguidance
Lark grammar (``to_lark``). ``shape`` reads a format's call shape off its states; ``build`` applies
the request's tool options; ``ir`` holds the small tree both renderings come from. See
docs/constrained-decoding.md.
"""

from parsetier.constraints.build import ConstraintRequest, InvalidTool, derive
from parsetier.constraints.ir import Root, to_lark, to_structural_tag
from parsetier.constraints.shape import Underivable

__all__ = [
    "ConstraintRequest",
    "InvalidTool",
    "Root",
    "Underivable",
    "derive",
    "to_lark",
    "to_structural_tag",
]
