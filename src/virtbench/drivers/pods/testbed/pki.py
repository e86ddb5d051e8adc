"""The cluster's keys, made fresh by every `up`: a CA, serving certificates (API server, kubelets),
client certificates (one identity per component, as RBAC's bootstrap roles expect) and the
service-account signing key pair. Every file is written 0600; nothing leaves the state directory.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30  # a testbed lives for a run or a day, not a year


def write_private(path: Path, data: bytes) -> None:
    """Create (or replace) a file readable by its owner only, mode set before any byte is written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def new(cls, cn: str, not_after: dt.datetime | None = None) -> CA:
        key = _key()
        now = dt.datetime.now(dt.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(minutes=5))
                .not_valid_after(not_after or now + dt.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    def issue(self, cn: str, org: str | None = None, *, server: bool = False, client: bool = False,
              dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
              not_after: dt.datetime | None = None) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a leaf; `not_after` in the past makes an expired one (tests)."""
        key = _key()
        now = dt.datetime.now(dt.timezone.utc)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
                 ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        b = (x509.CertificateBuilder().subject_name(_name(cn, org)).issuer_name(self.cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(min(now - dt.timedelta(minutes=5), (not_after or now) - dt.timedelta(days=1)))
             .not_valid_after(not_after or now + dt.timedelta(days=VALID_DAYS))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if dns or ips:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
                critical=False)
        cert = b.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def write(self, directory: Path) -> None:
        write_private(directory / "ca.crt", self.cert.public_bytes(serialization.Encoding.PEM))
        write_private(directory / "ca.key", _key_pem(self.key))


def write_pair(directory: Path, stem: str, pair: tuple[bytes, bytes]) -> tuple[Path, Path]:
    crt, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    write_private(crt, pair[0])
    write_private(key, pair[1])
    return crt, key


def write_sa_keys(directory: Path) -> tuple[Path, Path]:
    """The service-account token signing key and its public half."""
    key = _key()
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    write_private(directory / "sa.key", _key_pem(key))
    write_private(directory / "sa.pub", pub)
    return directory / "sa.key", directory / "sa.pub"
