"""TLS, mutual TLS and bearer tokens against live servers, with the sync and async Python clients
(the Go client's turn is in test_go_client.py). Certificates are made per test session with openssl."""

from __future__ import annotations

import asyncio
import shutil
import signal
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from grpc_servers import ProcessServer, ThreadServer
from parsetier.service.security import Security, TlsFiles, TokenSet, bearer_token
from parsetier_client import AsyncClient, Client, Tls
from tls_support import Authority, Pair

TOKEN = "s3cr3t-token-for-tests"
HELLO = [9707, 0]  # "Hello" and "!" in Qwen3's vocabulary


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    ca = Authority(root, "ca")
    rogue = Authority(root, "rogue")
    return {
        "ca": ca,
        "server": ca.server(),
        "client-a": ca.client("client-a"),
        "client-b": ca.client("client-b"),
        "rogue-client": rogue.client("client-a"),
        "rogue-ca": rogue,
    }


@pytest.fixture(scope="module")
def tokens(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text(f"# accepted tokens\n\nother-token\n{TOKEN}\n")
    return path


def tls_files(pki, client_ca: bool = False, names: frozenset[str] = frozenset()) -> TlsFiles:
    server: Pair = pki["server"]
    return TlsFiles(server.cert, server.key, pki["ca"].cert if client_ca else None, names)


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as failure:
        call()
    return failure.value.code()


def test_tls_accepts_verified_clients_and_rejects_plaintext(registry, pki):
    with ThreadServer(registry, security=Security(tls=tls_files(pki))) as server:
        with Client(server.target, tls=Tls(ca_file=pki["ca"].cert), timeout=30) as client:
            assert "qwen3" in [m.name for m in client.list_models()]
            assert client.parse_once("qwen3", HELLO).final.message.content == "Hello!"
        with Client(server.target, timeout=10) as plaintext:
            assert code_of(plaintext.list_models) == grpc.StatusCode.UNAVAILABLE
        with Client(server.target, tls=Tls(ca_file=pki["rogue-ca"].cert), timeout=10) as wrong_ca:
            assert code_of(wrong_ca.list_models) == grpc.StatusCode.UNAVAILABLE


def test_tokens_sync_client(registry, pki, tokens):
    with ThreadServer(registry, security=Security(tls=tls_files(pki), tokens=tokens)) as server:
        tls = Tls(ca_file=pki["ca"].cert)
        with Client(server.target, tls=tls, timeout=30) as anonymous:
            assert code_of(anonymous.list_models) == grpc.StatusCode.UNAUTHENTICATED
            assert code_of(lambda: anonymous.parse_once("qwen3", HELLO)) == grpc.StatusCode.UNAUTHENTICATED
            stream = anonymous.open("qwen3")
            stream.finish("stop", steps=[HELLO])
            assert code_of(lambda: list(stream)) == grpc.StatusCode.UNAUTHENTICATED
        with Client(server.target, tls=tls, token="wrong", timeout=30) as wrong:
            with pytest.raises(grpc.RpcError) as failure:
                wrong.list_models()
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "invalid bearer token" in failure.value.details()
        with Client(server.target, tls=tls, token=TOKEN, timeout=30) as client:
            message, _ = client.parse_stream("qwen3", [[9707], [0]])
            assert message.content == "Hello!"
        # Health stays open for probes: no token needed.
        credentials = Tls(ca_file=pki["ca"].cert).credentials()
        with grpc.secure_channel(server.target, credentials) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_tokens_async_client_over_plaintext(registry, tokens):
    """Tokens also guard a plaintext listener (a sidecar behind a mesh that encrypts the hop)."""

    async def run(target: str) -> None:
        async with AsyncClient(target, timeout=30) as anonymous:
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await anonymous.open("qwen3")
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await anonymous.parse_stream("qwen3", [HELLO])
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await anonymous.parse_once("qwen3", HELLO)
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            batch = anonymous.batch()
            batch.open("a", "qwen3")
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await batch.step()  # not a break to resume: the stream's own status
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
        async with AsyncClient(target, token=TOKEN, timeout=30) as client:
            async with client.batch() as batch:  # the batch API sends the token too
                batch.open("a", "qwen3")
                batch.feed("a", HELLO)
                batch.finish("a", "stop")
                assert (await batch.step())["a"].final.message.content == "Hello!"
            stream = await client.open("qwen3")
            await stream.send(*[[i] for i in HELLO])
            await stream.finish("stop")
            content = "".join([d.content async for d in stream.deltas()])
            assert content == "Hello!"
            assert (await client.parse_once("qwen3", HELLO)).final.message.content == "Hello!"

    with ThreadServer(registry, security=Security(tokens=tokens)) as server:
        asyncio.run(run(server.target))


def test_mutual_tls(registry, pki):
    security = Security(tls=tls_files(pki, client_ca=True))
    with ThreadServer(registry, security=security) as server:
        ca = pki["ca"].cert
        a: Pair = pki["client-a"]
        with Client(server.target, tls=Tls(ca, a.cert, a.key), timeout=30) as client:
            assert client.parse_once("qwen3", HELLO).final.message.content == "Hello!"
        with Client(server.target, tls=Tls(ca), timeout=10) as no_certificate:
            assert code_of(no_certificate.list_models) == grpc.StatusCode.UNAVAILABLE
        rogue: Pair = pki["rogue-client"]
        with Client(server.target, tls=Tls(ca, rogue.cert, rogue.key), timeout=10) as untrusted:
            assert code_of(untrusted.list_models) == grpc.StatusCode.UNAVAILABLE


def test_async_client_over_mutual_tls(registry, pki):
    """AsyncClient with tls=: verified mutual TLS works, a client without a certificate is refused."""
    security = Security(tls=tls_files(pki, client_ca=True))
    with ThreadServer(registry, security=security) as server:
        ca = pki["ca"].cert
        a: Pair = pki["client-a"]

        async def run() -> tuple[str, grpc.StatusCode]:
            async with AsyncClient(server.target, tls=Tls(ca, a.cert, a.key), timeout=30) as client:
                content = (await client.parse_once("qwen3", HELLO)).final.message.content
            async with AsyncClient(server.target, tls=Tls(ca), timeout=10) as no_certificate:
                try:
                    await no_certificate.list_models()
                except grpc.aio.AioRpcError as exc:
                    return content, exc.code()
            return content, grpc.StatusCode.OK

        content, refused = asyncio.run(run())
    assert content == "Hello!"
    assert refused == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_allowed_names(registry, pki):
    security = Security(tls=tls_files(pki, client_ca=True, names=frozenset({"client-a"})))
    with ThreadServer(registry, security=security) as server:
        ca = pki["ca"].cert
        a: Pair = pki["client-a"]
        b: Pair = pki["client-b"]
        with Client(server.target, tls=Tls(ca, a.cert, a.key), timeout=30) as allowed:
            message, _ = allowed.parse_stream("qwen3", [HELLO])
            assert message.content == "Hello!"
        with Client(server.target, tls=Tls(ca, b.cert, b.key), timeout=30) as other:
            with pytest.raises(grpc.RpcError) as failure:
                other.parse_stream("qwen3", [HELLO])
            assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "client-b" in failure.value.details()
            assert code_of(lambda: other.parse_once("qwen3", HELLO)) == grpc.StatusCode.PERMISSION_DENIED


def test_certificates_reload_when_the_files_change(registry, pki, tmp_path):
    """New connections get the new certificate once the files change; no restart."""
    live = Pair(tmp_path / "server.crt", tmp_path / "server.key")
    shutil.copy(pki["server"].cert, live.cert)
    shutil.copy(pki["server"].key, live.key)
    with ThreadServer(registry, security=Security(tls=TlsFiles(live.cert, live.key))) as server:
        with Client(server.target, tls=Tls(pki["ca"].cert), timeout=10) as client:
            assert client.list_models()
        renewed = Authority(tmp_path / "renewed", "renewed-ca")
        fresh = renewed.server()
        shutil.copy(fresh.key, live.key)
        shutil.copy(fresh.cert, live.cert)
        deadline = time.monotonic() + 15
        while True:
            with Client(server.target, tls=Tls(renewed.cert), timeout=5) as client:
                try:
                    assert client.list_models()
                    break
                except grpc.RpcError:
                    assert time.monotonic() < deadline, "the renewed certificate was never served"
                    time.sleep(0.2)
        with Client(server.target, tls=Tls(pki["ca"].cert), timeout=5) as old_trust:
            assert code_of(old_trust.list_models) == grpc.StatusCode.UNAVAILABLE


def test_sighup_reloads_tokens_and_certificates(pki, tmp_path):
    """SIGHUP alone reloads: the token file is rewritten in place with its size, inode and
    modification time kept, so the file watch sees no change and only the signal can reload it."""
    import os

    tokens = tmp_path / "tokens"
    tokens.write_text("first-token\n")
    pair: Pair = pki["server"]
    tls = ("--tls-cert", str(pair.cert), "--tls-key", str(pair.key))
    with ProcessServer("--auth-tokens", str(tokens), *tls, "--preload", "none") as server:
        secure = Tls(ca_file=pki["ca"].cert)
        with Client(server.target, tls=secure, token="first-token", timeout=10) as client:
            assert client.list_models()
        before = os.stat(tokens)
        with open(tokens, "r+b") as file:  # same length, same inode
            file.write(b"other-token\n")
        os.utime(tokens, ns=(before.st_atime_ns, before.st_mtime_ns))
        time.sleep(2.5)  # past a file-watch tick (2 s): it must not have noticed anything
        with Client(server.target, tls=secure, token="first-token", timeout=10) as client:
            assert client.list_models(), "reloaded without a SIGHUP"
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        record = server.wait_for_log("credentials reloaded")
        assert record["reason"] == "SIGHUP" and record["tokens"] == 1 and record["tls"] is True
        with Client(server.target, tls=secure, token="other-token", timeout=10) as client:
            assert client.list_models()
        with Client(server.target, tls=secure, token="first-token", timeout=10) as client:
            assert code_of(client.list_models) == grpc.StatusCode.UNAUTHENTICATED


def test_bad_files_are_one_line_errors(pki, tmp_path):
    from test_cli import parsetier

    a: Pair = pki["client-a"]
    server_cert = str(pki["server"].cert)
    mismatched = ("serve", "--tls-cert", server_cert, "--tls-key", str(a.key), "--preload", "none")
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    for args, flag in (
        (mismatched, "--tls-cert/--tls-key"),
        (("serve", "--tls-cert", str(a.cert)), "--tls-cert/--tls-key"),
        (("serve", "--auth-tokens", str(empty), "--preload", "none"), "--auth-tokens"),
        (("serve", "--auth-tokens", str(tmp_path / "missing"), "--preload", "none"), "--auth-tokens"),
    ):
        done = parsetier(*args)
        assert done.returncode == 2, done
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"parsetier serve: {flag}: "), line


