"""Tool call ids derived from the request, never drawn at random.

A session's output must be byte-identical on any backend, so that a client that resumes a
session elsewhere (or retries a request) sees the same ids it already streamed to its user. The
rule, documented in docs/engine.md and docs/service.md:

    id = "chatcmpl-tool-" + hex(BLAKE2b-96(key=ID_KEY, seed || 0x00 || decimal(call_index)))

``seed`` is the request id when the caller gave one, else ``prompt:`` and the hex BLAKE2b-128 of
the prompt token ids (decimal, comma-separated: a fixed size, so a session never keeps a long
prompt), else (a session that gives neither) 128 random bits taken when the session opens
(``_random_bits``), prefixed with ``random:``: ids never repeat across requests, and
such a session's ids are not reproducible, so resuming it elsewhere needs a ``request_id``. Then
``#n`` for choice ``n`` > 0 of a request with several choices (``Open.choice_index``), so the
choices' calls never share an id;
``call_index`` is the call's position among the calls the model wrote (0, 1, ...). Formats whose
model writes its own ids (Kimi's ``functions.name:0``) keep those, unless an earlier call of the
session already has that id: then the derived id (the assembler keeps ids unique).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence

from parsetier.core_module import core as _core
from parsetier.messages import SessionOptions

ID_KEY = b"parsetier.v1.tool-call-id"
ID_PREFIX = "chatcmpl-tool-"


def call_id_seed(options: SessionOptions) -> str:
    """What a session's ids derive from: the request id, else the prompt, else fresh random bits
    (an empty seed would give every such request the same ids); for choice ``n`` > 0 of a request
    with several choices, followed by ``#n`` (choice 0 keeps the plain seed). Called once per
    session (``Session.call_id_seed``): an unseeded session draws here."""
    if options.request_id:
        seed = options.request_id
    elif options.prompt_token_ids:
        seed = "prompt:" + prompt_digest(options.prompt_token_ids)
    else:
        seed = "random:" + _random_bits()
    return f"{seed}#{options.choice_index}" if options.choice_index else seed


_RANDOM_BLOCK = 64
_random: list[str] = []
"""Random seeds' 128 bits (32 hex digits each) drawn ahead, ``_RANDOM_BLOCK`` per
``os.urandom`` call (a system call per seed was a tenth of an unseeded session's open). Emptied
in a forked child, so no two processes hand out the same bits."""
os.register_at_fork(after_in_child=_random.clear)


def _random_bits() -> str:
    """128 fresh random bits as 32 hex digits (``secrets.token_hex(16)``), never handed out twice
    (``list.pop`` is atomic: threads that find the list empty each draw a block of their own)."""
    try:
        return _random.pop()
    except IndexError:
        block = os.urandom(16 * _RANDOM_BLOCK).hex()
        _random.extend(block[at : at + 32] for at in range(32, len(block), 32))
        return block[:32]


def prompt_digest(prompt_token_ids: Sequence[int]) -> str:
    """The prompt's part of a seed: fixed-size, so what a session keeps does not grow with its
    prompt (the whole prompt is hashed once, when the session opens). The native core writes the
    decimal text without a ``str`` per id (a 4,000-id prompt: ~255 µs of ~280 here, most of a
    session's open); the expression below is the rule, and the fallback without the core."""
    if _core is not None:
        try:
            return hashlib.blake2b(_core.decimal_ids(prompt_token_ids), digest_size=16).hexdigest()
        except (OverflowError, TypeError):  # ids the core's u32 cannot hold: the rule decides
            pass
    return hashlib.blake2b(",".join(map(str, prompt_token_ids)).encode("ascii"), digest_size=16).hexdigest()


def id_maker(options: SessionOptions, seed: str | None = None) -> Callable[[int], str]:
    """The session's id function: call index → ``chatcmpl-tool-<24 hex>``. ``seed``: the
    session's ``call_id_seed``, drawn once (without it, one is drawn here)."""
    seeded = hashlib.blake2b(key=ID_KEY, digest_size=12)
    seeded.update((call_id_seed(options) if seed is None else seed).encode("utf-8"))
    seeded.update(b"\x00")

    def make(call_index: int) -> str:
        digest = seeded.copy()
        digest.update(str(call_index).encode("ascii"))
        return ID_PREFIX + digest.hexdigest()

    return make


_API_ID = re.compile(r"[A-Za-z0-9_-]+")


def api_call_id(call_id: str, prefix: str) -> str:
    """A session's call id in a public API's convention (``call_…`` OpenAI, ``toolu_…``
    Anthropic): a derived id keeps its hex under the API's prefix; an id the model wrote is kept
    when the API's id alphabet allows it (letters, digits, ``_`` and ``-``), else becomes the
    prefix and a hash of it. Deterministic, so a resumed session shows the same ids."""
    if call_id.startswith(ID_PREFIX):
        return prefix + call_id[len(ID_PREFIX) :]
    if _API_ID.fullmatch(call_id):
        return call_id
    return prefix + hashlib.blake2b(call_id.encode("utf-8"), key=ID_KEY, digest_size=12).hexdigest()


def item_id(prefix: str, response_id: str, index: int) -> str:
    """The id of a response's ``index``-th output item (Responses' ``rs_`` / ``msg_`` / ``fc_``),
    derived from the response id the gateway chose."""
    digest = hashlib.blake2b(f"{response_id}\x00{index}".encode(), key=ID_KEY, digest_size=12)
    return prefix + digest.hexdigest()
