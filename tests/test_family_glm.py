"""GLM-4.5 / 4.6 / 4.7 / 5.x with the real vocabularies (``glm-4.5`` and ``glm-4.7-flash``).

GLM-4.5/4.6 write
``\\n<think>…</think>\\n<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>``;
GLM-4.7 and 5.x are compact and their generation prompt already opened ``<think>``. Every marker is
one added token; values are raw text typed by the tool schema. Every test asserts exact outputs and
split invariance (``split_check``).
"""

from __future__ import annotations

import json

import pytest

import marker_tokenizers
from engine_helpers import run, shape, tools, typed
from family_support import arguments_before, enc, plain, prompted, split_check
from parsetier.messages import SessionOptions

_REGISTRY = marker_tokenizers.registry()
GLM45 = _REGISTRY.get("glm-4.5")
GLM47 = _REGISTRY.get("glm-4.7")
GLM5 = _REGISTRY.get("glm-5")

TOOLS = tools(
    get_weather={"city": {"type": "string"}, "unit": {"type": "string"}},
    write_file={"path": {"type": "string"}, "content": {"type": "string"}},
    typed=typed("i", "n", "b", "o", "a", "s", "ns", "z"),
    get_time={},
)
OPTS = SessionOptions(tools=TOOLS)
ON_47 = prompted(GLM47, "<|assistant|><think>", tools=TOOLS)
OFF_47 = prompted(GLM47, "<|assistant|></think>", tools=TOOLS)


def call47(name: str, *kv: tuple[str, str]) -> str:
    return (
        f"<tool_call>{name}"
        + "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in kv)
        + ("</tool_call>")
    )


def test_glm45_newline_variant_with_reasoning_and_content() -> None:
    text = (
        "\n<think>Need live data.</think>\nI'll look that up.\n<tool_call>get_weather\n"
        "<arg_key>city</arg_key>\n<arg_value>Zürich</arg_value>\n<arg_key>unit</arg_key>\n"
        "<arg_value>celsius</arg_value>\n</tool_call>"
    )
    want = (
        "I'll look that up.",
        "Need live data.",
        (("get_weather", '{"city": "Zürich", "unit": "celsius"}'),),
    )
    assert split_check(GLM45, [*enc(GLM45, text), 151329], OPTS) == want


