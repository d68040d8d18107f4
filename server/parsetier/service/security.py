"""Transport security and authentication: TLS with reloadable certificates, mutual TLS with an
optional allow-list of client names, and bearer tokens from a file.

What is checked where:
- TLS and the client certificate (mTLS) are the handshake's job (grpc's credentials).
- Bearer tokens and client names are checked per RPC by ``AuthInterceptor``: a missing or wrong
  token is UNAUTHENTICATED; a client certificate whose names are not allowed is PERMISSION_DENIED.
- ``grpc.health.v1.Health`` is exempt, so load balancers and kubelet probes need no credentials.

Reloading: the certificate, key, client CA and token files are re-read when one of them changes
(polled every ``POLL_SECONDS``) or on SIGHUP. New files are checked first (the key must match the
certificate, the token file must hold a token); a bad set is logged and the old one stays. New TLS
settings apply to new connections, through grpc's certificate-configuration fetcher, which grpc
calls at each handshake; open connections keep the certificate they were made with.

Expiry: at start-up and at each reload, a certificate (chain or client CA) that has expired or
expires within a week is logged as a warning (``parsetier.service.cert_expiry``).

Refusals: calls refused for their credentials are logged as a warning, one line per minute at most
with how many were refused since the last (``parsetier.service.refusal_log``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from parsetier.service.cert_expiry import warn_expiring
from parsetier.service.errors import abort
from parsetier.service.handlers import kind_of, rebuilt
from parsetier.service.logs import SERVER_LOG
from parsetier.service.refusal_log import RefusalLog
from parsetier.status import Code, ProtocolError

POLL_SECONDS = 2.0
OPEN_SERVICES = ("/grpc.health.v1.Health/",)
"""Method prefixes that need no credentials (health probes)."""


class SecurityConfigError(ValueError):
    """A TLS or token file that cannot be used; names the file, and ``flag`` the CLI flag."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


_FLAGS = {
    "TLS certificate": "--tls-cert",
    "TLS key": "--tls-key",
    "client CA": "--tls-client-ca",
    "token file": "--auth-tokens",
}


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The server's certificate chain and key (PEM); with ``client_ca``, clients must present a
    certificate signed by it (mTLS), and with ``client_names`` too, one naming one of them (its
    subject common name or a DNS/URI/email subject alternative name)."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    client_names: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Security:
    """What ``build_server`` needs for a secured listener; either part may be absent."""

    tls: TlsFiles | None = None
    tokens: Path | None = None


