"""Conversions of vocabularies that are not in HF ``tokenizer.json`` form into a ``tokenizers.Tokenizer``.

* SentencePiece models (``tokenizer.model``) and tiktoken rank files (Kimi's ``tiktoken.model``)
  go through ``transformers`` (its slow-to-fast converters), an optional dependency:
  ``pip install 'parsetier[convert]'``. Serving a ``tokenizer.json`` never needs it.
* Rank tables that ``transformers`` has no converter for: quicktok's binary o200k_harmony (gpt-oss)
  and Mistral's tekken, whose control tokens sit *below* the ranks (ids shifted by the number of
  control tokens) and partly unnamed in the file. Both become the byte-level BPE that tiktoken's
  algorithm is equivalent to, here.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import shutil
import struct
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from parsetier.tokenizers.errors import TokenizerUnavailable

_CONVERT_EXTRA = "pip install 'parsetier[convert]'  (transformers, sentencepiece, tiktoken; no torch)"


def _transformers() -> Any:
    try:
        # transformers warns once that torch is absent: true, and irrelevant for tokenizers.
        logging.getLogger("transformers").setLevel(logging.ERROR)
        import transformers
    except ImportError:
        raise TokenizerUnavailable(
            f"converting this tokenizer needs transformers: {_CONVERT_EXTRA}"
        ) from None
    return transformers


# ------------------------------------------------------------------------------------ SentencePiece
def sentencepiece_to_tokenizer(model_file: Path, config: Mapping[str, Any] | None = None) -> Tokenizer:
    """A SentencePiece ``.model`` through ``transformers``' converter: the tokenizer class the
    directory's ``tokenizer_config.json`` names when ``transformers`` has it, else Llama's (the
    byte-fallback BPE layout of Llama 2 / Mistral v0.x)."""
    transformers = _transformers()
    config = dict(config or {})
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(model_file, Path(tmp) / "tokenizer.model")
        if config:
            (Path(tmp) / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        name = str(config.get("tokenizer_class") or "LlamaTokenizer").removesuffix("Fast")
        cls = getattr(transformers, name, None) or transformers.LlamaTokenizer
        try:
            hf = cls.from_pretrained(tmp, legacy=False)
        except ImportError as exc:
            raise TokenizerUnavailable(f"{model_file}: {exc}; {_CONVERT_EXTRA}") from None
    backend = getattr(hf, "backend_tokenizer", None) or getattr(hf, "_tokenizer", None)
    if not isinstance(backend, Tokenizer) or backend.get_vocab_size() < 2:
        raise TokenizerUnavailable(f"{model_file}: transformers could not convert this SentencePiece model")
    return backend


# ------------------------------------------------------------------------------------ tiktoken
KIMI_PATTERN = "|".join(
    [
        r"[\p{Han}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)
"""The pre-tokenizer of Kimi K2's tiktoken vocabulary (its tokenization code, not its config,
holds it); a ``tokenizer_config.json`` key ``pat_str`` overrides it for other tiktoken models."""


def tiktoken_to_tokenizer(model_file: Path, config: Mapping[str, Any]) -> Tokenizer:
    """A tiktoken rank file plus its ``tokenizer_config.json`` (Kimi's form) through
    ``transformers``' ``TikTokenConverter``. The config's ``added_tokens_decoder`` places the
    special tokens after the ranks; a gap is filled with reserved placeholders, and every listed
    token is checked to have landed on its id."""
    _transformers()
    from transformers.convert_slow_tokenizer import TikTokenConverter

    try:
        base = len(TikTokenConverter.load_tiktoken_bpe(str(model_file)))
    except ValueError as exc:
        raise TokenizerUnavailable(f"{model_file}: {exc}; {_CONVERT_EXTRA}") from None
    added: dict[int, str] = {}
    for tid, entry in (config.get("added_tokens_decoder") or {}).items():
        added[int(tid)] = entry["content"] if isinstance(entry, Mapping) else str(entry)
    low = [tid for tid in added if tid < base]
    if low:
        raise TokenizerUnavailable(f"{model_file}: added token ids {low[:5]} fall inside the rank table")
    top = max(added, default=base - 1)
    extras = [added.get(i, f"<|reserved_token_{i}|>") for i in range(base, top + 1)]
    pattern = str(config.get("pat_str") or KIMI_PATTERN)
    tok = TikTokenConverter(
        vocab_file=str(model_file), pattern=pattern, extra_special_tokens=extras
    ).converted()
    for tid, text in added.items():
        if tok.token_to_id(text) != tid:
            raise TokenizerUnavailable(f"{model_file}: added token {text!r} did not land on id {tid}")
    return tok


# ------------------------------------------------------------------------------------ rank tables
@functools.cache
def _byte_to_unicode() -> dict[int, str]:
    """The GPT-2 byte -> printable character map that the ByteLevel pre-tokenizer/decoder use."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def bytes_to_symbol(data: bytes) -> str:
    table = _byte_to_unicode()
    return "".join(table[b] for b in data)


def _merges_from_ranks(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """BPE merges recovered from a rank table: every split of a token into two lower-ranked
    in-vocabulary halves, at the token's rank (all splits, because inside a longer pre-token the
    halves can have formed differently than on the token alone)."""
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            lr, rr = ranks.get(left), ranks.get(right)
            if lr is not None and rr is not None and lr < rank and rr < rank:
                merges.append((rank, lr, rr, left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def bpe_from_ranks(
    ranks: Mapping[bytes, int], pattern: str, specials: Mapping[str, int], id_offset: int = 0
) -> Tokenizer:
    """A byte-level BPE ``Tokenizer`` equivalent to a tiktoken encoding; ``id_offset`` shifts
    every rank (tekken's control tokens take the first ids). Specials are entered in the model
    vocabulary at their ids, so ``tokenizers`` does not renumber them."""
    vocab = {bytes_to_symbol(tok): rank + id_offset for tok, rank in ranks.items()}
    clash = set(vocab) & set(specials)
    if clash:
        raise ValueError(f"special tokens collide with byte-level vocab entries: {sorted(clash)[:5]}")
    vocab.update(specials)
    merges = [(bytes_to_symbol(a), bytes_to_symbol(b)) for a, b in _merges_from_ranks(ranks)]
    model = models.BPE(vocab=vocab, merges=merges, ignore_merges=True, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    add_specials(tok, specials)
    return tok


def add_specials(tok: Tokenizer, specials: Mapping[str, int]) -> None:
    """Add special tokens and check that each landed on its intended id."""
    ordered = sorted(specials.items(), key=lambda kv: kv[1])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s, _ in ordered])
    for content, want in ordered:
        got = tok.token_to_id(content)
        if got != want:
            raise ValueError(f"special token {content!r} landed on id {got}, expected {want}")


def add_config_tokens(tok: Tokenizer, config: Mapping[str, Any]) -> None:
    """Add the ``added_tokens_decoder`` entries of a ``tokenizer_config.json`` that ``tok`` lacks,
    each on its stated id (as transformers does when it loads the pair); an entry whose id is
    taken by another token, or that cannot land on its id, is an error, never a guess."""
    entries = sorted(((int(i), e) for i, e in (config.get("added_tokens_decoder") or {}).items()))
    for tid, entry in entries:
        content = entry["content"]
        have = tok.id_to_token(tid)
        if have is not None:
            if have != content:
                raise ValueError(f"added token {content!r}: id {tid} is {have!r} in the vocabulary")
            continue
        token = AddedToken(
            content, special=bool(entry.get("special")), normalized=bool(entry.get("normalized"))
        )
        (tok.add_special_tokens if token.special else tok.add_tokens)([token])
        if tok.token_to_id(content) != tid:
            raise ValueError(
                f"added token {content!r} landed on id {tok.token_to_id(content)}, expected {tid}"
            )


# o200k's pre-tokenizer (same regex for o200k_base and o200k_harmony).
O200K_PATTERN = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)


class _Fields:
    """A file's bytes read in order: little-endian ``struct`` fields and byte strings; ``end`` checks
    that nothing is left (quicktok's files are a count, then that many records)."""

    def __init__(self, path: Path) -> None:
        self.path, self.data, self.pos = path, path.read_bytes(), 0

    def read(self, fmt: str) -> tuple[int, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values

    def take(self, length: int) -> bytes:
        self.pos += length
        return self.data[self.pos - length : self.pos]

    def end(self, records: str) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{self.path}: trailing bytes after {records}")


def read_quicktok_vocab(path: Path) -> dict[bytes, int]:
    """quicktok ``.vocab``: u32 count, then per token ``u16 length, bytes, u32 rank`` (little-endian)."""
    fields = _Fields(path)
    (count,) = fields.read("I")
    ranks: dict[bytes, int] = {}
    for _ in range(count):
        (length,) = fields.read("H")
        token = fields.take(length)
        (ranks[token],) = fields.read("I")
    fields.end(f"{count} vocab records")
    return ranks


def read_quicktok_special(path: Path) -> dict[str, int]:
    """quicktok ``.special``: u32 count, then per token ``u32 id, u16 length, utf-8 bytes``."""
    fields = _Fields(path)
    (count,) = fields.read("I")
    specials: dict[str, int] = {}
    for _ in range(count):
        tid, length = fields.read("IH")
        specials[fields.take(length).decode("utf-8")] = tid
    fields.end(f"{count} special records")
    return specials


def harmony_to_tokenizer(special_path: Path) -> Tokenizer:
    """o200k_harmony: the o200k ranks plus the 1091 Harmony specials (199998..201087)."""
    ranks = read_quicktok_vocab(special_path.with_name("o200k.vocab"))
    by_id: dict[int, str] = {}
    for name, tid in read_quicktok_special(special_path).items():
        # 200018 is listed twice (as in tiktoken): <|endofprompt|> from o200k_base and a reserved
        # placeholder. A token id has one string; keep the real name, as HF's gpt-oss tokenizer does.
        if tid not in by_id or by_id[tid].startswith("<|reserved_"):
            by_id[tid] = name
    return bpe_from_ranks(ranks, O200K_PATTERN, {name: tid for tid, name in by_id.items()})


# Control-token names the tekken files of mistral-common 1.13.1 leave unnamed (they only name ids 0..19
# and fill the rest with ``<SPECIAL_n>``). The ids are those of the v11+/v13 tokenizers, confirmed by the
# canitoolcall fixtures' output ids against their raw text; the names are mistral-common's own.
TEKKEN_EXTRA_NAMES: dict[int, str] = {32: "[ARGS]", 33: "[CALL_ID]", 34: "[THINK]", 35: "[/THINK]"}

# mistral-common's default control tokens for tekken files that carry no ``special_tokens`` list.
_TEKKEN_DEFAULT_SPECIALS: Sequence[str] = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
    "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
)  # fmt: skip


def tekken_to_tokenizer(path: Path) -> Tokenizer:
    """Tekken: a tiktoken rank table whose ids are shifted up by the number of control tokens;
    the vocabulary is ``default_vocab_size`` ids: the control ids, then the lowest ranks."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    config = raw["config"]
    num_special = int(config.get("default_num_special_tokens", 1000))
    vocab_size = int(config.get("default_vocab_size", len(raw["vocab"]) + num_special))
    inner = vocab_size - num_special
    ranks: dict[bytes, int] = {}
    for entry in raw["vocab"][:inner]:
        ranks[base64.b64decode(entry["token_bytes"])] = int(entry["rank"])
    names: dict[int, str] = {}
    listed = raw.get("special_tokens")
    if listed:
        for entry in listed:
            names[int(entry["rank"])] = entry["token_str"]
    else:
        names.update(enumerate(_TEKKEN_DEFAULT_SPECIALS))
    for tid, name in TEKKEN_EXTRA_NAMES.items():
        if names.get(tid, f"<SPECIAL_{tid}>") == f"<SPECIAL_{tid}>":
            names[tid] = name
    specials = {names.get(i, f"<SPECIAL_{i}>"): i for i in range(num_special)}
    return bpe_from_ranks(ranks, config["pattern"], specials, id_offset=num_special)
