"""The resume scenario corpus (tests/resume_scenarios/*.json) turned into driver scripts, and
driver results judged against the uninterrupted run. The format is tests/resume_scenarios/README.md.

A scenario is data; this module only expands it: session outputs come from ``fleet_outputs``
(real tokenizers), so a driver in any language gets concrete token ids and needs none.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from fleet_outputs import QUICK_MODELS, TOOLS, Output, sample
from parsetier_api.v1 import parsetier_pb2 as pb

CORPUS = Path(__file__).parent / "resume_scenarios"
TIMEOUT = 60.0
"""Seconds a driver's client waits for any one call (the script's ``timeout``)."""
NGINX_KEEPALIVE_MS = 1000


def names() -> list[str]:
    return sorted(path.stem for path in CORPUS.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    scenario = json.loads((CORPUS / f"{name}.json").read_text(encoding="utf-8"))
    scenario["name"] = name
    return scenario


def _open(out: Output, request_id: str) -> dict[str, Any]:
    return {
        "model": out.model,
        "request_id": request_id,
        "tools_json": json.dumps(TOOLS),
        "prompt_token_ids": list(out.prompt_ids),
        "output": "both",
    }


def steps(scenario: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The scenario's steps as concrete actions (``open`` with its parameters, ``feed`` with ids)."""
    sessions = scenario["sessions"]
    if "fleet" in sessions:  # every session opens in step 0, one token per step, finish after its last
        first = sessions.get("first", 0)
        outs = {f"s{i}": sample(i, QUICK_MODELS) for i in range(first, first + sessions["fleet"])}
        plan: list[list[dict[str, Any]]] = []
        for k in range(max(len(o.ids) for o in outs.values())):
            step: list[dict[str, Any]] = []
            for key, out in outs.items():
                if k == 0:
                    step.append({"op": "open", "key": key, "open": _open(out, f"{scenario['name']}-{key}")})
                if k < len(out.ids):
                    step.append({"op": "feed", "key": key, "ids": [out.ids[k]]})
                if k == len(out.ids) - 1:
                    step.append({"op": "finish", "key": key, "reason": "stop"})
            plan.append(step)
        return plan
    out = sample(sessions.get("sample", 0), QUICK_MODELS)
    plan = []
    for raw in scenario["steps"]:
        step = []
        for action in raw:
            action = dict(action)
            if action["op"] == "open":
                action["open"] = _open(out, action.pop("request_id"))
            elif action["op"] == "feed" and "tokens" in action:
                action["ids"] = [out.ids[i % len(out.ids)] for i in action.pop("tokens")]
            elif action["op"] == "finish":
                action.setdefault("reason", "stop")
            step.append(action)
        plan.append(step)
    return plan


def script(scenario: dict[str, Any], target: str, *, resume: bool | None = None, nginx: bool = False) -> dict:
    """The driver script: the scenario's schedule over its steps, for ``target``."""
    plan = steps(scenario)
    ops: list[dict[str, Any]] = []
    at = 0

    def count(n: int | float | str) -> int:
        if n == "rest":
            return len(plan) - at
        if isinstance(n, float):
            return max(0, round(n * len(plan)) - at)
        return int(n)

    for op in scenario.get("schedule", [{"step": "rest"}]):
        if "step" in op or "send" in op:
            receive = "step" in op
            for step in plan[at : at + count(op.get("step", op.get("send")))]:
                ops.append({"send": step})
                if receive:
                    ops.append({"receive": 1})
                at += 1
        elif "receive" in op:
            ops.append({"receive": op["receive"]})
        elif "pause" in op:
            ops.append({"pause": op["pause"]})
    for step in plan[at:]:
        ops += [{"send": step}, {"receive": 1}]
    result: dict[str, Any] = {
        "api": scenario.get("api", "batch"),
        "target": target,
        "resume": scenario.get("resume", True) if resume is None else resume,
        "timeout": TIMEOUT,
        "ops": ops,
    }
    if nginx:
        result["keepalive_ms"] = NGINX_KEEPALIVE_MS
    return result


# ---------------------------------------------------------------------------------- judging
def _normal(raw: str, kind: type) -> Any:
    """An output as compared: ``client_messages`` counts messages of the stream that carried it,
    so a resumed session's restart on its new stream; everything else must be identical."""
    message = kind.FromString(base64.b64decode(raw))
    message.client_messages = 0
    return message


def replies(result: dict[str, Any]) -> Any:
    """A result's outputs, normalized: batch, one ``{key: SessionOutput}`` per step; parse,
    ``{key: [ParseResponse, ...]}``."""
    if "replies" in result:
        return [{k: _normal(v, pb.SessionOutput) for k, v in step.items()} for step in result["replies"]]
    return {k: [_normal(r, pb.ParseResponse) for r in s["replies"]] for k, s in result["sessions"].items()}


def errors(result: dict[str, Any]) -> Any:
    if "replies" in result:
        return result["error"] and result["error"]["code"]
    return {k: s["error"] and s["error"]["code"] for k, s in result["sessions"].items()}


def resumes(result: dict[str, Any]) -> int:
    """Moves to a new stream: the batch stream's, or the number of Parse sessions that moved."""
    if "replies" in result:
        return result["resumes"]
    return sum(s["resumes"] > 0 for s in result["sessions"].values())


def judge(scenario: dict[str, Any], got: dict[str, Any], want: dict[str, Any]) -> None:
    """``got`` (the interrupted run) against ``want`` (the uninterrupted one) and the scenario's
    ``expect``."""
    expect = scenario.get("expect", {})
    low, high = expect.get("resumes", [0, 1 << 30])
    assert low <= resumes(got) <= high, f"resumes {resumes(got)} not in [{low}, {high}]"
    got_replies, want_replies = replies(got), replies(want)
    if "error" in expect:  # the break surfaces: what was received is a prefix of the uninterrupted run
        assert errors(got) == expect["error"], errors(got)
        if isinstance(got_replies, list):
            assert got_replies == want_replies[: len(got_replies)]
        else:  # parse: each session's replies are a prefix of its uninterrupted ones
            for key, received in got_replies.items():
                assert received == want_replies[key][: len(received)], key
        return
    assert errors(got) == errors(want), (errors(got), errors(want))
    if isinstance(want_replies, list):
        assert len(got_replies) == len(want_replies), (
            f"{len(got_replies)} replies for {len(want_replies)} steps"
        )
        for k, (reply, wanted) in enumerate(zip(got_replies, want_replies, strict=True)):
            assert reply == wanted, f"step {k} differs from the uninterrupted run"
    else:
        assert got_replies.keys() == want_replies.keys()
        for key, wanted in want_replies.items():
            assert got_replies[key] == wanted, f"session {key} differs from the uninterrupted run"