def test_replay_over_tls_with_a_token(pki, tokens, tmp_path, encode):
    from test_cli import parsetier_client

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    pair: Pair = pki["server"]
    args = ("--tls-cert", str(pair.cert), "--tls-key", str(pair.key), "--auth-tokens", str(tokens))
    with ProcessServer(*args, "--preload", "qwen3") as server:
        stdin = '{"token_ids": [9707, 0], "finish_reason": "stop"}\n'
        replay = ("replay", "--server", server.target, "--model", "qwen3", "--tls-ca", str(pki["ca"].cert))
        done = parsetier_client(*replay, "--token-file", str(token_file), stdin=stdin)
        assert done.returncode == 0, done.stderr
        assert '"content": "Hello!"' in done.stdout
        done = parsetier_client(*replay, stdin=stdin)
        assert done.returncode == 1 and "UNAUTHENTICATED" in done.stderr


def test_token_comparison_and_parsing():
    tokens = TokenSet(["alpha", "beta"])
    assert tokens.accepts("beta") and not tokens.accepts("bet") and not tokens.accepts("")
    assert bearer_token([("authorization", "Bearer  abc ")]) == "abc"
    assert bearer_token([("authorization", "bearer abc")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token([]) is None


def test_health_is_open_and_reflection_guarded_under_names_and_tokens(registry, pki, tokens):
    """With --tls-client-names and --auth-tokens: a client with a certificate the names refuse and no
    token still gets health answered; reflection (both versions) needs the token and an allowed name."""
    from grpc_reflection.v1alpha import reflection_pb2

    names = frozenset({"client-a"})
    security = Security(tls=tls_files(pki, client_ca=True, names=names), tokens=tokens)
    with ThreadServer(registry, security=security, reflection_on=True) as server:
        ca = pki["ca"].cert
        a: Pair = pki["client-a"]
        b: Pair = pki["client-b"]

        def channel(pair: Pair) -> grpc.Channel:
            return grpc.secure_channel(server.target, Tls(ca, pair.cert, pair.key).credentials())

        def reflect(ch: grpc.Channel, version: str, token: str | None) -> grpc.StatusCode:
            call = ch.stream_stream(
                f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            metadata = [("authorization", f"Bearer {token}")] if token else None
            try:
                (reply,) = list(call(iter([request]), metadata=metadata, timeout=10))
            except grpc.RpcError as exc:
                return exc.code()
            assert "parsetier.v1.ParserService" in [s.name for s in reply.list_services_response.service]
            return grpc.StatusCode.OK

        with channel(b) as refused_name:
            check = health_pb2_grpc.HealthStub(refused_name).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert check.status == health_pb2.HealthCheckResponse.SERVING
            assert reflect(refused_name, "v1", TOKEN) == grpc.StatusCode.PERMISSION_DENIED
        with channel(a) as allowed:
            for version in ("v1", "v1alpha"):
                assert reflect(allowed, version, None) == grpc.StatusCode.UNAUTHENTICATED
                assert reflect(allowed, version, "wrong") == grpc.StatusCode.UNAUTHENTICATED
                assert reflect(allowed, version, TOKEN) == grpc.StatusCode.OK