def test_glm47_starts_in_reasoning_from_prompt_and_from_the_thinking_default() -> None:
    ids = enc(
        GLM47,
        "Two cities.</think>"
        + call47("get_weather", ("city", "Paris"))
        + call47("get_weather", ("city", "Tokyo")),
    )
    calls = (("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Tokyo"}'))
    assert split_check(GLM47, ids, ON_47) == ("", "Two cities.", calls)
    assert split_check(GLM47, ids, OPTS) == ("", "Two cities.", calls)  # preset: thinking on


def test_reasoning_toggles() -> None:
    ids = enc(GLM47, call47("get_weather", ("city", "Berlin")))
    want = ("", "", (("get_weather", '{"city": "Berlin"}'),))
    assert split_check(GLM47, ids, OFF_47) == want
    assert split_check(GLM47, ids, SessionOptions(tools=TOOLS, thinking=False)) == want
    # GLM-4.5 opens <think> itself; with thinking forced on it starts in reasoning and drops the opener.
    ids45 = enc(GLM45, "\n<think>Hmm.</think>\nHi.")
    assert split_check(GLM45, ids45, OPTS) == ("Hi.", "Hmm.", ())
    assert split_check(GLM45, ids45, SessionOptions(thinking=True)) == ("Hi.", "Hmm.", ())
    # Reasoning that was closed in the prompt: the output is all content.
    prompt = tuple(enc(GLM45, "<|assistant|>\n<think></think>"))
    assert split_check(GLM45, enc(GLM45, "\nPlain."), SessionOptions(prompt_token_ids=prompt)) == (
        "Plain.",
        "",
        (),
    )


def test_glm5_on_the_flash_vocabulary() -> None:
    ids = enc(GLM5, "Set it.</think>" + call47("typed", ("i", "3"), ("s", "3")))
    assert GLM5.tokenizer.token_to_id("<tool_call>") == 154843
    assert split_check(GLM5, ids, OPTS) == ("", "Set it.", (("typed", '{"i": 3, "s": "3"}'),))


def test_typed_values_follow_the_schema() -> None:
    ids = enc(
        GLM47,
        call47(
            "typed",
            ("i", "15"),
            ("n", "2.5e3"),
            ("b", "false"),
            ("o", '{"a": [1, {"b": null}]}'),
            ("a", '["x", "y"]'),
            ("s", "0042"),
            ("ns", "null"),
            ("z", "null"),
        ),
    )
    args = (
        '{"i": 15, "n": 2500.0, "b": false, "o": {"a": [1, {"b": null}]}, "a": ["x", "y"], "s": "0042", '
        '"ns": null, "z": null}'
    )
    assert split_check(GLM47, ids, OFF_47) == ("", "", (("typed", args),))


def test_nullable_string_that_only_starts_like_null_stays_a_string() -> None:
    ids = enc(GLM47, call47("typed", ("ns", "nul"), ("s", "null")) + call47("typed", ("ns", "nullable")))
    calls = (("typed", '{"ns": "nul", "s": "null"}'), ("typed", '{"ns": "nullable"}'))
    assert split_check(GLM47, ids, OFF_47) == ("", "", calls)


def test_values_keep_their_whitespace_and_escapes() -> None:
    value = '  line 1\n\tC:\\dir "q"  \n'
    ids = enc(GLM47, call47("write_file", ("path", " a.txt"), ("content", value)))
    assert split_check(GLM47, ids, OFF_47) == (
        "",
        "",
        (("write_file", '{"path": " a.txt", "content": "  line 1\\n\\tC:\\\\dir \\"q\\"  \\n"}'),),
    )


def test_marker_tokens_inside_a_string_value_are_text() -> None:
    value = "Wrap calls in <tool_call> and </tool_call>; keys go in <arg_key>.</think>"
    ids = enc(GLM47, call47("write_file", ("path", "f.md"), ("content", value)))
    assert GLM47.grammar.sentinel_of_id.keys() >= {151352, 151353, 151356}
    assert ids.count(151353) == 2  # the </tool_call> inside the value is the marker token itself
    args = f'{{"path": "f.md", "content": "{value}"}}'
    assert split_check(GLM47, ids, OFF_47) == ("", "", (("write_file", args),))


def test_marker_lookalikes_are_text() -> None:
    text = "Use <tool_call>get_time</tool_call> and <think>x</think> literally."
    assert split_check(GLM47, plain(GLM47, text), OFF_47) == (text, "", ())


def test_missing_close_arg_value_is_closed_by_a_final_tool_call_close() -> None:
    broken = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Berlin</tool_call>"
    ids = enc(GLM47, broken + call47("get_weather", ("city", "Rome")))
    calls = (("get_weather", '{"city": "Berlin"}'), ("get_weather", '{"city": "Rome"}'))
    assert split_check(GLM47, ids, OFF_47) == ("", "", calls)
    assert split_check(GLM47, enc(GLM47, broken), OFF_47) == ("", "", calls[:1])


def test_parallel_calls_get_indices_in_order_and_empty_arguments() -> None:
    text = (
        call47("get_weather", ("city", "A"))
        + "\n"
        + call47("get_time")
        + "\n"
        + call47("get_weather", ("city", "C"))
    )
    ids = enc(GLM47, text)
    calls = (("get_weather", '{"city": "A"}'), ("get_time", "{}"), ("get_weather", '{"city": "C"}'))
    assert split_check(GLM47, ids, OFF_47) == ("", "", calls)
    streamed = run(GLM47, [ids], OFF_47)
    assert [tc.index for d in streamed.deltas for tc in d.tool_calls if tc.name] == [0, 1, 2]
    assert split_check(GLM45, enc(GLM45, "\n<tool_call>get_time\n</tool_call>"), OPTS) == (
        "",
        "",
        (("get_time", "{}"),),
    )


def test_content_around_calls() -> None:
    ids = enc(GLM45, "<think>t</think>Checking.<tool_call>get_time</tool_call>after tool")
    assert split_check(GLM45, ids, OPTS) == ("Checking.after tool", "t", (("get_time", "{}"),))


def test_string_values_stream_before_the_value_ends() -> None:
    ids = enc(GLM47, call47("write_file", ("content", "one two three four five six")))
    close = ids.index(151359)  # </arg_value>
    before = arguments_before(GLM47, ids, OFF_47, close)
    assert before == '{"content": "one two three four five six'


@pytest.mark.parametrize("complete", [False, True])
def test_truncation_inside_a_call(complete: bool) -> None:
    text = call47("get_weather", ("city", "Berlin"), ("unit", "celsius"))
    ids = enc(GLM47, text)
    cut = ids[: ids.index(151359, ids.index(151359) + 1)]  # stop inside the second value
    opts = SessionOptions(tools=TOOLS, prompt_token_ids=OFF_47.prompt_token_ids, complete_tool_calls=complete)
    got = split_check(GLM47, cut, opts, reason="length")
    if complete:
        assert got == ("", "", ())  # an unfinished call is never delivered
    else:  # streamed arguments stay as far as they came, and the written JSON is closed
        assert got == ("", "", (("get_weather", '{"city": "Berlin", "unit": "celsius"}'),))


def test_truncated_reasoning_is_reasoning() -> None:
    ids = enc(GLM47, "The user wants the weather in Paris,")
    assert split_check(GLM47, ids, ON_47, reason="length") == ("", "The user wants the weather in Paris,", ())
    assert (
        shape(run(GLM47, [ids], ON_47, "length").final.message)[1] == "The user wants the weather in Paris,"
    )


# ============================================================ delimiters inside values, early stops
GLM5_OFF = prompted(GLM5, "<|assistant|></think>", tools=TOOLS)


def test_value_closer_inside_a_value_is_value_text() -> None:
    """The chat template writes values verbatim, so ``</arg_value>`` inside one is the same token
    as the real closer: a value ends only where ``<arg_key>``, ``</tool_call>`` or the end follows."""
    text = (
        "<tool_call>typed<arg_key>a</arg_key><arg_value>"
        '["see </arg_value> inside", "next"]</arg_value>'
        "<arg_key>s</arg_key><arg_value>see </arg_value> inside</arg_value></tool_call>"
    )
    ids = enc(GLM5, text)
    closer = GLM5.tokenizer.token_to_id("</arg_value>")
    assert ids.count(closer) == 4  # the inner closers are the very same token
    want = '{"a": ["see </arg_value> inside", "next"], "s": "see </arg_value> inside"}'
    assert split_check(GLM5, ids, GLM5_OFF) == ("", "", (("typed", want),))


def test_closer_followed_by_whitespace_then_a_key_still_closes() -> None:
    text = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
    ids = enc(GLM45, text)
    assert split_check(GLM45, ids, OPTS)[2] == (("get_weather", '{"city": "Paris"}'),)


@pytest.mark.parametrize("complete", [False, True])
def test_stop_right_after_the_name_is_a_call_without_arguments(complete: bool) -> None:
    eos = GLM5.tokenizer.token_to_id("<|user|>")
    opts = prompted(GLM5, "<|assistant|></think>", tools=TOOLS, complete_tool_calls=complete)
    ids = [*enc(GLM5, "<tool_call>cancel_file"), eos]
    assert split_check(GLM5, ids, opts) == ("", "", (("cancel_file", "{}"),))
    # an empty name is no call
    assert split_check(GLM5, enc(GLM5, "Ok.<tool_call>"), opts) == ("Ok.", "", ())


@pytest.mark.parametrize("complete", [False, True])
def test_stop_without_the_closer_gives_valid_json(complete: bool) -> None:
    opts = prompted(GLM5, "<|assistant|></think>", tools=TOOLS, complete_tool_calls=complete)
    n_given = "<arg_key>n</arg_key><arg_value>65.471</arg_value>"
    cases = {
        n_given + "<arg_key>z</arg_key><arg_value>null</arg_value>": '{"n": 65.471, "z": null}',
        n_given + "<arg_key>s</arg_key><arg_value>ab": '{"n": 65.471, "s": "ab"}',
        # the key was streamed when </arg_key> came; an absent value is empty text
        "<arg_key>s</arg_key><arg_value>ab</arg_value><arg_key>i</arg_key>": '{"s": "ab", "i": ""}',
        "<arg_key>i</arg_key>": '{"i": ""}',
        "<arg_key>i": "{}",
        "<arg_key>i</arg_key><arg_value>": '{"i": ""}',
    }
    for tail, want in cases.items():
        ids = enc(GLM5, "<tool_call>typed" + tail)
        got = split_check(GLM5, ids, opts)
        assert got == ("", "", (("typed", want),)), tail
        json.loads(got[2][0][1])


def test_length_cut_closes_the_written_json_but_delivers_only_when_streaming() -> None:
    ids = enc(GLM5, "<tool_call>typed<arg_key>i</arg_key><arg_value>12")
    assert split_check(GLM5, ids, GLM5_OFF, reason="length") == ("", "", (("typed", '{"i": 12}'),))
    complete = prompted(GLM5, "<|assistant|></think>", tools=TOOLS, complete_tool_calls=True)
    assert split_check(GLM5, ids, complete, reason="length") == ("", "", ())
    # a name cut by length is not known to be whole: no call
    assert split_check(GLM5, enc(GLM5, "<tool_call>cancel_fi"), GLM5_OFF, reason="length") == ("", "", ())
