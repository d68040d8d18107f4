"""When the certificates the server uses stop being valid, and a warning before they do.

grpc serves an expired certificate without a word, and clients then fail every handshake; so the
server reads each certificate's end of validity (``notAfter``) when it loads its TLS files, at
start-up and at each reload, and logs a warning for one that has expired or expires within
``EXPIRY_WARNING``. Only the date is read: the files were already checked to load (``ssl``), and
the standard library has no public X.509 parser, so this reads the few DER fields it needs.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from parsetier.service.logs import SERVER_LOG

EXPIRY_WARNING = timedelta(days=7)
"""A certificate that expires sooner than this is warned about (``certificate expires soon``)."""

_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.+?)\s*-----END CERTIFICATE-----", re.DOTALL)
_SEQUENCE, _UTC_TIME, _GENERALIZED_TIME, _EXPLICIT_0 = 0x30, 0x17, 0x18, 0xA0


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at ``at``: its tag, and where its content starts and ends."""
    tag, size = der[at], der[at + 1]
    at += 2
    if size & 0x80:  # long form: the next (size & 0x7f) bytes are the length
        count = size & 0x7F
        size = int.from_bytes(der[at : at + count], "big")
        at += count
    if at + size > len(der):
        raise ValueError("truncated DER")
    return tag, at, at + size


def _time(tag: int, text: bytes) -> datetime:
    """An X.509 time: UTCTime (YYMMDDHHMMSSZ, 50-99 meaning 19xx) or GeneralizedTime."""
    digits = text.decode("ascii").rstrip("Z")
    if tag == _UTC_TIME:
        year = int(digits[:2])
        digits = str(1900 + year if year >= 50 else 2000 + year) + digits[2:]
    return datetime.strptime(digits[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def not_after(der: bytes) -> datetime:
    """The end of validity of one DER certificate: Certificate → TBSCertificate → (version),
    serialNumber, signature, issuer, validity → notBefore, notAfter."""
    tag, start, _ = _element(der, 0)
    tag, at, _ = _element(der, start)  # TBSCertificate
    if tag != _SEQUENCE:
        raise ValueError("not a certificate")
    tag, content, end = _element(der, at)
    if tag == _EXPLICIT_0:  # version
        at = end
    for _ in range(3):  # serialNumber, signature algorithm, issuer
        at = _element(der, at)[2]
    tag, at, _ = _element(der, at)  # validity
    if tag != _SEQUENCE:
        raise ValueError("no validity")
    at = _element(der, at)[2]  # notBefore
    tag, content, end = _element(der, at)
    if tag not in (_UTC_TIME, _GENERALIZED_TIME):
        raise ValueError("notAfter is not a time")
    return _time(tag, der[content:end])


@dataclass(frozen=True, slots=True)
class Validity:
    """One certificate of a PEM file: its place in the file (1 = the first) and end of validity."""

    position: int
    not_after: datetime


def validities(pem: bytes) -> list[Validity]:
    """Every certificate of a PEM bundle that can be read, in order."""
    found = []
    for position, block in enumerate(_PEM.findall(pem), 1):
        try:
            text = b"-----BEGIN CERTIFICATE-----\n" + block + b"\n-----END CERTIFICATE-----\n"
            found.append(Validity(position, not_after(ssl.PEM_cert_to_DER_cert(text.decode("ascii")))))
        except (ValueError, IndexError, UnicodeDecodeError):
            continue  # not ours to refuse: the TLS checks decide whether the file is usable
    return found


def warn_expiring(what: str, path: Path, pem: bytes, now: datetime | None = None) -> int:
    """Log a warning per certificate of ``pem`` (``what`` at ``path``) that has expired or expires
    within ``EXPIRY_WARNING``; how many were warned about."""
    now = now or datetime.now(UTC)
    warned = 0
    for cert in validities(pem):
        left = cert.not_after - now
        if left > EXPIRY_WARNING:
            continue
        fields = {
            "file": str(path),
            "what": what,
            "position": cert.position,
            "not_after": cert.not_after.isoformat(),
            "days_left": round(left / timedelta(days=1), 2),
        }
        message = "certificate expired" if left <= timedelta(0) else "certificate expires soon"
        SERVER_LOG.warning(message, extra={"fields": fields})
        warned += 1
    return warned
