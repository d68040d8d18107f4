"""One recovery policy for malformed model output, the same in every format (docs/service.md,
"Malformed model output"), and reasoning boundaries as models use them: every case here is a
class of odd output that once lost text silently or was handled two ways (issue 22's table),
through the session API with the real vocabularies, under every split and in both delivery modes.
"""

from __future__ import annotations

import dataclasses

import pytest

import marker_tokenizers
import native_diff
from engine_helpers import CALL_ID, tools
from family_support import enc, prompted, split_check
from parsetier.engine.session import parse
from parsetier.messages import SessionOptions
from parsetier.models import Model

_REGISTRY = marker_tokenizers.registry()


def model(name: str) -> Model:
    return _REGISTRY.get(name)


MODES = [pytest.param(False, id="streaming"), pytest.param(True, id="complete")]


def check(name: str, text: str, want: tuple, complete: bool, options: SessionOptions | None = None) -> None:
    m = model(name)
    opts = dataclasses.replace(options or SessionOptions(), complete_tool_calls=complete)
    assert split_check(m, enc(m, text), opts) == want


# ---------------------------------------------------------------------------------------- alternative forms
@pytest.mark.parametrize("complete", MODES)
def test_dsml_invoke_with_a_json_body_reads_it_as_the_arguments(complete: bool) -> None:
    """DSML: an invoke whose body is a JSON object instead of parameter elements, as models write
    it: the object is the call's arguments (not ``{}`` with the body dropped)."""
    body = '{"location": "Beijing", "date": "2024-01-16"}'
    text = (
        "<｜DSML｜function_calls>\n"
        f'<｜DSML｜invoke name="get_weather">\n{body}\n</｜DSML｜invoke>\n'
        '<｜DSML｜invoke name="get_time">\n'
        '<｜DSML｜parameter name="tz" string="true">UTC</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
    )
    want = ("", "", (("get_weather", body), ("get_time", '{"tz": "UTC"}')))
    check("deepseek-v3.2", text, want, complete)


# ---------------------------------------------------------------------------------------- no call: content
@pytest.mark.parametrize("complete", MODES)
@pytest.mark.parametrize("preset", ["mistral-small-3.2", "mistral-7b-v0.3"])
def test_a_marker_that_introduces_no_call_is_content(preset: str, complete: bool) -> None:
    """Mistral: ``[TOOL_CALLS]`` followed by text that is no call, then the stop token: the text
    comes back as content, marker included (it was gone: content "")."""
    text = "[TOOL_CALLS] But then nothing follows..."
    check(preset, text, (text, "", ()), complete)


@pytest.mark.parametrize("complete", MODES)
@pytest.mark.parametrize("preset", ["mistral-small-3.2", "mistral-7b-v0.3"])
def test_a_block_that_is_no_call_comes_back_as_written(preset: str, complete: bool) -> None:
    """Mistral: ``[TOOL_CALLS] [{"name": invalid json}]``: content as written, the space after the
    marker included (it was dropped)."""
    text = '[TOOL_CALLS] [{"name": invalid json}]'
    check(preset, text, (text, "", ()), complete)


@pytest.mark.parametrize("complete", MODES)
def test_an_invoke_without_a_name_is_content(complete: bool) -> None:
    """MiniMax-M2: ``<invoke>`` with no ``name`` attribute inside the call block: no call, and the
    block is content as written (it was gone, call and text alike)."""
    block = (
        '<minimax:tool_call>\n<invoke>\n<parameter name="city">Paris</parameter>\n</invoke>\n'
        "</minimax:tool_call>"
    )
    check("minimax-m2", "Thinking.</think>\n\n" + block, (block, "Thinking.", ()), complete)


@pytest.mark.parametrize("complete", MODES)
def test_text_that_is_no_markup_inside_a_block_with_a_call_is_content(complete: bool) -> None:
    """MiniMax-M2: a real call in a block that also holds stray text: the call, and the text as
    content in place; the block's markers, and the whitespace beside them, stay markup."""
    text = (
        '</think>\n\n<minimax:tool_call>\nnoise\n<invoke name="get_time">\n</invoke>\n'
        "more</minimax:tool_call> after"
    )
    check("minimax-m2", text, ("noisemore after", "", (("get_time", "{}"),)), complete)


