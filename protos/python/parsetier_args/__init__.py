"""Command-line plumbing shared by the server's ``parsetier serve`` and the client's
``parsetier-client replay`` and ``parsetier-client health``: errors as one line that names the
flag, and argument types that check their value where it is given.

A package of its own, beside ``parsetier_api``, that imports only the standard library: the server
(``parsetier``) and the client (``parsetier_client``) both use it, and neither imports the other.

argparse's own errors print the usage block first; in a container log or a systemd journal that is
noise around the one line that matters, so ``OneLineParser`` prints only ``prog: problem``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are a single line (and exit status 2, as argparse's)."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, message.replace("argument ", "", 1))


class UsageError(Exception):
    """A bad flag value found after parsing (a file that does not parse, say): ``--flag: problem``."""

    def __init__(self, flag: str, problem: str) -> None:
        super().__init__(f"{flag}: {problem}")


def fail(prog: str, message: str, status: int = 2) -> NoReturn:
    print(f"{prog}: {' '.join(str(message).split())} (see {prog} --help)", file=sys.stderr)
    sys.exit(status)


def _read_json(value: str) -> Any:
    """Inline JSON when ``value`` looks like JSON, else the JSON in the file it names."""
    text = value.strip()
    if text[:1] in ("[", "{"):
        source = "inline JSON"
    else:
        path = Path(value)
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"{value!r} is neither inline JSON nor a readable file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise argparse.ArgumentTypeError(f"cannot read {value!r}: {exc}") from None
        source = f"file {value!r}"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{source} is not valid JSON: {exc}") from None


def tools_argument(value: str) -> str:
    """``--tools``: a JSON array of OpenAI tools, inline or in a file; the array's JSON text."""
    tools = _read_json(value)
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise argparse.ArgumentTypeError('must be a JSON array of tool objects ([{"type": "function", ...}])')
    return json.dumps(tools)


def token_ids_argument(value: str) -> list[int]:
    """A JSON array of token ids (non-negative integers), inline or in a file."""
    ids = _read_json(value)
    if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise argparse.ArgumentTypeError("must be a JSON array of non-negative integers")
    return ids


def _float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None


def _integer(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None


def positive_float(value: str) -> float:
    number = _float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return number


def non_negative_float(value: str) -> float:
    """Seconds or milliseconds where 0 means "none": 0 or more, finite."""
    number = _float(value)
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return number


def port_number(value: str) -> int:
    """A TCP port, 0 (pick a free one) to 65535."""
    number = _integer(value)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port, 0 to 65535, got {value}")
    return number


def count(value: str) -> int:
    """A limit or a number of things: 1 or more (0 would refuse everything)."""
    number = _integer(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return number
