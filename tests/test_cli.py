"""The command line as an operator meets it: one-line errors naming the flag, the start-up summary,
inline or file JSON for --tools, and README and --help listing the same serve flags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from grpc_servers import ROOT, ProcessServer, subprocess_env
from service_samples import WEATHER_TOOLS


def parsetier(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The server's ``parsetier`` command."""
    return _run("parsetier.cli", args, stdin)


def parsetier_client(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The client's ``parsetier-client`` command."""
    return _run("parsetier_client.cli", args, stdin)


def _run(module: str, args: tuple[str, ...], stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(),
    )


REPLAY = ["replay", "--server", "127.0.0.1:1", "--model", "qwen3"]


FLAG_ERRORS = [
    (["serve", "--port", "http"], "--port"),
    (["serve", "--reflection", "maybe"], "--reflection"),
    (["serve", "--log-level", "loud"], "--log-level"),
    (["serve", "--port", "99999"], "--port"),
    (["serve", "--metrics-port", "70000"], "--metrics-port"),
    (["serve", "--workers", "0"], "--workers"),
    (["serve", "--grace", "-1"], "--grace"),
    (["serve", "--idle-timeout", "0"], "--idle-timeout"),
    (["serve", "--max-sessions", "0"], "--max-sessions"),
    (["serve", "--max-message-bytes", "-5"], "--max-message-bytes"),
    (["serve", "--max-tokens-per-session", "many"], "--max-tokens-per-session"),
    (["serve", "--max-loop-lag-ms", "-1"], "--max-loop-lag-ms"),
    (["serve", "--max-loop-lag-ms", "nan"], "--max-loop-lag-ms"),
    ([*REPLAY, "--tools", "[{"], "--tools"),
    ([*REPLAY, "--tools", "missing.json"], "--tools"),
    ([*REPLAY, "--tools", '{"a": 1}'], "--tools"),
    ([*REPLAY, "--prompt-ids", "[1, -2]"], "--prompt-ids"),
    ([*REPLAY, "--timeout", "0"], "--timeout"),
]
"""Values the argument types refuse while parsing: nothing has started yet."""

SERVE_ERRORS = [
    (["serve", "--config", "/nonexistent/models.toml"], "--config"),
    (["serve", "--preload", "no-such-model"], "--preload"),
    (["serve", "--max-reply-bytes", "100"], "--max-reply-bytes"),
    (["serve", "--host", "203.0.113.1", "--port", "0", "--preload", "none"], "--host/--port"),
]
"""Values found wrong only once ``serve`` runs (a file, a model, an address)."""


def _assert_one_line(stderr: str, args: list[str], flag: str) -> None:
    prog = "parsetier-client" if args[0] == "replay" else "parsetier"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"{prog} {args[0]}: {flag}: "), lines[0]
    assert "Traceback" not in stderr


@pytest.mark.parametrize(("args", "flag"), FLAG_ERRORS)
def test_flag_errors_are_one_line_naming_the_flag(args, flag, capsys, monkeypatch):
    """In process (a command's parser is all that runs): exit status 2 and one line on stderr,
    before anything is served or sent."""
    from parsetier import cli
    from parsetier_client import cli as client_cli
    from parsetier_client import replay

    def started(*_args, **_kwargs):
        raise AssertionError(f"{args[0]} started despite a bad {flag}")

    monkeypatch.setattr(cli, "_serve", started)
    monkeypatch.setattr(replay, "run", started)
    main = client_cli.main if args[0] == "replay" else cli.main
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    assert exit_.value.code == 2
    _assert_one_line(capsys.readouterr().err, args, flag)


@pytest.mark.parametrize(("args", "flag"), SERVE_ERRORS)
def test_serve_errors_are_one_line_naming_the_flag(args, flag):
    """As an operator meets them: the ``parsetier`` process exits 2 with one line."""
    done = parsetier(*args)
    assert done.returncode == 2, done
    _assert_one_line(done.stderr, args, flag)


def test_bad_toml_names_the_config(tmp_path):
    config = tmp_path / "models.toml"
    config.write_text("[[models]\nname = 'x'\n")
    done = parsetier("serve", "--config", str(config))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("parsetier serve: --config: ") and str(config) in line


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_prints_where_it_listens_and_the_tokenizers(workers):
    """The same summary from one process and from a supervisor of worker processes."""
    with ProcessServer("--preload", "none", "--workers", workers) as server:
        text = "\n".join(_wait_lines(server, 3))
    assert f"listening on 127.0.0.1:{server.port} (gRPC, plaintext" in text
    assert ("2 worker processes" in text) is (workers == "2")
    assert "reflection on" in text
    ready = re.search(r"models with tokenizers \(\d+\): (.*)", text)
    assert ready and {"qwen3", "qwen3-coder"} <= set(ready.group(1).split(", "))


def _wait_lines(server: ProcessServer, count: int) -> list[str]:
    deadline = time.monotonic() + 10
    while len(server.stdout) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return list(server.stdout)


@pytest.mark.parametrize("form", ["inline", "file"])
def test_replay_tools_inline_or_file(grpc_server, encode, tmp_path, form):
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    stdin = json.dumps({"token_ids": encode(text), "finish_reason": "stop"}) + "\n"
    tools = json.dumps(WEATHER_TOOLS)
    if form == "file":
        path = tmp_path / "tools.json"
        path.write_text(tools)
        tools = str(path)
    args = ("replay", "--server", grpc_server.target, "--model", "qwen3", "--tools", tools)
    done = parsetier_client(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout.splitlines()[-1])["final"]
    assert final["finish_reason"] == "tool_calls"
    assert final["message"]["tool_calls"][0]["name"] == "get_weather"


def _flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", text))


def test_readme_and_help_list_the_same_serve_flags():
    help_text = parsetier("serve", "--help").stdout
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### `parsetier serve` flags", 1)[1].split("\n#", 1)[0]
    assert _flags(help_text) - {"--help"} == _flags(section) - {"--help"}


def _readme_serve_rows() -> dict[str, str]:
    """The README's serve-flag table: each single-flag row's flag and its default column."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### `parsetier serve` flags", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        flags = _flags(cells[0]) if cells else set()
        if len(cells) >= 3 and len(flags) == 1:
            rows[flags.pop()] = cells[1].strip("`")
    return rows


def test_readme_defaults_are_the_serve_defaults_and_every_flag_has_help():
    """What the README's table says a flag defaults to is what argparse uses (and --help shows)."""
    import argparse

    from parsetier.cli import _serve_arguments

    parser = argparse.ArgumentParser()
    _serve_arguments(parser)
    actions = {a.option_strings[-1]: a for a in parser._actions if a.option_strings[-1] != "--help"}
    assert [flag for flag, a in actions.items() if not a.help] == [], "serve flags without help text"
    rows = _readme_serve_rows()
    assert len(rows) > 10, rows
    for flag, default in rows.items():
        actual = actions[flag].default
        if default in ("none", "off", "cores"):
            assert actual in (None, False), (flag, default, actual)
        elif default.startswith("--"):  # another flag's value
            assert actual is None, (flag, actual)
        elif re.fullmatch(r"\d+(\.\d+)?", default):
            assert float(default) == float(actual), (flag, default, actual)
        else:
            assert default == str(actual), (flag, default, actual)
