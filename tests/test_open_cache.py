"""What an ``Open`` decides is read once per set of values and shared (``convert.opening_of``, and
per model the native session's tools and start state: ``native._opening_parts``): every session
must still get exactly the options, the output and the call ids it would get from its own
``Open`` read whole, and no session's own fields (request id, prompt, choice) may reach another's."""

from __future__ import annotations

import pytest

from parsetier import convert, native
from parsetier.engine.session import start_and_echo
from parsetier.messages import SessionOptions
from parsetier.protocol.rules import Limits
from parsetier.protocol.session import NeedModel, SessionProtocol
from parsetier_api.v1 import parsetier_pb2 as pb

TOOLS = (
    '[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},'
    ' {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]'
)
OUTPUT = (
    "<think>\nweather first\n</think>\n\nLooking it up."
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)


def _opens() -> list[pb.Open]:
    """Opens that differ from the first in one field each (shared or per session)."""
    base = pb.Open(model="qwen3", tools_json=TOOLS)
    variants = [
        {},
        {"request_id": "req-1"},
        {"request_id": "req-2"},
        {"prompt_token_ids": [151644, 77091, 198]},
        {"choice_index": 2},
        {"tools_json": TOOLS.replace("get_time", "get_date")},
        {"tools_json": ""},
        {"tool_choice": pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NONE)},
        {"tool_choice": pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED)},
        {"tool_choice": pb.ToolChoice(function_name="get_time")},
        {"parallel_tool_calls": False},
        {"parallel_tool_calls": True},
        {"include_reasoning": False},
        {"thinking": False},
        {"thinking": True},
        {"chat_template_kwargs": {"enable_thinking": "false"}},
        {"chat_template_kwargs": {"enable_thinking": "true"}},
        {"output": pb.OUTPUT_KIND_DELTAS_AND_EVENTS},
        {"output": pb.OUTPUT_KIND_FINAL_ONLY},
        {"include_stop_text": True},
        {"complete_tool_calls": True},
        {"return_token_ids": True},
        {"stop": ["STOP"]},
        {"stop_token_ids": [151643]},
        {"completion": pb.CompletionOptions(skip_special_tokens=False)},
    ]
    opens = []
    for fields in variants:
        open_ = pb.Open()
        open_.CopyFrom(base)
        for name, value in fields.items():
            if name == "chat_template_kwargs":
                open_.chat_template_kwargs.update(value)
            elif isinstance(value, list):
                getattr(open_, name).extend(value)
            elif isinstance(value, pb.ToolChoice | pb.CompletionOptions):
                getattr(open_, name).CopyFrom(value)
            else:
                setattr(open_, name, value)
        opens.append(open_)
    return opens


@pytest.mark.parametrize("unary", [False, True])
def test_an_opening_is_the_open_read_whole(unary: bool) -> None:
    """Each ``Open`` gets the options and wants it gets read whole, twice over (the second time
    from the kept ``Opening``), whatever was read before it."""
    for _ in range(2):
        for open_ in _opens():
            want_deltas, want_events = convert.wants(open_.output, unary=unary)
            want = convert.options_of(open_, collect_in_final=not want_deltas, events=want_events)
            opening = convert.opening_of(open_, unary=unary)
            assert (opening.want_deltas, opening.want_events) == (want_deltas, want_events)
            assert (
                convert.session_options(opening, open_.request_id, open_.prompt_token_ids, open_.choice_index)
                == want
            ), open_


def test_opens_differing_in_one_option_share_nothing() -> None:
    """Two Opens that differ in a shared field (one each: the list above) have Openings of their
    own; two that differ only in per-session fields share one, and each session still gets its
    own request id, prompt and choice."""
    opens = _opens()
    per_session = opens[:5]
    shared = {id(convert.opening_of(open_)) for open_ in per_session}
    assert len(shared) == 1
    options = [
        convert.session_options(
            convert.opening_of(open_), open_.request_id, open_.prompt_token_ids, open_.choice_index
        )
        for open_ in per_session
    ]
    assert [(o.request_id, o.prompt_token_ids, o.choice_index) for o in options] == [
        ("", (), 0),
        ("req-1", (), 0),
        ("req-2", (), 0),
        ("", (151644, 77091, 198), 0),
        ("", (), 2),
    ]
    others = [convert.opening_of(open_) for open_ in opens[5:]]
    assert len({id(o) for o in others} | shared) == len(others) + 1
    same = [o for o in others if o.options == options[0]]  # only the default set explicitly
    assert [o.options.parallel_tool_calls for o in same] == [True]
    # The ParseOnce reading of the same Open (``unary``) is an Opening of its own.
    assert convert.opening_of(opens[0], unary=True).options != convert.opening_of(opens[0]).options


