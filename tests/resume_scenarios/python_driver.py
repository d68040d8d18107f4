"""The Python clients' driver for the resume scenario corpus (tests/resume_scenarios/README.md).

    python python_driver.py sync|async|sync-mux|async-mux  < script (one JSON line), then "go" lines

It reads one driver script, runs its ops through ``Client`` (sync) or ``AsyncClient`` (async) —
the batch API or one ``Parse`` stream per key (``-mux``: the client's multiplexed sessions, every
key's session riding one shared ``ParseBatch`` stream, with the same session API) — prints
``{"paused": NAME}`` at each pause and waits for a line on stdin, and ends with one
``{"result": ...}`` line. Nothing here knows a scenario: the harness
(tests/test_resume_scenarios.py) expands the corpus and judges the result.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
from typing import Any

import grpc

from parsetier_client import AsyncClient, Client


def encode(message: Any) -> str:
    return base64.b64encode(message.SerializeToString(deterministic=True)).decode()


def error_of(exc: grpc.RpcError) -> dict[str, str]:
    return {"code": exc.code().name, "message": exc.details() or ""}


def say(line: dict) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def pause(name: str) -> None:
    say({"paused": name})
    sys.stdin.readline()


def options(script: dict) -> list[tuple[str, int]]:
    ms = script.get("keepalive_ms")
    return [("grpc.keepalive_time_ms", ms), ("grpc.http2.max_pings_without_data", 0)] if ms else []


def client(script: dict, kind: type[Client] | type[AsyncClient], multiplex: bool = False) -> Any:
    """The script's client of ``kind`` (sync or async) on its own channel (the script's keepalive):
    its target, timeout and resume policy, multiplexed or not."""
    insecure_channel = grpc.insecure_channel if kind is Client else grpc.aio.insecure_channel
    channel = insecure_channel(script["target"], options=options(script))
    return kind(
        script["target"],
        channel=channel,
        timeout=script["timeout"],
        resume=script["resume"],
        multiplex=multiplex,
    )


def open_options(spec: dict) -> dict[str, Any]:
    """A script's ``open`` as ``open_message``'s keywords."""
    return {
        "model": spec["model"],
        "tools": spec.get("tools_json") or None,
        "prompt_token_ids": spec.get("prompt_token_ids", ()),
        "output": spec.get("output", "deltas"),
        "request_id": spec.get("request_id", ""),
    }


def queue(batch, actions: list[dict]) -> None:
    """One step's actions on a batch (either client's)."""
    for action in actions:
        op, key = action["op"], action["key"]
        if op == "open":
            batch.open(key, **open_options(action["open"]))
        elif op == "feed":
            batch.feed(key, action["ids"])
        elif op == "finish":
            batch.finish(key, action.get("reason", "stop"))
        elif op == "cancel":
            batch.cancel(key)
        else:
            raise ValueError(f"unknown op {op!r}")


def outputs(reply: dict) -> dict[str, str]:
    return {key: encode(output) for key, output in reply.items()}


# ---------------------------------------------------------------------------------------- sync
def sync_batch(script: dict) -> dict:
    replies: list[dict[str, str]] = []
    with client(script, Client) as sync_client:
        batch = sync_client.batch()
        try:
            for op in script["ops"]:
                if "send" in op:
                    queue(batch, op["send"])
                    batch.send()
                elif "receive" in op:
                    count = batch.in_flight if op["receive"] == "all" else op["receive"]
                    replies += [outputs(batch.receive()) for _ in range(count)]
                elif "pause" in op:
                    pause(op["pause"])
            while batch.in_flight:
                replies.append(outputs(batch.receive()))
            batch.close()
        except grpc.RpcError as exc:
            return {"replies": replies, "resumes": batch.resumes, "error": error_of(exc)}
        return {"replies": replies, "resumes": batch.resumes, "error": None}


def sync_parse(script: dict, multiplex: bool = False) -> dict:
    results: dict[str, dict] = {}
    streams: dict[str, Any] = {}
    readers: list[threading.Thread] = []

    def read(key: str) -> None:
        result = results[key]
        try:
            for reply in streams[key]:
                result["replies"].append(encode(reply))
        except grpc.RpcError as exc:
            result["error"] = error_of(exc)
        result["resumes"] = streams[key].resumes

    with client(script, Client, multiplex) as sync_client:
        for op in script["ops"]:
            for action in op.get("send", ()):
                key = action["key"]
                try:
                    if action["op"] == "open":
                        streams[key] = sync_client.open(**open_options(action["open"]))
                        results[key] = {"replies": [], "resumes": 0, "error": None}
                        readers.append(threading.Thread(target=read, args=(key,)))
                        readers[-1].start()
                    elif action["op"] == "feed":
                        streams[key].send(action["ids"])
                    elif action["op"] == "finish":
                        streams[key].finish(action.get("reason", "stop"))
                except grpc.RpcError:
                    pass  # resume off: the reader reports the stream's status
            if "pause" in op:
                pause(op["pause"])
        for reader in readers:
            reader.join(script["timeout"])
    return {"sessions": results}


# --------------------------------------------------------------------------------------- async
async def apause(name: str) -> None:
    say({"paused": name})
    await asyncio.to_thread(sys.stdin.readline)


async def async_batch(script: dict) -> dict:
    replies: list[dict[str, str]] = []
    async with client(script, AsyncClient) as async_client:
        batch = async_client.batch()
        try:
            for op in script["ops"]:
                if "send" in op:
                    queue(batch, op["send"])
                    await batch.send()
                elif "receive" in op:
                    count = batch.in_flight if op["receive"] == "all" else op["receive"]
                    for _ in range(count):
                        replies.append(outputs(await batch.receive()))
                elif "pause" in op:
                    await apause(op["pause"])
            while batch.in_flight:
                replies.append(outputs(await batch.receive()))
            await batch.close()
        except grpc.aio.AioRpcError as exc:
            return {"replies": replies, "resumes": batch.resumes, "error": error_of(exc)}
        return {"replies": replies, "resumes": batch.resumes, "error": None}


async def async_parse(script: dict, multiplex: bool = False) -> dict:
    results: dict[str, dict] = {}
    streams: dict[str, Any] = {}
    readers: list[asyncio.Task] = []

    async def read(key: str) -> None:
        result = results[key]
        try:
            async for reply in streams[key]:
                result["replies"].append(encode(reply))
        except grpc.aio.AioRpcError as exc:
            result["error"] = error_of(exc)
        result["resumes"] = streams[key].resumes

    async with client(script, AsyncClient, multiplex) as async_client:
        for op in script["ops"]:
            for action in op.get("send", ()):
                key = action["key"]
                if action["op"] != "open" and key not in streams:
                    continue  # its open failed: the session has nothing more to send
                try:
                    if action["op"] == "open":
                        results[key] = {"replies": [], "resumes": 0, "error": None}
                        streams[key] = await async_client.open(**open_options(action["open"]))
                        readers.append(asyncio.create_task(read(key)))
                    elif action["op"] == "feed":
                        await streams[key].send(action["ids"])
                    elif action["op"] == "finish":
                        await streams[key].finish(action.get("reason", "stop"))
                except grpc.aio.AioRpcError as exc:
                    if key not in streams:
                        results[key]["error"] = error_of(exc)  # the open itself failed
            if "pause" in op:
                await apause(op["pause"])
        await asyncio.wait_for(asyncio.gather(*readers), script["timeout"])
    return {"sessions": results}


def main() -> None:
    flavour, _, mode = sys.argv[1].partition("-")
    multiplex = mode == "mux"
    script = json.loads(sys.stdin.readline())
    if flavour == "sync":
        result = sync_batch(script) if script["api"] == "batch" else sync_parse(script, multiplex)
    elif script["api"] == "batch":
        result = asyncio.run(async_batch(script))
    else:
        result = asyncio.run(async_parse(script, multiplex))
    say({"result": result})


if __name__ == "__main__":
    main()
