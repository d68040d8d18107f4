"""Replay the canitoolcall suite through a parsetier gRPC server and write ``docs/conformance.md``.

    python tests/conformance/generate_report.py --write docs/conformance.md  # own server on loopback
    python tests/conformance/generate_report.py --server localhost:50051     # a running server, to stdout
    python tests/conformance/generate_report.py --family glm --mode complete # a quick look at one family

Anyone can run it from a checkout (it puts ``server``, ``client/python``, ``protos/python`` and
``tests`` on the path itself); it needs the test extra (``canitoolcall``) and, for every family, the
tokenizers extra. ``--check`` exits 1 when a target is missed, for use in CI or a Makefile.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT / "tests", ROOT / "client" / "python", ROOT / "protos" / "python", ROOT / "server"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from canitoolcall.adapters.base import AdapterUnavailable  # noqa: E402

import marker_tokenizers  # noqa: E402

ROUND_TRIP_HEADING = "## Round-trip properties"
from conformance.adapter import Connection  # noqa: E402
from conformance.report import failure_lines, render, to_json  # noqa: E402
from conformance.run import (  # noqa: E402
    MODES,
    TARGET,
    counts,
    ok_share,
    run_suite,
    unexplained_default_failures,
    zero_tolerance_failures,
)


@contextmanager
def server(target: str | None, in_process: bool) -> Iterator[str]:
    """The server to replay through: the given one, or our own on a free loopback port.

    Our own is a ``parsetier serve`` subprocess by default — the real process, and a second core
    for parsing while this process runs the client; ``--in-process`` shares this interpreter."""
    if target:
        yield target
        return
    if in_process:
        import canitoolcall_support as support
        from grpc_servers import ThreadServer

        with ThreadServer(support.registry()) as thread_server:
            yield thread_server.target
        return
    from grpc_servers import ProcessServer

    # As tests/test_conformance.py: no overload shedding, so a busy machine's event-loop lag
    # cannot turn fixtures into harness errors.
    config = str(marker_tokenizers.config_file())
    with ProcessServer("--config", config, "--max-loop-lag-ms", "0") as process_server:
        yield process_server.target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", metavar="HOST:PORT", help="use a running server instead of starting one")
    parser.add_argument("--in-process", action="store_true", help="start the server in this process")
    parser.add_argument("--write", type=Path, metavar="PATH", help="write the markdown report here")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write machine-readable results")
    parser.add_argument("--family", action="append", help="only this family (repeatable)")
    parser.add_argument("--mode", choices=MODES, action="append", help="only this mode (default: both)")
    parser.add_argument("--concurrency", type=int, default=64, help="RPCs in flight at once")
    parser.add_argument("--check", action="store_true", help="exit 1 when a conformance target is missed")
    args = parser.parse_args(argv)
    modes = tuple(m for m in MODES if m in (args.mode or MODES))

    started = time.perf_counter()
    try:
        with (
            server(args.server, args.in_process) as target,
            Connection(target, limit=args.concurrency) as conn,
        ):
            ready = time.perf_counter()
            run = run_suite(conn, modes, args.family)
    except AdapterUnavailable as exc:
        print(f"conformance: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2

    report = render(run)
    if args.write:
        # The round-trip section is written by hand from tests/test_roundtrip.py: keep it.
        previous = args.write.read_text(encoding="utf-8") if args.write.is_file() else ""
        kept = previous[previous.find(ROUND_TRIP_HEADING) :] if ROUND_TRIP_HEADING in previous else ""
        args.write.write_text(report + "\n" + ("\n" + kept if kept else ""), encoding="utf-8")
    elif not args.json:
        print(report)
    if args.json:
        args.json.write_text(json.dumps(to_json(run), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    missed = []
    for mode in modes:
        c = counts(run.outcomes[mode])
        ok, supported = ok_share(run.outcomes[mode])
        print(f"{mode:9} {c}  pass+soft {ok}/{supported}", file=sys.stderr)
        for line in failure_lines(run, mode):
            print(f"  {line}", file=sys.stderr)
        if zero_tolerance_failures(run.outcomes[mode]):
            missed.append(f"{mode}: zero-tolerance check failures")
        if mode == "complete" and supported and ok / supported < TARGET:
            missed.append(f"complete: {ok}/{supported} below {TARGET:.0%}")
    if "default" in modes and "complete" in modes and unexplained_default_failures(run):
        missed.append("default: failures that are neither the truncation policy nor complete-mode failures")
    print(
        f"server ready in {ready - started:.1f} s, replay {run.seconds:.1f} s, "
        f"total {time.perf_counter() - started:.1f} s" + (f"; wrote {args.write}" if args.write else ""),
        file=sys.stderr,
    )
    for line in missed:
        print(f"target missed: {line}", file=sys.stderr)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
