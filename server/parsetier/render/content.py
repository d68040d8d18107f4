"""Message content as templates read it: text.

APIs send content as a string or as a list of typed parts. Hugging Face templates read a string
(most skip a list, some iterate it): text parts are joined with newlines into one string, as
OpenAI-compatible servers do for string-content templates. A part the model cannot take (an image,
audio, a file) is INVALID_ARGUMENT naming its path: the server serves text models only.
"""

from __future__ import annotations

from typing import Any

from parsetier.render.errors import BadRequest
from parsetier.render.fields import join, kind

TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
MEDIA_PARTS = frozenset(
    {
        "image_url",
        "image",
        "input_image",
        "input_audio",
        "audio",
        "file",
        "input_file",
        "document",
        "video_url",
    }
)


def text_of(value: Any, path: str, text_parts: frozenset[str] = TEXT_PARTS) -> str | None:
    """A message's content as one string (None when absent)."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise BadRequest(path, f"expected a string or an array of content parts, got {kind(value)}")
    texts = []
    for i, part in enumerate(value):
        at = join(path, i)
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise BadRequest(at, f"expected a content part object, got {kind(part)}")
        part_type = part.get("type")
        if not isinstance(part_type, str):
            raise BadRequest(join(at, "type"), f"expected a string, got {kind(part_type)}")
        if part_type in text_parts:
            text = part.get("text")
            if not isinstance(text, str):
                raise BadRequest(join(at, "text"), f"expected a string, got {kind(text)}")
            texts.append(text)
        elif part_type in MEDIA_PARTS:
            raise BadRequest(join(at, "type"), f"{part_type!r} content: this model takes text only")
        else:
            raise BadRequest(join(at, "type"), f"unknown content part type {part_type!r}")
    return "\n".join(texts)
