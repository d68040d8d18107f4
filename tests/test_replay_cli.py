"""``parsetier-client replay``: JSON-lines steps in, JSON-lines deltas and final message out."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from dataclasses import dataclass

from parsetier_client import replay
from service_samples import EXPECTED_CALLS, REASONING_AND_TWO_CALLS, WEATHER_TOOLS

IM_END = 151645


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def _replay(target: str, stdin: str, *args: str) -> Done:
    """``parsetier-client replay`` in process, its streams given (the command as a process, exit
    status and all, is tests/test_cli.py's and tests/test_security.py's)."""
    parser = argparse.ArgumentParser()
    replay.add_arguments(parser)
    options = parser.parse_args(["--server", target, "--model", "qwen3", *args])
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = replay.run(options, stdin=io.StringIO(stdin), stdout=stdout)
    return Done(code, stdout.getvalue(), stderr.getvalue())


def test_replay_prints_deltas_and_final(grpc_server, encode, tmp_path):
    ids = encode(REASONING_AND_TWO_CALLS)
    lines = [json.dumps({"token_ids": ids[i : i + 3]}) for i in range(0, len(ids), 3)]
    lines.append(json.dumps({"token_ids": [IM_END], "finish_reason": "stop", "matched_stop": IM_END}))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(WEATHER_TOOLS))

    done = _replay(grpc_server.target, "\n".join(lines) + "\n", "--tools", str(tools))
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    deltas = [o["delta"] for o in out if "delta" in o]
    final = out[-1]["final"]
    assert all("delta" in o for o in out[:-1])
    assert "".join(d.get("reasoning", "") for d in deltas) == final["message"]["reasoning"]
    assert "".join(d.get("content", "") for d in deltas) == "Let me look that up."
    assert next(c["index"] for d in deltas for c in d.get("tool_calls", [])) == 0
    assert final["finish_reason"] == "tool_calls"
    assert final["usage"]["completion_tokens"] == len(ids) + 1
    assert [(c["name"], json.loads(c["arguments"])) for c in final["message"]["tool_calls"]] == EXPECTED_CALLS


def test_replay_events_and_default_finish(grpc_server, encode):
    stdin = json.dumps({"token_ids": encode("<think>\nok\n</think>\n\nHi!")}) + "\n"
    done = _replay(grpc_server.target, stdin, "--output", "events")
    assert done.returncode == 0, done.stderr
    out = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [o["event"]["kind"] for o in out if "event" in o]
    assert kinds[0] == "reasoning_start" and "content" in kinds
    assert out[-1]["final"]["finish_reason"] == "stop"
    assert out[-1]["final"]["message"]["content"] == "Hi!"


def test_replay_reports_errors(grpc_server):
    done = _replay(grpc_server.target, json.dumps({"token_ids": [10_000_000]}) + "\n")
    assert done.returncode == 1
    assert "INVALID_ARGUMENT" in done.stderr

    done = _replay(grpc_server.target, "not json\n")
    assert done.returncode == 1
    assert "line 1 is not JSON" in done.stderr
