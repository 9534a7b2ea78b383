"""Certificates made on the spot for tests and benchmarks (never checked in): a CA, server
certificates for 127.0.0.1 and localhost, client certificates with a chosen subject, each
written as PEM files. EC P-256 keys (fast to make)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pem:
    """A certificate and its key as PEM files."""

    cert: Path
    key: Path


def _name(subject: str) -> x509.Name:
    """`CN=a,OU=b,O=c` (most specific first, as RFC 4514 writes it) as an x509 Name."""
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "O": NameOID.ORGANIZATION_NAME, "L": NameOID.LOCALITY_NAME,
            "ST": NameOID.STATE_OR_PROVINCE_NAME, "C": NameOID.COUNTRY_NAME}
    parts = [part.split("=", 1) for part in subject.split(",")]
    return x509.Name([x509.NameAttribute(oids[k.strip()], v) for k, v in reversed(parts)])


class CertificateAuthority:
    """A CA whose certificates are written under `directory`."""

    def __init__(self, directory: Path, name: str = "CN=silt test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(name)
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                     .add_extension(x509.KeyUsage(
                         digital_signature=True, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=True, crl_sign=True, encipher_only=False,
                         decipher_only=False), True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(
                         self.key.public_key()), False)
                     .sign(self.key, hashes.SHA256()))
        self.path = directory / "ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, file: str, subject: str, *, server: bool = False,
              not_before: datetime.datetime | None = None,
              not_after: datetime.datetime | None = None) -> Pem:
        """A certificate for `subject` (a server one names 127.0.0.1 and localhost), valid
        from yesterday for 30 days unless told otherwise, written as `<file>.pem` and
        `<file>.key`."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder().subject_name(_name(subject))
                   .issuer_name(self.name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(not_before or now - DAY)
                   .not_valid_after(not_after or now + 30 * DAY)
                   .add_extension(x509.ExtendedKeyUsage([usage]), False)
                   # What Python 3.13's default X.509 strict checks ask of a chain.
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                       self.key.public_key()), False)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(
                       key.public_key()), False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                False)
        cert = builder.sign(self.key, hashes.SHA256())
        pem = Pem(self.directory / f"{file}.pem", self.directory / f"{file}.key")
        pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pem.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
        return pem
