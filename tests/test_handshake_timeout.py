"""``--handshake-timeout``: a connection that says nothing, or stops half-way through its TLS
handshake or its HTTP/2 preface, is closed once the window is over; clients that talk are not
affected however long their streams last.

Each probe is a raw TCP socket on loopback that sends nothing, or a part of what a client sends
first, then waits for the server to close it. grpc's core applies the window through two channel
arguments (``parsetier.service.server.HANDSHAKE_TIMEOUT``): a TLS connection is only covered by the
handshake timeout, a plaintext one by both.
"""

from __future__ import annotations

import socket
import time

import pytest

from grpc_servers import ProcessServer, ThreadServer
from parsetier.service.security import Security, TlsFiles
from parsetier_client import Client, Tls
from tls_support import Authority

WINDOW = 1.0
"""The window the tests set (seconds)."""
WAIT = 15.0
"""Seconds a probe waits for the close: far beyond the window; the default window is 60 s."""

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
TLS_HELLO_START = b"\x16\x03\x01"  # a TLS record header, the ClientHello never follows


def closed_after(port: int, first: bytes) -> float:
    """Seconds until the server closes a connection that sent ``first`` and then nothing."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        if first:
            sock.sendall(first)
        started = time.monotonic()
        try:
            while sock.recv(65536):  # the server's SETTINGS (plaintext), then its close
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            return float("inf")
        return time.monotonic() - started


@pytest.mark.parametrize("first", [b"", PREFACE[:10], PREFACE], ids=["silent", "half-preface", "no-settings"])
def test_a_silent_plaintext_connection_is_closed_after_the_window(registry, first):
    with ThreadServer(registry, handshake_timeout=WINDOW) as server:
        waited = closed_after(server.handle.port, first)
    assert WINDOW * 0.8 <= waited < WAIT, waited


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[TlsFiles, Authority]:
    authority = Authority(tmp_path_factory.mktemp("pki"), "ca")
    pair = authority.server()
    return TlsFiles(pair.cert, pair.key), authority


@pytest.mark.parametrize("first", [b"", TLS_HELLO_START], ids=["silent", "half-hello"])
def test_a_silent_tls_connection_is_closed_after_the_window(registry, tls_files, first):
    files, _ = tls_files
    with ThreadServer(registry, security=Security(tls=files), handshake_timeout=WINDOW) as server:
        waited = closed_after(server.handle.port, first)
    assert WINDOW * 0.8 <= waited < WAIT, waited


def test_a_client_that_talks_outlives_the_window(registry, tls_files):
    """A session that lasts several windows, over TLS, with pauses longer than the window."""
    files, authority = tls_files
    with (
        ThreadServer(registry, security=Security(tls=files), handshake_timeout=WINDOW) as server,
        Client(server.target, tls=Tls(ca_file=authority.cert), timeout=30) as client,
    ):
        stream = client.open("qwen3")
        stream.send([9707])
        time.sleep(2.5 * WINDOW)
        stream.finish("stop", steps=[[0]])
        assert "".join(d.content for d in stream.deltas()) == "Hello!"
        assert client.parse_once("qwen3", [9707, 0]).final.message.content == "Hello!"


def test_the_flag_sets_the_window_of_every_worker():
    with ProcessServer("--workers", "2", "--handshake-timeout", str(WINDOW), "--preload", "none") as server:
        server.wait_for_log("workers listening", timeout=60)
        for _ in range(4):  # each connection lands on one worker or the other
            assert closed_after(server.port, b"") < WAIT