@pytest.mark.parametrize("unary", [False, True])
def test_an_open_of_shared_fields_only_is_keyed_by_its_bytes(unary: bool) -> None:
    """``shared_only`` (the protocol read that the Open sets no per-session field but the model):
    its bytes key an ``Opening`` equal to the one its fields key and to the Open read whole, kept
    and shared; Opens that differ in a shared field (set explicitly to its default too) have one
    each; a large one is not kept."""
    opens = [o for o in _opens() if not (o.request_id or o.prompt_token_ids or o.choice_index)]
    kept = []
    for open_ in opens:
        got = convert.opening_of(open_, unary=unary, shared_only=True)
        assert got == convert.opening_of(open_, unary=unary)
        assert (
            convert.opening_of(pb.Open.FromString(open_.SerializeToString()), unary=unary, shared_only=True)
            is got
        )
        kept.append(got)
    assert len({id(o) for o in kept}) == len(opens)
    big = pb.Open(model="qwen3", stop=["x" * (convert.OPENING_KEY_TEXT + 1)])
    assert convert.opening_of(big, shared_only=True) is not convert.opening_of(big, shared_only=True)


def test_sessions_with_their_own_fields_share_one_opening(registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions whose Opens differ only in per-session fields (request ids here) keep one
    ``Opening`` between them (a key per request would push the shared ones out), and those
    that set none keep one of their own (their bytes)."""
    monkeypatch.setattr(convert, "_openings", {})
    model = registry.get("qwen3")
    for request_id in ["", "", *(f"req-{i}" for i in range(convert.OPENINGS + 1))]:
        protocol = SessionProtocol(Limits())
        need = protocol.receive(pb.ParseRequest(open=pb.Open(model="qwen3", request_id=request_id)))
        assert isinstance(need, NeedModel)
        protocol.supply_model(model)
        assert protocol.counts.request_id == request_id
    assert len(convert._openings) == 2


def test_openings_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most ``OPENINGS`` are kept; an Open whose shared fields hold a large text is read
    whole each time, never kept."""
    monkeypatch.setattr(convert, "_openings", {})
    for i in range(convert.OPENINGS + 10):
        convert.opening_of(pb.Open(model="qwen3", stop=[f"stop-{i}"]))
    assert len(convert._openings) == convert.OPENINGS
    half = "x" * (convert.OPENING_KEY_TEXT // 2)
    ids = range(convert.OPENING_KEY_TEXT // convert.KEY_ID_SIZE + 1)
    for big in (
        pb.Open(model="qwen3", stop=["x" * (convert.OPENING_KEY_TEXT + 1)]),
        pb.Open(model="qwen3", stop=[half, half, "x"]),  # the texts in all
        pb.Open(model="qwen3", stop=[half], tools_json=TOOLS + " " * len(half)),
        pb.Open(model="qwen3", stop_token_ids=ids),  # ids count for their memory
    ):
        assert convert.opening_of(big) is not convert.opening_of(big)
        assert convert.opening_of(big) == convert.opening_of(big)
    assert len(convert._openings) == convert.OPENINGS


def test_a_refused_open_is_refused_each_time() -> None:
    bad = pb.Open(model="qwen3", tools_json=TOOLS, tool_choice=pb.ToolChoice(function_name="nope"))
    for _ in range(2):
        with pytest.raises(Exception, match="not among the tools"):
            convert.opening_of(bad)


def _run(model, open_: pb.Open, ids: list[int]) -> list[bytes]:
    """A ``Parse`` session of ``ids`` (one message of all of them, then Finish): its replies."""
    protocol = SessionProtocol(Limits())
    need = protocol.receive(pb.ParseRequest(open=open_))
    assert isinstance(need, NeedModel)
    replies = [protocol.supply_model(model).response]
    replies.append(protocol.receive(pb.ParseRequest(steps=[pb.Step(token_ids=ids)])).response)
    replies.append(protocol.receive(pb.ParseRequest(finish=pb.Finish())).response)
    return [r.SerializeToString() for r in replies if r is not None]


def test_sessions_of_one_opening_keep_their_own_call_ids(registry) -> None:
    """Sessions opened from Opens that share an Opening answer exactly as a session whose options
    were read whole (``NativeSession`` without the shared part), and each has the call ids of its
    own request id, prompt or choice."""
    model = registry.get("qwen3")
    parts = native.native_parts(model)
    assert parts is not None
    ids = model.tokenizer.encode(OUTPUT, add_special_tokens=False).ids
    seen = set()
    chosen = _opens()[4]
    chosen.request_id = "req-1"  # choice 2 of req-1: ids of their own, and reproducible
    for open_ in [*_opens()[1:4], chosen]:  # per-session fields (not the random seed)
        replies = _run(model, open_, ids)
        assert len(replies) == 2  # the step's and the Finish's (the Open alone sends nothing)
        seen.add(replies[0])
        want_deltas, want_events = convert.wants(open_.output, unary=False)
        options = convert.options_of(open_, collect_in_final=not want_deltas, events=want_events)
        alone = native.NativeSession(model, options, parts)
        shared = native.open_session(model, options, convert.opening_of(open_).options)
        assert isinstance(shared, native.NativeSession)
        assert shared.call_id_seed == alone.call_id_seed
        out = shared.feed(ids)
        assert out == alone.feed(ids) and any(d.tool_calls for d in out.deltas)
        assert shared.finish() == alone.finish()
    assert len(seen) == 4  # each request's own call ids


def test_a_prompt_still_decides_the_start_state(registry) -> None:
    """The start state shared per model and Opening is the prompt-free one; a session whose
    prompt decides it (a prompt ending in ``<think>``) gets its own."""
    model = registry.get("qwen3")
    parts = native.native_parts(model)
    assert parts is not None and model.grammar.grammar.prompt
    prompt = tuple(model.tokenizer.encode("<|im_start|>assistant\n<think>\n", add_special_tokens=False).ids)
    shared = SessionOptions(thinking=False)
    prompted = SessionOptions(thinking=False, prompt_token_ids=prompt)
    thinking = model.spec.thinking
    assert start_and_echo(model.grammar, prompted, thinking, model.tokenizer) != start_and_echo(
        model.grammar, shared, thinking, model.tokenizer
    )
    for options in (shared, prompted):
        alone = native.NativeSession(model, options, parts)
        again = native.NativeSession(model, options, parts, shared)
        text = "still thinking</think>\n\nanswer"
        ids = model.tokenizer.encode(text, add_special_tokens=False).ids
        assert again.feed(ids) == alone.feed(ids)
        assert again.finish() == alone.finish()


def test_unseeded_sessions_draw_fresh_bits_in_every_process() -> None:
    """A session with neither a request id nor prompt ids gets 128 random bits (drawn ahead, a
    block per ``os.urandom`` call): never the same twice, past a block's end too, and a forked
    worker never hands out the bits its parent drew ahead."""
    import os
    import re

    from parsetier.engine.call_ids import _RANDOM_BLOCK, call_id_seed

    seeds = [call_id_seed(SessionOptions()) for _ in range(3 * _RANDOM_BLOCK + 5)]
    assert all(re.fullmatch(r"random:[0-9a-f]{32}", seed) for seed in seeds)
    assert len(set(seeds)) == len(seeds)
    assert call_id_seed(SessionOptions(choice_index=3)).endswith("#3")
    call_id_seed(SessionOptions())  # the parent holds bits drawn ahead now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next seeds, then out at once (no pytest teardown)
        os.write(write, ",".join(call_id_seed(SessionOptions()) for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    parent = [call_id_seed(SessionOptions()) for _ in range(4)]
    assert len(child) == 4 and not set(child) & set(parent)
