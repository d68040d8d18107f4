"""What a live session keeps is bounded: only the prompt's tail, and log lines and statuses of
bounded size however long the client's strings are."""

from __future__ import annotations

import gc
import json
import tracemalloc

import grpc
import pytest

from engine_helpers import QWEN3
from grpc_servers import server_logs
from parsetier.engine.session import PROMPT_TAIL, Session
from parsetier.messages import SessionOptions
from parsetier.service.logs import JsonFormatter
from parsetier_client import Client

LONG_PROMPT = 1_000_000


def _retained_bytes(build) -> tuple[int, object]:
    """Bytes still allocated after ``build()`` returned, while its result is alive."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, kept
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_a_session_keeps_only_the_prompt_tail():
    def build() -> Session:
        prompt = tuple(1000 + i % 150_000 for i in range(LONG_PROMPT))  # each id its own int object
        return Session(QWEN3, SessionOptions(prompt_token_ids=prompt))

    retained, session = _retained_bytes(build)
    assert len(session.options.prompt_token_ids) == PROMPT_TAIL
    assert retained < 2 * 1024 * 1024, retained  # the prompt itself was about 36 MB


def test_call_ids_still_derive_from_the_whole_prompt():
    ids = [151657]  # <tool_call>
    body = QWEN3.tokenizer.encode('\n{"name": "f", "arguments": {}}\n', add_special_tokens=False).ids
    output = ids + body + [151658]

    def call_id(prompt: tuple[int, ...]) -> str:
        session = Session(QWEN3, SessionOptions(prompt_token_ids=prompt))
        session.feed(output)
        return session.finish().final.message.tool_calls[0].id

    prompt = tuple([9707] * (PROMPT_TAIL * 4))
    changed_early = (1879, *prompt[1:])
    assert call_id(prompt) == call_id(prompt)
    assert call_id(prompt) != call_id(changed_early)


@pytest.mark.parametrize("field", ["model", "request_id"])
def test_huge_client_strings_give_bounded_log_lines_and_statuses(grpc_server, field):
    huge = "m" * 1_000_000
    kwargs = {"model": huge} if field == "model" else {"model": "no-such-model", "request_id": huge}
    with server_logs() as logs, Client(grpc_server.target, timeout=30) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.parse_once(kwargs.pop("model"), [9707], **kwargs)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert len(info.value.details()) < 2048
        [end] = logs.wait_for_session_ends("ParseOnce")
    line = JsonFormatter().format(end)
    assert len(line) < 4096, len(line)
    assert json.loads(line)["outcome"] == "NOT_FOUND"
