"""The one error every tokenizer source raises when it cannot deliver a vocabulary."""

from __future__ import annotations


class TokenizerUnavailable(RuntimeError):
    """The source is unknown, or the package, file or optional dependency that holds or converts its
    data is missing; the message says what to install or configure."""
