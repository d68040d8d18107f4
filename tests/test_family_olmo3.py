"""Olmo 3 (``olmo-3``) through its marker tokenizer: no Olmo 3 vocabulary is on PyPI, so its ChatML and
reasoning markers sit at synthetic ids; ``<function_calls>`` is plain text. Calls are pythonic, one a
line, JSON's ``null``/``true``/``false`` as literals. Exact outputs, split invariance.
"""

from __future__ import annotations

import marker_tokenizers
from engine_helpers import tools
from family_support import enc, split_check
from parsetier.messages import SessionOptions

OLMO = marker_tokenizers.registry().get("olmo-3")
TOOLS = tools(get_weather={"city": {"type": "string"}}, search={}, get_time={})
OPTS = SessionOptions(tools=TOOLS)


def test_newline_separated_calls_in_the_block() -> None:
    text = (
        "<function_calls>\n"
        "get_weather(city='Paris </function_calls> x')\n"
        'search(note=null, exact=true, tags=["a", "b"], filters={"k": false})\n'
        "get_time()\n"
        "</function_calls>"
    )
    want = (
        "",
        "",
        (
            ("get_weather", '{"city": "Paris </function_calls> x"}'),
            ("search", '{"note": null, "exact": true, "tags": ["a", "b"], "filters": {"k": false}}'),
            ("get_time", "{}"),
        ),
    )
    assert split_check(OLMO, enc(OLMO, text), OPTS) == want


def test_text_around_the_block_and_reasoning() -> None:
    text = "<think>One call.</think>Sure.\n<function_calls>\nget_time()\n</function_calls>\nDone."
    assert split_check(OLMO, enc(OLMO, text), OPTS) == ("Sure.\n\nDone.", "One call.", (("get_time", "{}"),))


def test_calls_without_the_block_are_text() -> None:
    """The bare form (no <function_calls>) is not read: prose cannot be told from a call line."""
    assert split_check(OLMO, enc(OLMO, "get_time()"), OPTS) == ("get_time()", "", ())


def test_a_block_of_no_calls_is_passed_through() -> None:
    """The block comes back as written: the opener, the whitespace after it, the text, the closer."""
    text = "<function_calls>\nnot a call\n</function_calls> after"
    assert split_check(OLMO, enc(OLMO, text), OPTS) == (
        "<function_calls>\nnot a call\n</function_calls> after",
        "",
        (),
    )
