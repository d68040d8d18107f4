"""Kimi's ``◁think▷`` reasoning (``kimi-vl-thinking``) through a marker tokenizer: no Kimi vocabulary is
on PyPI. The reasoning sits between the plain-text markers ``◁think▷`` and ``◁/think▷``; there are
no tool calls (docs/formats/kimi.md, "Kimi-VL-Thinking"). Exact outputs, split invariance.
"""

from __future__ import annotations

import marker_tokenizers
from family_support import enc, prompted, split_check
from parsetier.messages import SessionOptions

KVL = marker_tokenizers.registry().get("kimi-vl-thinking")
OPTS = SessionOptions()


def test_reasoning_then_answer() -> None:
    text = "◁think▷The image shows a gate. ◁/think▷An industrial area on a sunny day.<|im_end|>"
    want = ("An industrial area on a sunny day.", "The image shows a gate.", ())
    assert split_check(KVL, enc(KVL, text), OPTS) == want


def test_the_markers_are_text_split_across_tokens() -> None:
    """Each marker is several byte tokens: any split of it is still the marker."""
    ids = enc(KVL, "◁think▷a◁/think▷b")
    assert len(ids) > 10
    assert split_check(KVL, ids, OPTS) == ("b", "a", ())


def test_no_markers_is_all_content_and_a_stray_closer_is_markup() -> None:
    assert split_check(KVL, enc(KVL, "Plain answer."), OPTS) == ("Plain answer.", "", ())
    assert split_check(KVL, enc(KVL, "Answer◁/think▷ more."), OPTS) == ("Answer more.", "", ())


def test_a_prompt_that_opens_the_reasoning() -> None:
    options = prompted(KVL, "<|im_assistant|>assistant<|im_middle|>◁think▷")
    assert split_check(KVL, enc(KVL, "Hmm.◁/think▷Hi."), options) == ("Hi.", "Hmm.", ())


def test_output_cut_inside_the_reasoning() -> None:
    assert split_check(KVL, enc(KVL, "◁think▷Still thinking"), OPTS, reason="length") == (
        "",
        "Still thinking",
        (),
    )
