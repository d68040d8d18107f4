"""The one error every tokenizer source raises when it cannot deliver a vocabulary."""

from __future__ import annotations

from parsetier.status import Code, StatusError


class TokenizerUnavailable(StatusError, RuntimeError):
    """The source is unknown, or the package, file or optional dependency that holds or converts its
    data is missing; the message says what to install or configure. Configured but not installed
    here: the operator's to fix, not the caller's request (FAILED_PRECONDITION)."""

    code = Code.FAILED_PRECONDITION

    @property
    def message(self) -> str:
        return f"model's tokenizer is not available: {self}"
