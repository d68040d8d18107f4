"""Render's refusals, each carrying its status (``parsetier.status``): nothing a client sends
becomes INTERNAL."""

from __future__ import annotations

from parsetier.status import Code, StatusError


class BadRequest(StatusError):
    """The request body is malformed or asks what cannot be rendered; the message names the JSON
    path (``messages[2].content[0].type``)."""

    code = Code.INVALID_ARGUMENT

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path


class TemplateRaised(StatusError):
    """The chat template refused the conversation (its own ``raise_exception``: ``refused``) or
    failed on it (a type error on a value it did not expect)."""

    code = Code.INVALID_ARGUMENT

    def __init__(self, message: str, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


class TemplateLimit(StatusError):
    """The template's output (or the time it took) passed the server's bound."""

    code = Code.RESOURCE_EXHAUSTED


class PromptTooLong(StatusError):
    """The rendered prompt has more tokens than the server's limit."""

    code = Code.INVALID_ARGUMENT


class NoTemplate(StatusError):
    """The model has no chat template on this server."""

    code = Code.FAILED_PRECONDITION


class UntrustedTemplate(StatusError):
    """A request brought its own chat template and the server does not run request templates."""

    code = Code.PERMISSION_DENIED