@pytest.mark.parametrize("complete", MODES)
@pytest.mark.parametrize("arguments", ["invalid", "🚀 invalid", "[1, 2]", "42"])
def test_arguments_that_are_not_a_json_object_are_content(arguments: str, complete: bool) -> None:
    """Qwen3 / Hermes: ``"arguments": invalid}``, ``"arguments": 🚀 invalid}``: one policy for both
    (they were a call with raw ``invalid``, and a call ``{}`` with the rest as content): arguments
    that do not begin as a JSON object (or a JSON string holding one) mean the envelope yields no
    call, decided before anything streamed; its text is content, markers included."""
    block = '<tool_call>\n{"name": "get_weather", "arguments": ' + arguments + "}\n</tool_call>"
    check("qwen3", "Checking.\n" + block, ("Checking.\n" + block, "", ()), complete)


# ------------------------------------------------------------------------------- reasoning boundaries
@pytest.mark.parametrize("complete", MODES)
def test_glm_call_marker_ends_unclosed_reasoning(complete: bool) -> None:
    """GLM-4.5 interrupts its reasoning with a call: the ``<tool_call>`` token ends the reasoning."""
    text = (
        "<think>Let me check the weather.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>Paris</arg_value>\n</tool_call>"
    )
    want = ("", "Let me check the weather.", (("get_weather", '{"city": "Paris"}'),))
    options = SessionOptions(tools=tools(("get_weather", {"city": {"type": "string"}})))
    check("glm-4.5", text, want, complete, options)


@pytest.mark.parametrize("complete", MODES)
@pytest.mark.parametrize("preset", ["qwen3", "deepseek-r1", "glm-4.7"])
def test_an_opener_repeated_after_a_prompt_opened_block_is_markup(preset: str, complete: bool) -> None:
    """The prompt ends ``<think>\\n`` and the model writes ``<think>`` again: the repeat is markup,
    not the first word of the reasoning (Qwen3 showed it; deepseek-r1's format already read it)."""
    m = model(preset)
    opts = prompted(m, "<think>\n", complete_tool_calls=complete)
    text = "<think>\nI should answer.\n</think>\n\nParis."
    assert split_check(m, enc(m, text), opts) == ("Paris.", "I should answer.", ())


def test_an_opener_later_in_the_reasoning_is_still_text() -> None:
    """Only the very start repeats the prompt's opener: later, ``<think>`` inside reasoning is what
    the format says it is (Qwen3: reasoning text)."""
    m = model("qwen3")
    text = "Use <think> tags.\n</think>\n\nOK."
    assert split_check(m, enc(m, text), prompted(m, "<think>\n")) == ("OK.", "Use <think> tags.", ())


# ---------------------------------------------------------------------------------------- repeated markers
@pytest.mark.parametrize("complete", MODES)
def test_llama_repeated_python_tag_gives_every_call(complete: bool) -> None:
    """Llama 3: ``<|python_tag|>{A}<|python_tag|>{B}``: two calls (B's JSON landed in content)."""
    text = (
        '<|python_tag|>{"name": "a", "parameters": {"x": 1}}'
        '<|python_tag|>{"name": "b", "parameters": {"y": 2}}'
    )
    check("llama3", text, ("", "", (("a", '{"x": 1}'), ("b", '{"y": 2}'))), complete)


# ---------------------------------------------------------------------------------------- follow checks
@pytest.mark.parametrize("complete", MODES)
def test_minimax_m3_invoke_closer_inside_a_string_value_is_value_text(complete: bool) -> None:
    """MiniMax-M3: a string value that spells the invoke closer (the same tokens as the real one)
    stays value text: the closer counts only where the call's structure goes on after it."""
    p = "]<]minimax[>["
    text = (
        f'{p}<tool_call>\n{p}<invoke name="note">{p}<text>see {p}</invoke> inside{p}</text>'
        f"{p}<n>2{p}</n>{p}</invoke>\n{p}</tool_call>"
    )
    props = {"text": {"type": "string"}, "n": {"type": "integer"}}
    want = ("", "", (("note", '{"text": "see ]<]minimax[>[</invoke> inside", "n": 2}'),))
    check("minimax-m3", text, want, complete, SessionOptions(tools=tools(("note", props))))


