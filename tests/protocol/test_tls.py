"""TLS listeners: every client library over SSL with a client certificate (mTLS), the
principal mapped from its subject by Kafka's rules, certificates reloaded without a restart,
and bad handshakes closing only their own connection."""

from __future__ import annotations

import datetime
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.principals import NoMatchingRule, PrincipalMapper
from agent.protocol.tls import subject_name
from faults.frames import encode_request, framed
from harness.certs import DAY, CertificateAuthority, Pem

from . import secure_clients
from .server import AgentProcess, RawClient

RULES = r"RULE:^CN=([^,]*),OU=apps,.*$/$1/L,DEFAULT"


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "certs")


def _tls_agent(tmp_path: Path, ca: CertificateAuthority, server: Pem,
               **env: str) -> AgentProcess:
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log", {
                            "SILT_AGENT_SSL_CERTIFICATE_LOCATION": str(server.cert),
                            "SILT_AGENT_SSL_KEY_LOCATION": str(server.key),
                            "SILT_AGENT_SSL_CA_LOCATION": str(ca.path),
                            "SILT_AGENT_SSL_CLIENT_AUTH": "required",
                            "SILT_AGENT_SSL_PRINCIPAL_MAPPING_RULES": RULES,
                            "SILT_AGENT_LOG_LEVEL": "debug", **env})
    proc.listeners = {"SSL": "SSL"}
    return proc


@pytest.fixture
def tls_agent(tmp_path: Path, ca: CertificateAuthority) -> Iterator[AgentProcess]:
    proc = _tls_agent(tmp_path, ca, ca.issue("server", "CN=localhost", server=True)).start()
    with proc.metadata() as md:
        for topic in ("confluent", "kafka-python", "aiokafka", "kcat"):
            md.create_topic(topic, 1)
    yield proc
    proc.terminate()


def _client_context(ca: CertificateAuthority, client: Pem | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca.path))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    return context


