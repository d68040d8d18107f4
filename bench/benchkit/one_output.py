"""The output the per-token CPU benchmarks feed (logprobs_bench, dialect_bench): reasoning and an
answer with CJK and emoji, so byte pieces occur, as one model's token ids; and their common
arguments (``--model``, ``--tokens``, ``--reps``)."""

from __future__ import annotations

import argparse

from parsetier.models import Model

TEXT = (
    "<think>\nThe user asks about the weather in 東京 and Paris. Let me think about what to say: "
    "temperatures, rain 🌧️, and a short summary. 天気はどうですか? Maybe add an emoji 🎉👍🏽.\n</think>\n\n"
)
ANSWER = "In 東京 it is 18°C with light rain 🌧️; in Paris 21°C and sunny ☀️. Have a nice day 🎉! "


def workload(model: Model, tokens: int) -> list[int]:
    """``tokens`` ids: the reasoning, then the answer repeated as often as it takes."""
    tok = model.tokenizer
    ids = tok.encode(TEXT, add_special_tokens=False).ids
    answer = tok.encode(ANSWER, add_special_tokens=False).ids
    while len(ids) < tokens:
        ids += answer
    return ids[:tokens]


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the arguments every per-token benchmark takes; its ``doc`` as the description."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    return parser