# ---------------------------------------------------------------------------------------- tool call ids
def test_tool_call_ids_never_repeat_across_requests_without_a_seed() -> None:
    """A session with neither a request id nor prompt ids: its ids come from fresh random bits, so
    two such requests never share one (they did: every such request's first call was
    ``chatcmpl-tool-018c16534e3722592bb0da72``). With a request id they stay derived."""
    m = model("qwen3")
    ids = enc(m, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    unseeded = [parse(m, SessionOptions(), ids)[0].tool_calls[0].id for _ in range(3)]
    assert len(set(unseeded)) == 3
    assert all(CALL_ID.fullmatch(i) for i in unseeded)
    seeded = {parse(m, SessionOptions(request_id="req-1"), ids)[0].tool_calls[0].id for _ in range(3)}
    prompted_ids = {parse(m, prompted(m, "Hi"), ids)[0].tool_calls[0].id for _ in range(3)}
    assert len(seeded) == 1 and len(prompted_ids) == 1


# ------------------------------------------------------------------ a call that breaks: complete mode
_BROKEN_CALLS = [
    pytest.param(
        "qwen3",
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris" <oops> }}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris" <oops> }}',
        id="hermes-break",
    ),
    pytest.param(
        "qwen3",
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}',
        id="hermes-not-json",
    ),
    pytest.param(
        "qwen3",
        'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
        id="hermes-stopped-inside",
    ),
    pytest.param(
        "mistral-small-3.2",
        'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": Paris}',
        '[TOOL_CALLS]get_weather[ARGS]{"city": Paris}',
        id="mistral-not-json",
    ),
    pytest.param(
        "deepseek-v3",
        "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": Paris}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
        '```json\n{"city": Paris}```<｜tool▁call▁end｜>',  # whitespace between markers is not kept
        id="deepseek-not-json",
    ),
]


@pytest.mark.parametrize(("name", "text", "call_text"), _BROKEN_CALLS)
def test_a_call_that_breaks_is_content_with_complete_tool_calls(name: str, text: str, call_text: str) -> None:
    """``complete_tool_calls`` delivers a call only whole and valid; one whose arguments break (not
    JSON, a break inside, the model stopping inside) was dropped, and its text with it. Now the
    call ends where its arguments break and its text, as the model wrote it (``TOOL_CALL_END``
    carries it), is content, under every split. Streaming still streams what it can."""
    m = model(name)
    content, reasoning, calls = check_both_engines(m, text, SessionOptions(complete_tool_calls=True))
    assert (content, reasoning, calls) == ("Sure." + ("\n" if name == "qwen3" else "") + call_text, "", ())
    streamed = check_both_engines(m, text, SessionOptions())
    assert [c[0] for c in streamed[2]] == ["get_weather"]


@pytest.mark.parametrize("complete", MODES)
@pytest.mark.parametrize(
    ("name", "text", "want"),
    [
        pytest.param(
            "mistral-small-3.2",
            'Sure.[TOOL_CALLS]get_weather[ARGS]🚀 garbage {"city": "Paris"}',
            ("Sure.🚀 garbage", "", (("get_weather", '{"city": "Paris"}'),)),
            id="mistral",
        ),
        pytest.param(
            "deepseek-v3",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            'note: {"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
            ("note:", "", (("get_weather", '{"city": "Paris"}'),)),
            id="deepseek-text",
        ),
        pytest.param(
            "deepseek-v3",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
            ("", "", (("get_weather", '{"city": "Paris"}'),)),
            id="deepseek-fence-is-markup",
        ),
        pytest.param(
            "deepseek-v3",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
            "no json at all<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ("no json at all", "", (("get_weather", "{}"),)),
            id="deepseek-no-value",
        ),
    ],
)
def test_text_before_a_json_value_is_content(name: str, text: str, want: tuple, complete: bool) -> None:
    """A ``json`` state's lead-in is markup only when it is whitespace and a code fence
    (```` ```json ````); other text there (``[ARGS]🚀 garbage {…}``) is the model's: content, in
    both engines (it was taken as a lead-in and dropped)."""
    got = check_both_engines(model(name), text, SessionOptions(complete_tool_calls=complete))
    assert got == want


def check_both_engines(m: Model, text: str, options: SessionOptions) -> tuple:
    """The reference's parse under every split (``split_check``), and the native engine's steps,
    deltas, events and final equal to it (tests/native_diff.py)."""
    options = dataclasses.replace(options, request_id=options.request_id or "malformed")
    ids = enc(m, text)
    want = split_check(m, ids, options)
    assert native_diff.compare(m, options, [[i] for i in ids]) > 0
    assert native_diff.compare(m, options, [list(ids)]) > 0
    return want