def _handshake(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    return context.wrap_socket(sock, server_hostname="localhost")


def _closed(sock: socket.socket) -> bool:
    """Whether the server ends the connection (TLS 1.3 reports a refused client certificate
    only at the first read)."""
    try:
        sock.sendall(b"\x00\x00\x00\x01")
        return sock.recv(1) == b""
    except (ssl.SSLError, OSError):
        return True


def test_principal_mapping_rules() -> None:
    """Kafka's SslPrincipalMapper examples: the first rule that matches the whole name."""
    mapper = PrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                             r"RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                             r"RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")
    assert mapper.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US") == "kafka1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=X,ST=Y,C=US") == \
        "duke@javasoft"
    assert mapper.name("CN=client.test,O=x") == "CLIENT.TEST"
    assert mapper.name("OU=x") == "OU=x"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper(r"RULE:^CN=(.*)$/$1/").name("OU=x")
    for bad in ("FOO", "RULE:^CN=(x/y", "DEFAULT,nonsense"):
        with pytest.raises(ValueError, match="rule"):
            PrincipalMapper(bad)


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kcat"])
def test_clients_over_mtls(tls_agent: AgentProcess, ca: CertificateAuthority,
                           client: str) -> None:
    """Each client library produces and consumes over the SSL listener with a client
    certificate; the agent maps its subject to the principal User:<cn>."""
    pem = ca.issue(f"client-{client}", f"CN=App-{client},OU=apps,O=silt")
    bootstrap = tls_agent.address("SSL")
    if client == "confluent":
        got = secure_clients.confluent(bootstrap, {
            "security.protocol": "SSL", "ssl.ca.location": str(ca.path),
            "ssl.certificate.location": str(pem.cert), "ssl.key.location": str(pem.key)},
            client)
    elif client == "kcat":
        got = secure_clients.kcat(bootstrap, {
            "security.protocol": "SSL", "ssl.ca.location": str(ca.path),
            "ssl.certificate.location": str(pem.cert), "ssl.key.location": str(pem.key)},
            client)
    elif client == "kafka-python":
        got = secure_clients.kafka_python(bootstrap, {
            "security_protocol": "SSL", "ssl_cafile": str(ca.path),
            "ssl_certfile": str(pem.cert), "ssl_keyfile": str(pem.key)}, client)
    else:
        got = secure_clients.aiokafka(bootstrap, {
            "security_protocol": "SSL", "ssl_context": _client_context(ca, pem)}, client)
    assert got == secure_clients.VALUES
    assert f"principal User:app-{client}" in tls_agent.log()


def test_bad_handshakes_close_only_their_connection(tls_agent: AgentProcess,
                                                    ca: CertificateAuthority) -> None:
    """No client certificate, an expired or not-yet-valid one, one from another CA, plain
    Kafka bytes on the TLS port and a TLS handshake on the plaintext port: each of those
    connections is closed, and a good client opened before them is served after."""
    tls_port = tls_agent.ports["SSL"]
    good = _handshake(tls_port, _client_context(ca, ca.issue("good", "CN=good,OU=apps,O=x")))
    now = datetime.datetime.now(datetime.UTC)
    expired = ca.issue("expired", "CN=old,OU=apps,O=x", not_before=now - 10 * DAY,
                       not_after=now - DAY)
    early = ca.issue("early", "CN=early,OU=apps,O=x", not_before=now + DAY,
                     not_after=now + 10 * DAY)
    other = CertificateAuthority(ca.directory / "other").issue("stranger", "CN=x,OU=apps,O=x")
    for pem in (None, expired, early, other):
        try:
            sock = _handshake(tls_port, _client_context(ca, pem))
        except (ssl.SSLError, OSError):
            continue  # refused in the handshake itself (TLS 1.2)
        assert _closed(sock), pem
        sock.close()
    raw = RawClient(tls_port)  # a plaintext ApiVersions on the TLS port
    raw.send_raw(raw.frame(18, 3, _api_versions()))
    assert raw.closed_by_server()
    raw.close()
    plain = socket.create_connection(("127.0.0.1", tls_agent.port), timeout=30)
    with pytest.raises((ssl.SSLError, OSError)):  # TLS on the plaintext port: closed
        _client_context(ca, None).wrap_socket(plain, server_hostname="localhost")
    plain.close()
    # The good connection still works: an ApiVersions over it.
    good.sendall(framed(encode_request(18, 3, _api_versions())))
    size = int.from_bytes(_read(good, 4), "big")
    assert size > 0 and len(_read(good, size)) == size
    good.close()
    log = tls_agent.log()
    assert "TLS handshake failed" in log


def test_certificates_reload_without_restart(tmp_path: Path, ca: CertificateAuthority) -> None:
    """A renewed server certificate written over the old files is served to new
    connections after SIGHUP (and on the timer), with no restart."""
    server = ca.issue("server", "CN=first", server=True)
    proc = _tls_agent(tmp_path, ca, server, SILT_AGENT_SSL_RELOAD_INTERVAL_MS="600000").start()
    try:
        context = _client_context(ca, ca.issue("c", "CN=c,OU=apps,O=x"))
        context.check_hostname = False

        def served_subject() -> str:
            with _handshake(proc.ports["SSL"], context) as sock:
                der = sock.getpeercert(binary_form=True)
            assert der is not None
            return subject_name(der)

        assert served_subject() == "CN=first"
        time.sleep(0.01)  # a later modification time
        ca.issue("server", "CN=second", server=True)  # the same files, rewritten
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while served_subject() != "CN=second":
            assert time.monotonic() < deadline, proc.log()
            time.sleep(0.1)
        assert "TLS certificate reloaded" in proc.log()
    finally:
        proc.terminate()


def _api_versions() -> object:
    from kio.schema.api_versions.v3 import request as av3
    return av3.ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        part = sock.recv(n - len(out))
        assert part, "closed"
        out += part
    return out
