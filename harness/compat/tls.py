"""The certificates librdkafka's SSL test (0097) expects of a cluster, as trivup's `--ssl`
makes them: a CA, the agent's certificate (its SSL listener asks clients for one:
ssl.client.auth=required), and a client certificate in each encoding the test loads
(PEM with an encrypted key, DER, PKCS#12), named to the runner by trivup's `SSL_*`
variables; its untrusted client certificates are librdkafka's own (tests/fixtures/ssl/)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from harness.certs import CertificateAuthority

PASSWORD = "silt-compat-keystore"
_PEM, _DER = serialization.Encoding.PEM, serialization.Encoding.DER


@dataclass(frozen=True)
class Fixtures:
    """What the agent, the runner's test.conf and its environment are given."""

    agent_env: dict[str, str]
    conf: tuple[tuple[str, str], ...]
    runner_env: dict[str, str]


def make(directory: Path) -> Fixtures:
    """Write a CA, a server and a client certificate under `directory`."""
    ca = CertificateAuthority(directory)
    server = ca.issue("server", "CN=localhost", server=True)
    client = ca.issue("client", "CN=client")
    cert = x509.load_pem_x509_certificate(client.cert.read_bytes())
    key = serialization.load_pem_private_key(client.key.read_bytes(), None)
    files = {
        "SSL_priv_pem": ("client.encrypted.key", key.private_bytes(
            _PEM, serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(PASSWORD.encode()))),
        "SSL_priv_der": ("client.key.der", key.private_bytes(
            _DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())),
        "SSL_pub_pem": ("client.pem", cert.public_bytes(_PEM)),
        "SSL_pub_der": ("client.der", cert.public_bytes(_DER)),
        "SSL_ca_der": ("ca.der", ca.cert.public_bytes(_DER)),
        "SSL_all_cas_pem": ("ca.pem", ca.cert.public_bytes(_PEM)),
        "SSL_pkcs": ("client.p12", pkcs12.serialize_key_and_certificates(
            b"client", key, cert, [ca.cert],  # type: ignore[arg-type]
            serialization.BestAvailableEncryption(PASSWORD.encode()))),
    }
    env = {"SSL_password": PASSWORD, "SSL_client_auth": "required"}
    for name, (file, data) in files.items():
        (directory / file).write_bytes(data)
        env[name] = str(directory / file)
    return Fixtures(
        agent_env={"SILT_AGENT_SSL_CERTIFICATE_LOCATION": str(server.cert),
                   "SILT_AGENT_SSL_KEY_LOCATION": str(server.key),
                   "SILT_AGENT_SSL_CA_LOCATION": str(ca.path),
                   "SILT_AGENT_SSL_CLIENT_AUTH": "required"},
        conf=(("security.protocol", "SSL"), ("ssl.ca.location", str(ca.path)),
              ("ssl.certificate.location", env["SSL_pub_pem"]),
              ("ssl.key.location", env["SSL_priv_pem"]), ("ssl.key.password", PASSWORD)),
        runner_env=env)
