"""``parsetier-client replay``: stream a captured token-id output through a server and print what
comes back.

Input (stdin), one JSON object per line, one decode step each:
    {"token_ids": [151667, 198, ...]}          or  {"text": "already detokenized"}
    {"token_ids": [...], "finish_reason": "stop", "matched_stop": 151645}   (the last line)
A line may carry only ``finish_reason``. Without any, the output finishes with ``stop``.

Output (stdout), one JSON object per line, as the server answers:
    {"seq": 1, "delta": {"reasoning": "..."}}    {"seq": 1, "event": {...}}    {"final": {...}}

Steps are sent while stdin is still being read, so piping a live capture shows deltas live.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import grpc

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_args import positive_float, token_ids_argument, tools_argument
from parsetier_client.arguments import add_connection_arguments, connection
from parsetier_client.requests import OUTPUT_KINDS, finish_message, open_message, step_message
from parsetier_client.result import delta_dict, event_dict, final_dict
from parsetier_client.sync import Client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", required=True, help="HOST:PORT of a parsetier server")
    parser.add_argument("--model", required=True, help="model name (see the server's ListModels)")
    parser.add_argument(
        "--tools",
        type=tools_argument,
        help="the OpenAI request's tools array: inline JSON ('[{...}]') or a JSON file",
    )
    parser.add_argument("--tool-choice", help="auto, none, required, or a function name")
    parser.add_argument("--no-parallel-tool-calls", action="store_true")
    parser.add_argument("--thinking", choices=("on", "off"), help="the chat template's thinking switch")
    parser.add_argument("--no-reasoning", action="store_true", help="leave reasoning out of the output")
    parser.add_argument(
        "--prompt-ids",
        type=token_ids_argument,
        help="the prompt's (tail) token ids: a JSON array, inline or a file",
    )
    parser.add_argument("--output", choices=sorted(OUTPUT_KINDS), default="deltas")
    parser.add_argument("--include-stop-text", action="store_true")
    parser.add_argument("--complete-tool-calls", action="store_true")
    parser.add_argument("--request-id", default="replay")
    parser.add_argument("--timeout", type=positive_float, default=None, help="seconds for the whole stream")
    add_connection_arguments(parser)


class InputError(ValueError):
    """A stdin line that is not a step."""


def _steps_of(line: dict[str, Any]) -> list[pb.Step]:
    if "token_ids" in line:
        return [step_message(list(line["token_ids"]))]
    if "text" in line:
        return [step_message(str(line["text"]))]
    return []


def client_messages(args: argparse.Namespace, stdin: TextIO) -> Iterator[pb.ParseRequest]:
    """Open, then one message per input line; the finish rides on the line that names it."""
    tools = args.tools  # already the array's JSON text (``tools_argument``)
    yield pb.ParseRequest(
        open=open_message(
            args.model,
            tools=tools,
            tool_choice=args.tool_choice,
            parallel_tool_calls=False if args.no_parallel_tool_calls else None,
            include_reasoning=False if args.no_reasoning else None,
            thinking=None if args.thinking is None else args.thinking == "on",
            prompt_token_ids=args.prompt_ids or (),
            output=args.output,
            include_stop_text=args.include_stop_text,
            complete_tool_calls=args.complete_tool_calls,
            request_id=args.request_id,
        )
    )
    for number, raw in enumerate(stdin, 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            # Raised on gRPC's request thread, which cancels the call; ``run`` reports it.
            raise InputError(f"stdin line {number} is not JSON: {exc}") from None
        message = pb.ParseRequest(steps=_steps_of(line))
        if "finish_reason" in line:
            message.finish.CopyFrom(finish_message(line["finish_reason"], line.get("matched_stop")))
            yield message
            return
        yield message
    yield pb.ParseRequest(finish=finish_message("stop"))


def _emit(stdout: TextIO, obj: dict[str, Any]) -> None:
    stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    stdout.flush()


def run(args: argparse.Namespace, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    errors: list[InputError] = []

    def requests() -> Iterator[pb.ParseRequest]:
        try:
            yield from client_messages(args, stdin)
        except InputError as exc:
            errors.append(exc)
            raise

    with Client(args.server, timeout=args.timeout, **connection(args)) as client:
        try:
            for message in client.parse(requests()):
                for delta in message.deltas:
                    _emit(stdout, {"seq": message.sequence, "delta": delta_dict(delta)})
                for event in message.events:
                    _emit(stdout, {"seq": message.sequence, "event": event_dict(event)})
                if message.HasField("final"):
                    _emit(stdout, {"final": final_dict(message.final)})
        except grpc.RpcError as exc:
            reason = str(errors[0]) if errors else f"{exc.code().name}: {exc.details()}"
            print(f"parsetier-client replay: {reason}", file=sys.stderr)
            return 1
    return 0