def _read(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SecurityConfigError(_FLAGS[what], f"{what} {path}: {exc.strerror}") from None
    if not data.strip():
        raise SecurityConfigError(_FLAGS[what], f"{what} {path} is empty")
    return data


@dataclass(frozen=True, slots=True)
class _TlsMaterial:
    cert: bytes
    key: bytes
    client_ca: bytes | None

    @classmethod
    def load(cls, files: TlsFiles) -> _TlsMaterial:
        material = cls(
            _read(files.cert, "TLS certificate"),
            _read(files.key, "TLS key"),
            _read(files.client_ca, "client CA") if files.client_ca else None,
        )
        material.check(files)
        return material

    def check(self, files: TlsFiles) -> None:
        """Fail now, naming the file, rather than at every handshake later."""
        # The files were just read into this object; loading them by path once more can only
        # disagree if they change again meanwhile, and then the next reload checks the new ones.
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(files.cert, files.key)
        except ssl.SSLError as exc:
            raise SecurityConfigError(
                "--tls-cert/--tls-key",
                f"TLS certificate {files.cert} and key {files.key} do not load together: {exc.reason}",
            ) from None
        if self.client_ca is not None:
            try:
                ssl.create_default_context(cadata=self.client_ca.decode("ascii"))
            except (ssl.SSLError, ValueError, UnicodeDecodeError) as exc:
                problem = f"client CA {files.client_ca} is not PEM certificates: {exc}"
                raise SecurityConfigError("--tls-client-ca", problem) from None

    def configuration(self) -> Any:
        return grpc.ssl_server_certificate_configuration([(self.key, self.cert)], self.client_ca)


class TokenSet:
    """Accepted bearer tokens. A request's token is compared with every accepted one in constant
    time over SHA-256 digests, so neither a token's content nor its length leaks through timing."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._digests = [hashlib.sha256(token.encode("utf-8")).digest() for token in tokens]

    @classmethod
    def load(cls, path: Path) -> TokenSet:
        """One token per line; blank lines and lines starting with ``#`` are ignored."""
        lines = _read(path, "token file").decode("utf-8", "replace").splitlines()
        tokens = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if not tokens:
            raise SecurityConfigError("--auth-tokens", f"token file {path} holds no token")
        return cls(tokens)

    def __len__(self) -> int:
        return len(self._digests)

    def accepts(self, token: str) -> bool:
        given = hashlib.sha256(token.encode("utf-8")).digest()
        found = False
        for digest in self._digests:
            found |= hmac.compare_digest(given, digest)
        return found


def bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The token of an ``authorization: Bearer <token>`` header, else None."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def peer_names(auth_context: dict[str, list[bytes]]) -> set[str]:
    """The names a verified client certificate carries: subject CN and subject alternative names."""
    names = set()
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        names.update(value.decode("utf-8", "replace") for value in auth_context.get(key, ()))
    return names


class SecurityState:
    """The live TLS material and tokens, and their reloading (file change or SIGHUP)."""

    def __init__(self, security: Security) -> None:
        self.security = security
        self._tls = _TlsMaterial.load(security.tls) if security.tls else None
        self._pending_tls: _TlsMaterial | None = None
        self.tokens = TokenSet.load(security.tokens) if security.tokens else None
        self._stamps = self._file_stamps()
        self._task: asyncio.Task[None] | None = None
        self._reload_now: asyncio.Event | None = None

    @property
    def client_names(self) -> frozenset[str]:
        return self.security.tls.client_names if self.security.tls else frozenset()

    @property
    def checks_requests(self) -> bool:
        """Whether RPCs need the ``AuthInterceptor`` (tokens, or an allow-list of client names)."""
        return self.tokens is not None or bool(self.client_names)

    # --- grpc credentials ----------------------------------------------------------------------

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if self._tls is None or self.security.tls is None:
            return None
        return grpc.dynamic_ssl_server_credentials(
            self._tls.configuration(),
            self._fetch_configuration,
            require_client_authentication=self.security.tls.client_ca is not None,
        )

    def _fetch_configuration(self) -> Any:
        """grpc's fetcher, called at each TLS handshake: a new configuration once, else None."""
        material, self._pending_tls = self._pending_tls, None
        return material.configuration() if material is not None else None

    # --- reloading -----------------------------------------------------------------------------

    def _files(self) -> list[Path]:
        tls = self.security.tls
        files = [tls.cert, tls.key, *([tls.client_ca] if tls.client_ca else [])] if tls else []
        return files + ([self.security.tokens] if self.security.tokens else [])

    def _file_stamps(self) -> dict[Path, tuple[int, int, int]]:
        stamps = {}
        for path in self._files():
            with contextlib.suppress(OSError):
                info = path.stat()
                stamps[path] = (info.st_mtime_ns, info.st_size, info.st_ino)
        return stamps

    def reload(self, reason: str) -> bool:
        """Re-read every file; swap them in only if all are usable. True when swapped."""
        self._stamps = self._file_stamps()
        try:
            tls = _TlsMaterial.load(self.security.tls) if self.security.tls else None
            tokens = TokenSet.load(self.security.tokens) if self.security.tokens else None
        except SecurityConfigError as exc:
            fields = {"reason": reason, "error": str(exc)}
            SERVER_LOG.error("credentials not reloaded", extra={"fields": fields})
            return False
        if tls is not None:
            self._tls = self._pending_tls = tls
        self.tokens = tokens
        fields = {"reason": reason, "tls": tls is not None, "tokens": len(tokens) if tokens else 0}
        SERVER_LOG.info("credentials reloaded", extra={"fields": fields})
        self.warn_expiring()
        return True

    def warn_expiring(self) -> int:
        """Warn about the live certificates that have expired or expire within a week; how many."""
        files, material = self.security.tls, self._tls
        if files is None or material is None:
            return 0
        warned = warn_expiring("TLS certificate", files.cert, material.cert)
        if files.client_ca is not None and material.client_ca is not None:
            warned += warn_expiring("client CA", files.client_ca, material.client_ca)
        return warned

    def request_reload(self) -> None:
        """For the SIGHUP handler (on the event loop)."""
        if self._reload_now is not None:
            self._reload_now.set()

    def start(self) -> None:
        """Serving starts: warn about expiring certificates, and watch the files."""
        self.warn_expiring()
        if self._files() and self._task is None:
            self._reload_now = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _watch(self) -> None:
        assert self._reload_now is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reload_now.wait(), POLL_SECONDS)
            if self._reload_now.is_set():
                self._reload_now.clear()
                self.reload("SIGHUP")
            elif self._file_stamps() != self._stamps:
                self.reload("file changed")


