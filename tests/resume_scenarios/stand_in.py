"""A stand-in backend for the scenario corpus: it plays what a client may meet instead of a working
parsetier server (a server's own fault, a stream reset on the way, a proxy's answer that is not
gRPC) as the status and trailers it ends calls with, and then leaves, so the client's next
attempt goes on to the real backends behind it in the target.

Every ``Parse`` / ``ParseBatch`` call is accepted, read up to its first message and ended with ``--code``,
``--message`` and the ``--trailer`` pairs; after ``--calls`` calls the process stops serving and
exits. It prints ``ready`` once it listens. The clients' retry rule (the comment on
``ParserService`` in the proto) decides from the code and trailers alone, so a scenario can show
that no client reads the message.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import grpc

SERVICE = "parsetier.v1.ParserService"


async def serve(port: int, code: grpc.StatusCode, message: str, trailers: tuple, calls: int) -> None:
    ended = 0
    done = asyncio.Event()

    async def end(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        nonlocal ended
        await context.send_initial_metadata(())  # accepted, as a server accepts a stream at once
        async for _ in requests:
            break
        ended += 1
        if ended >= calls:
            done.set()
        await context.abort(code, message, trailing_metadata=trailers)

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {name: grpc.stream_stream_rpc_method_handler(end) for name in ("Parse", "ParseBatch")},
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await done.wait()
    await server.stop(1.0)  # the last status reaches its client; new calls are refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--code", required=True, help="a gRPC status name, e.g. INTERNAL")
    parser.add_argument("--message", default="")
    parser.add_argument("--trailer", action="append", default=[], help="key=value, repeatable")
    parser.add_argument("--calls", type=int, default=1, help="calls ended before it leaves")
    args = parser.parse_args()
    trailers = tuple(tuple(pair.split("=", 1)) for pair in args.trailer)
    asyncio.run(serve(args.port, grpc.StatusCode[args.code], args.message, trailers, args.calls))


if __name__ == "__main__":
    main()
