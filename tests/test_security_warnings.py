"""What the server tells its operator about its credentials: a certificate that has expired or
expires within a week (at start-up and at each reload), and calls refused for their credentials
(one warning line per interval with the count, however many there are).

Certificates are real ones from the openssl command (``tls_support``); the expired one is signed
with past dates by ``openssl ca``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from grpc_servers import ProcessServer, ThreadServer, server_logs
from parsetier.service import cert_expiry, refusal_log
from parsetier.service.security import Security, TlsFiles
from parsetier_client import Client, Tls
from tls_support import Authority, Pair

TOKEN = "the-right-token"
HELLO = [9707, 0]


def _stamp(when: datetime) -> str:
    return when.strftime("%Y%m%d%H%M%SZ")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("pki")
    ca = Authority(root, "ca")
    now = datetime.now(UTC)
    return {
        "ca": ca,
        "expired": ca.dated("expired", _stamp(now - timedelta(days=30)), _stamp(now - timedelta(days=2))),
        "soon": ca.dated("soon", _stamp(now - timedelta(days=1)), _stamp(now + timedelta(days=3))),
        "fresh": ca.dated("fresh", _stamp(now - timedelta(days=1)), _stamp(now + timedelta(days=365))),
        "client-a": ca.client("client-a"),
        "client-b": ca.client("client-b"),
    }


def _openssl_end(cert: Path) -> datetime:
    out = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-enddate"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return datetime.strptime(out.strip().removeprefix("notAfter="), "%b %d %H:%M:%S %Y %Z").replace(
        tzinfo=UTC
    )


def test_the_end_of_validity_is_read_as_openssl_reads_it(pki):
    for name in ("expired", "soon", "fresh", "client-a"):
        cert = pki[name].cert
        (validity,) = cert_expiry.validities(cert.read_bytes())
        assert validity.not_after == _openssl_end(cert), name
    chain = pki["soon"].cert.read_bytes() + pki["ca"].cert.read_bytes()
    assert [v.position for v in cert_expiry.validities(chain)] == [1, 2]
    assert cert_expiry.validities(b"no certificate here") == []


def _warnings(logs, message: str) -> list[dict]:
    return [r.fields for r in list(logs.records) if r.getMessage() == message]


def _wait_for(logs, message: str, count: int = 1, timeout: float = 15.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(found := _warnings(logs, message)) < count:
        assert time.monotonic() < deadline, (
            f"fewer than {count} {message!r}: {[r.getMessage() for r in logs.records]}"
        )
        time.sleep(0.05)
    return found


def test_expired_and_expiring_certificates_are_warned_at_start_and_at_reload(registry, pki, tmp_path):
    live = Pair(tmp_path / "server.crt", tmp_path / "server.key")
    shutil.copy(pki["expired"].cert, live.cert)
    shutil.copy(pki["expired"].key, live.key)
    with server_logs() as logs, ThreadServer(registry, security=Security(tls=TlsFiles(live.cert, live.key))):
        (expired,) = _wait_for(logs, "certificate expired")
        assert expired["file"] == str(live.cert) and expired["what"] == "TLS certificate"
        assert -3 < expired["days_left"] < -1 and expired["position"] == 1
        assert not _warnings(logs, "certificate expires soon")

        shutil.copy(pki["soon"].key, live.key)
        shutil.copy(pki["soon"].cert, live.cert)
        (soon,) = _wait_for(logs, "certificate expires soon")  # the file watch reloads within 2 s
        assert 2 < soon["days_left"] < 4 and soon["not_after"] == _openssl_end(live.cert).isoformat()

        shutil.copy(pki["fresh"].key, live.key)
        shutil.copy(pki["fresh"].cert, live.cert)
        _wait_for(logs, "credentials reloaded", count=2)
        assert len(_warnings(logs, "certificate expires soon")) == 1
        assert len(_warnings(logs, "certificate expired")) == 1


def test_a_server_started_with_an_expired_certificate_says_so(pki):
    pair = pki["expired"]
    with ProcessServer(
        "--tls-cert", str(pair.cert), "--tls-key", str(pair.key), "--preload", "none"
    ) as server:
        record = server.wait_for_log("certificate expired")
        assert record["level"] == "warning" and record["file"] == str(pair.cert)


def test_refused_credentials_are_logged_one_line_per_interval(registry, pki, tmp_path, monkeypatch):
    monkeypatch.setattr(refusal_log, "REFUSAL_LOG_INTERVAL", 1.0)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n")
    ca = pki["ca"].cert
    server_pair = pki["fresh"]
    tls = TlsFiles(server_pair.cert, server_pair.key, ca, frozenset({"client-a"}))
    a, b = pki["client-a"], pki["client-b"]
    with server_logs() as logs, ThreadServer(registry, security=Security(tls=tls, tokens=tokens)) as server:

        def call(pair: Pair, token: str | None) -> grpc.StatusCode | None:
            with Client(server.target, tls=Tls(ca, pair.cert, pair.key), token=token, timeout=10) as client:
                try:
                    client.parse_once("qwen3", HELLO)
                except grpc.RpcError as exc:
                    return exc.code()
            return None

        assert call(a, None) == grpc.StatusCode.UNAUTHENTICATED
        (first,) = _wait_for(logs, "credentials refused")
        assert first["refused"] == 1 and first["reasons"] == {"missing token": 1}
        assert first["last_method"] == "/parsetier.v1.ParserService/ParseOnce"
        assert first["last_peer"].startswith("ipv4:127.0.0.1:")

        started = time.monotonic()
        assert [call(a, "wrong") for _ in range(3)] == [grpc.StatusCode.UNAUTHENTICATED] * 3
        assert call(a, None) == grpc.StatusCode.UNAUTHENTICATED
        assert call(b, TOKEN) == grpc.StatusCode.PERMISSION_DENIED
        assert call(a, TOKEN) is None  # accepted: not counted
        if time.monotonic() - started < 0.9:  # (a slow machine may have passed the interval)
            assert len(_warnings(logs, "credentials refused")) == 1, "a line per refusal"
        _, second = _wait_for(logs, "credentials refused", count=2)
        assert second["refused"] == 5
        assert second["reasons"] == {"invalid token": 3, "missing token": 1, "client name not allowed": 1}
        time.sleep(1.5)
        assert len(_warnings(logs, "credentials refused")) == 2, "nothing more was refused"