# --- the per-RPC check -------------------------------------------------------------------------


Failure = ProtocolError
REFUSAL_READ_TIMEOUT = 1.0
"""Seconds a refused streaming call waits for the client's first message (see ``_refusal``)."""


MISSING_TOKEN = ProtocolError(Code.UNAUTHENTICATED, "missing credentials: send authorization: Bearer <token>")
INVALID_TOKEN = ProtocolError(Code.UNAUTHENTICATED, "invalid bearer token")


def _refusal(
    handler: grpc.RpcMethodHandler, failure: Failure, noted: Callable[[str], None]
) -> grpc.RpcMethodHandler:
    """``handler``'s shape, answering only ``failure`` (``noted(peer)`` first). A streaming
    request's first message is read first (briefly): grpc's asyncio client reports INTERNAL rather
    than the status when a write is in flight as the status arrives (grpc/grpc#36066), and clients
    write their Open at once."""
    kind = kind_of(handler)

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        noted(context.peer())
        if kind.startswith("stream"):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(anext(aiter(request)), REFUSAL_READ_TIMEOUT)
        await abort(context, failure)

    return rebuilt(handler, kind, refuse)


def _guarded(handler: grpc.RpcMethodHandler, check: Callable[[Any], Failure | None]) -> grpc.RpcMethodHandler:
    """``handler`` with ``check(context)`` run before its behaviour; a failed check aborts."""
    kind = kind_of(handler)
    behaviour = getattr(handler, kind)
    if inspect.isasyncgenfunction(behaviour):

        async def guarded(request: Any, context: grpc.aio.ServicerContext):
            if (failure := check(context)) is not None:
                await abort(context, failure)
            async for reply in behaviour(request, context):
                yield reply

    else:

        async def guarded(request: Any, context: grpc.aio.ServicerContext):  # type: ignore[misc]
            if (failure := check(context)) is not None:
                await abort(context, failure)
            return await behaviour(request, context)

    return rebuilt(handler, kind, guarded)


@dataclass(slots=True)
class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Bearer tokens (from request metadata) and client-certificate names, for every RPC except
    the open services (health). Refusals are logged, rate-limited (``refusals``)."""

    state: SecurityState
    refusals: RefusalLog = field(default_factory=RefusalLog)

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_SERVICES):
            return handler
        failure = self._check_token(handler_call_details.invocation_metadata)
        if failure is not None:
            reason = "missing token" if failure is MISSING_TOKEN else "invalid token"
            return _refusal(handler, failure, lambda peer: self.refusals.refused(reason, method, peer))
        if not self.state.client_names:
            return handler
        return _guarded(handler, lambda context: self._check_names(context, method))

    def _check_token(self, metadata: Any) -> Failure | None:
        tokens = self.state.tokens
        if tokens is None:
            return None
        token = bearer_token(metadata)
        if token is None:
            return MISSING_TOKEN
        if not tokens.accepts(token):
            return INVALID_TOKEN
        return None

    def _check_names(self, context: grpc.aio.ServicerContext, method: str) -> Failure | None:
        names = peer_names(context.auth_context())
        if names & self.state.client_names:
            return None
        self.refusals.refused("client name not allowed", method, context.peer())
        shown = ", ".join(sorted(names)) or "none"
        return ProtocolError(Code.PERMISSION_DENIED, f"client certificate names ({shown}) are not allowed")
