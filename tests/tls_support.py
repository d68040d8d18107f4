"""Test certificates made with the openssl command (Debian's openssl; `make deps` installs it):
a CA, a server certificate for 127.0.0.1 / localhost, and client certificates."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testkit.servers import ProcessServer


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is required for the TLS tests (`make deps` installs it)"
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Authority:
    """A throwaway CA in ``directory`` that signs leaf certificates (EC P-256, valid 30 days: longer
    than the server's expiry warning)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        directory.mkdir(parents=True, exist_ok=True)
        self.cert = directory / f"{name}.crt"
        self.key = directory / f"{name}.key"
        _openssl(
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", self.key.name, "-out", self.cert.name, "-days", "30", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
            cwd=directory,
        )  # fmt: skip

    def _request(self, stem: str, common_name: str) -> None:
        """A new EC P-256 key ``{stem}.key`` and its signing request ``{stem}.csr`` for ``common_name``."""
        _openssl(
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{stem}.key", "-out", f"{stem}.csr", "-subj", f"/CN={common_name}",
            cwd=self.directory,
        )  # fmt: skip

    def issue(self, common_name: str, sans: list[str], usage: str) -> Pair:
        """A leaf for ``usage`` (serverAuth or clientAuth) with the given subjectAltName entries."""
        stem = f"{self.name}-{common_name}"
        extensions = self.directory / f"{stem}.ext"
        extensions.write_text(
            f"subjectAltName={','.join(sans)}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"
        )
        self._request(stem, common_name)
        _openssl(
            "x509", "-req", "-in", f"{stem}.csr", "-CA", self.cert.name, "-CAkey", self.key.name,
            "-CAcreateserial", "-out", f"{stem}.crt", "-days", "30", "-extfile", extensions.name,
            cwd=self.directory,
        )  # fmt: skip
        return Pair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")

    def dated(self, common_name: str, not_before: str, not_after: str) -> Pair:
        """A server leaf valid from ``not_before`` to ``not_after`` (``YYYYMMDDHHMMSSZ``, past dates
        too: an expired certificate), signed with ``openssl ca``, which takes both dates."""
        stem = f"{self.name}-{common_name}"
        (self.directory / f"{stem}.ext").write_text(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
        )
        (self.directory / f"{stem}.cnf").write_text(
            "[ca]\ndefault_ca = dated\n[dated]\n"
            f"database = {stem}.index\nnew_certs_dir = .\nserial = {stem}.serial\n"
            "default_md = sha256\npolicy = anything\nunique_subject = no\n[anything]\ncommonName = supplied\n"
        )
        (self.directory / f"{stem}.index").write_text("")
        (self.directory / f"{stem}.serial").write_text("01\n")
        self._request(stem, common_name)
        _openssl(
            "ca", "-batch", "-config", f"{stem}.cnf", "-cert", self.cert.name, "-keyfile", self.key.name,
            "-in", f"{stem}.csr", "-out", f"{stem}.crt", "-startdate", not_before, "-enddate", not_after,
            "-notext", "-extfile", f"{stem}.ext",
            cwd=self.directory,
        )  # fmt: skip
        return Pair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")

    def server(self) -> Pair:
        return self.issue("parsetier-test-server", ["DNS:localhost", "IP:127.0.0.1"], "serverAuth")

    def client(self, name: str) -> Pair:
        return self.issue(name, [f"DNS:{name}"], "clientAuth")


@contextmanager
def secure_server(directory: Path, client: str) -> Iterator[tuple[ProcessServer, dict[str, str]]]:
    """A server with mutual TLS and bearer tokens (qwen3 preloaded), and the ``PARSETIER_SECURE_*``
    variables the clients' own secure suites read: its target, the CA, a client pair for
    ``{client}-client`` and the token ``{client}-test-token``."""
    ca = Authority(directory, "ca")
    server_pair, client_pair = ca.server(), ca.client(f"{client}-client")
    token = f"{client}-test-token"
    tokens = directory / "tokens"
    tokens.write_text(f"{token}\n")
    args = ["--tls-cert", str(server_pair.cert), "--tls-key", str(server_pair.key)]
    args += ["--tls-client-ca", str(ca.cert), "--auth-tokens", str(tokens), "--preload", "qwen3"]
    with ProcessServer(*args) as server:
        yield (
            server,
            {
                "PARSETIER_SECURE_SERVER": server.target,
                "PARSETIER_SECURE_CA": str(ca.cert),
                "PARSETIER_SECURE_CLIENT_CERT": str(client_pair.cert),
                "PARSETIER_SECURE_CLIENT_KEY": str(client_pair.key),
                "PARSETIER_SECURE_TOKEN": token,
            },
        )
