"""SASL listeners against a real agent: every client library over SASL_SSL with
SCRAM-SHA-512, PLAIN over SASL_PLAINTEXT, users kept in the metadata store (and managed
with Describe/AlterUserScramCredentials), a wrong password reported as the client's
authentication failure, and nothing served before authentication."""

from __future__ import annotations

import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._scram import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.api_versions.v3 import request as av3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as m12
from kio.schema.sasl_authenticate.v2 import request as sa2
from kio.schema.sasl_handshake.v1 import request as sh1
from kio.schema.types import TopicName

from agent.sasl.scram import make_credential
from faults import frames
from harness.certs import CertificateAuthority

from . import secure_clients
from .server import AgentProcess, RawClient

PASSWORD = "alice-s3cret"


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path / "certs")


@pytest.fixture
def sasl_agent(tmp_path: Path, ca: CertificateAuthority) -> Iterator[AgentProcess]:
    server = ca.issue("server", "CN=localhost", server=True)
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log", {
                            "SILT_AGENT_SSL_CERTIFICATE_LOCATION": str(server.cert),
                            "SILT_AGENT_SSL_KEY_LOCATION": str(server.key),
                            "SILT_AGENT_SASL_ENABLED_MECHANISMS":
                                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                            "SILT_AGENT_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS": "10",
                            "SILT_AGENT_LOG_LEVEL": "info"})
    proc.listeners = {"SASL_SSL": "SASL_SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    proc.start()
    with proc.metadata() as md:
        md.alter_scram_credentials([], [
            ("alice", make_credential("SCRAM-SHA-256", PASSWORD, 4096))])
        md.alter_scram_credentials([], [
            ("alice", make_credential("SCRAM-SHA-512", PASSWORD, 4096))])
        for topic in ("confluent", "kafka-python", "aiokafka", "kcat", "plain"):
            md.create_topic(topic, 1)
    yield proc
    proc.terminate()


def _scram(client: str, ca: CertificateAuthority, password: str = PASSWORD) -> dict[str, Any]:
    if client in ("confluent", "kcat"):
        return {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": "alice", "sasl.password": password,
                "ssl.ca.location": str(ca.path)}
    if client == "kafka-python":
        return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "alice", "sasl_plain_password": password,
                "ssl_cafile": str(ca.path)}
    return {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice", "sasl_plain_password": password,
            "ssl_context": ssl.create_default_context(cafile=str(ca.path))}


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kcat"])
def test_clients_over_sasl_ssl_scram_sha_512(sasl_agent: AgentProcess,
                                             ca: CertificateAuthority, client: str) -> None:
    bootstrap = sasl_agent.address("SASL_SSL")
    run = {"confluent": secure_clients.confluent, "kafka-python": secure_clients.kafka_python,
           "aiokafka": secure_clients.aiokafka, "kcat": secure_clients.kcat}[client]
    assert run(bootstrap, _scram(client, ca), client) == secure_clients.VALUES
    assert "authenticated as User:alice (SASL SCRAM-SHA-512)" in sasl_agent.log()


def test_plain_over_sasl_plaintext(sasl_agent: AgentProcess) -> None:
    bootstrap = sasl_agent.address("SASL_PLAINTEXT")
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice", "sasl.password": PASSWORD}
    assert secure_clients.confluent(bootstrap, conf, "plain") == secure_clients.VALUES
    kconf = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
             "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    assert secure_clients.kafka_python(bootstrap, kconf, "plain")[-3:] == secure_clients.VALUES
    assert "authenticated as User:alice (SASL PLAIN)" in sasl_agent.log()


def test_wrong_password_is_the_clients_authentication_failure(
        sasl_agent: AgentProcess, ca: CertificateAuthority,
        caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka reports _AUTHENTICATION with Kafka's message, kafka-python its
    SaslAuthenticationFailedError, kcat exits non-zero; the agent counts and logs each
    (principal, address, mechanism: never the password)."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError as KPError

    errors: list[KafkaError] = []
    conf: dict[str, Any] = {"bootstrap.servers": sasl_agent.address("SASL_SSL"),
                            **_scram("confluent", ca, "wrong"), "error_cb": errors.append}
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):  # refused at once; the wait is only its bound
        admin.list_topics(timeout=3)
    admin.poll(1)  # serves error_cb
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Authentication failed during authentication due to invalid credentials with"
               " SASL mechanism SCRAM-SHA-512" in e.str() for e in errors), errors
    del admin  # it would go on retrying (and slowing this address's logins down)
    with pytest.raises(KPError) as info:
        KafkaConsumer(bootstrap_servers=sasl_agent.address("SASL_SSL"),
                      request_timeout_ms=5_000, bootstrap_timeout_ms=5_000,
                      **_scram("kafka-python", ca, "wrong")).topics()
    # kafka-python 3.0 drops a response that arrives together with the connection's end
    # (kafka/net/transport.py `_read_from_sock` aborts, what it read unparsed), as Kafka
    # and this agent answer a failed login (the answer, then the close): it may then see
    # "socket disconnected" instead, and gives up all the same.
    assert ("SaslAuthenticationFailedError" in caplog.text + repr(info.value)
            or "socket disconnected" in caplog.text), info.value
    kcat = secure_clients.kcat_metadata(sasl_agent.address("SASL_SSL"),
                                        {k: str(v) for k, v in _scram("kcat", ca, "wrong")
                                         .items()}, wait_s=3)
    assert kcat.returncode != 0
    log = sasl_agent.log()
    assert "SASL SCRAM-SHA-512 authentication failed" in log and "wrong" not in log


def test_nothing_but_api_versions_and_sasl_before_authentication(
        sasl_agent: AgentProcess) -> None:
    port = sasl_agent.ports["SASL_PLAINTEXT"]
    client = RawClient(port)
    versions = client.call(18, 3, av3.ApiVersionsRequest(client_software_name="t",
                                                         client_software_version="1"))
    assert {int(k.api_key) for k in versions.api_keys} >= {17, 36, 50, 51}
    client.send_raw(client.frame(3, 12, m12.MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)))
    assert client.closed_by_server()  # Kafka: "Unexpected Kafka request ... during SASL handshake"
    client.close()

    client = RawClient(port)  # an unknown mechanism: the enabled list, then closed
    answer = client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="GSSAPI"))
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert answer.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert client.closed_by_server()
    client.close()

    client = RawClient(port)  # a second ApiVersions before the handshake: closed unanswered
    client.call(18, 3, av3.ApiVersionsRequest(client_software_name="t",
                                              client_software_version="1"))
    client.send_raw(client.frame(18, 3, av3.ApiVersionsRequest(
        client_software_name="t", client_software_version="1")))
    assert client.closed_by_server()
    client.close()

    client = RawClient(port)  # garbage tokens: SASL_AUTHENTICATION_FAILED, then closed
    client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="PLAIN"))
    answer = client.call(36, 2, sa2.SaslAuthenticateRequest(auth_bytes=b"\xff" * 300))
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert client.closed_by_server()
    client.close()

    client = RawClient(port)  # a frame past sasl.server.max.receive.size: closed
    client.send_raw((600_000).to_bytes(4, "big") + b"\0" * 64)
    assert client.closed_by_server()
    client.close()

    client = RawClient(port)  # PLAIN by hand, then Metadata is served
    client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="PLAIN"))
    answer = client.call(36, 2, sa2.SaslAuthenticateRequest(
        auth_bytes=f"\0alice\0{PASSWORD}".encode()))
    assert answer.error_code == ErrorCode.none
    brokers = client.call(3, 12, m12.MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False)).brokers
    assert [int(b.port) for b in brokers] == [port]  # the SASL_PLAINTEXT endpoint
    assert client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="PLAIN")).error_code == \
        ErrorCode.none  # re-authentication
    assert client.call(36, 2, sa2.SaslAuthenticateRequest(
        auth_bytes=f"\0alice\0{PASSWORD}".encode())).error_code == ErrorCode.none
    client.close()


def _mid_exchange(port: int, mechanism: str = "PLAIN") -> RawClient:
    """A connection that has sent its SaslHandshake (v1) and no token yet."""
    client = RawClient(port)
    assert client.call(17, 1, sh1.SaslHandshakeRequest(mechanism=mechanism)).error_code == \
        ErrorCode.none
    return client


def test_a_request_out_of_turn_in_the_exchange_is_illegal_sasl_state(
        sasl_agent: AgentProcess) -> None:
    """As Kafka's SaslServerAuthenticator.handleSaslToken: any request but SaslAuthenticate
    after a v1 SaslHandshake is answered ILLEGAL_SASL_STATE in its own API's response (the
    request's getErrorResponse), then the connection closes; one that does not decode is
    closed unanswered. Re-authentication alike."""
    port = sasl_agent.ports["SASL_PLAINTEXT"]
    client = _mid_exchange(port)  # ApiVersions: its error response, no key listed
    answer = client.call(18, 3, av3.ApiVersionsRequest(client_software_name="t",
                                                       client_software_version="1"))
    assert answer.error_code == ErrorCode.illegal_sasl_state and answer.api_keys == ()
    assert client.closed_by_server()
    client.close()

    client = _mid_exchange(port)  # ApiVersions of a version not served: as v0 (Kafka too)
    client.correlation = 5
    client.send_raw(frames.framed(struct.pack(">hhih", 18, 99, 5, -1)))
    answer = client.receive(18, 0)
    assert answer.error_code == ErrorCode.illegal_sasl_state and answer.api_keys == ()
    assert client.closed_by_server()
    client.close()

    client = _mid_exchange(port, "SCRAM-SHA-512")  # a second SaslHandshake
    answer = client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="PLAIN"))
    assert answer.error_code == ErrorCode.illegal_sasl_state and answer.mechanisms == ()
    assert client.closed_by_server()
    client.close()

    client = _mid_exchange(port)  # Metadata: each topic asked for, at the error
    answer = client.call(3, 12, m12.MetadataRequest(
        topics=(m12.MetadataRequestTopic(topic_id=None, name=TopicName("plain")),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("plain", ErrorCode.illegal_sasl_state)]
    assert client.closed_by_server()
    client.close()

    client = _mid_exchange(port)  # Produce: each partition at the error, nothing stored
    produce = frames.produce_request(9, "plain", 0, frames.good_batch([b"sneaky"]))
    client.correlation = 1
    client.send_raw(produce)
    answer = client.receive(0, 9)
    [topic] = answer.responses
    assert [(p.index, p.error_code) for p in topic.partition_responses] == [
        (0, ErrorCode.illegal_sasl_state)]
    assert client.closed_by_server()
    client.close()
    with sasl_agent.metadata() as md:
        assert md.partitions("plain")[0].next_offset == 0

    client = _mid_exchange(port)  # undecodable: closed unanswered
    client.send_raw(frames.framed(frames.sample_body(3, 12)[:12]))
    assert client.read_frame() is None
    client.close()

    client = _mid_exchange(port)  # re-authenticating: the same
    assert client.call(36, 2, sa2.SaslAuthenticateRequest(
        auth_bytes=f"\0alice\0{PASSWORD}".encode())).error_code == ErrorCode.none
    assert client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="PLAIN")).error_code == \
        ErrorCode.none
    answer = client.call(3, 12, m12.MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    assert answer.topics == () and answer.brokers == ()
    assert client.closed_by_server()
    client.close()
    assert "answered ILLEGAL_SASL_STATE and closing" in sasl_agent.log()


def test_plaintext_listener_refuses_sasl(sasl_agent: AgentProcess) -> None:
    client = RawClient(sasl_agent.port)
    assert client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="PLAIN")).error_code == \
        ErrorCode.illegal_sasl_state
    assert client.call(36, 2, sa2.SaslAuthenticateRequest(auth_bytes=b"x")).error_code == \
        ErrorCode.illegal_sasl_state
    client.close()


def test_scram_credentials_through_the_admin_api(sasl_agent: AgentProcess,
                                                 ca: CertificateAuthority) -> None:
    """confluent-kafka's AdminClient upserts a user (it sends only the salted password),
    who then logs in over SCRAM; describe lists mechanisms and iterations; Kafka's errors for
    a missing user, too few iterations and a deletion of nothing."""
    admin = AdminClient({"bootstrap.servers": sasl_agent.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    futures: Any = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", info, b"b0b-pw"),
        UserScramCredentialUpsertion("eve", ScramCredentialInfo(
            ScramMechanism.SCRAM_SHA_256, 100), b"x"),
        UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)])
    futures["bob"].result(30)
    with pytest.raises(KafkaException, match="Too few iterations"):
        futures["eve"].result(30)
    with pytest.raises(KafkaException, match="does not exist"):
        futures["nobody"].result(30)
    describe: Any = admin.describe_user_scram_credentials
    described = describe(["bob"])["bob"].result(30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 4096)]
    with pytest.raises(KafkaException, match="does not exist"):
        describe(["ghost"])["ghost"].result(30)
    every = describe().result(30)
    assert set(every) == {"alice", "bob"}
    conf: dict[str, Any] = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                            "sasl.username": "bob", "sasl.password": "b0b-pw",
                            "ssl.ca.location": str(ca.path)}
    assert secure_clients.confluent(sasl_agent.address("SASL_SSL"), conf, "confluent") == \
        secure_clients.VALUES
    deleted: Any = admin.alter_user_scram_credentials([UserScramCredentialDeletion(
        "bob", ScramMechanism.SCRAM_SHA_512)])
    deleted["bob"].result(30)
    # The next login reads the store: bob is gone.
    errors: list[KafkaError] = []
    denied_conf: dict[str, Any] = {"bootstrap.servers": sasl_agent.address("SASL_SSL"),
                                   **conf, "error_cb": errors.append}
    denied = AdminClient(denied_conf)
    with pytest.raises(KafkaException):
        denied.list_topics(timeout=10)
    denied.poll(1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors)


def test_oauthbearer_with_confluent_kafka(tmp_path: Path) -> None:
    """confluent-kafka's oauth_cb, kafka-python's and aiokafka's token providers hand the
    agent JWTs signed by a key this test made (its JWKS in a file): a valid one produces and
    consumes; one not yet valid is the client's authentication failure (librdkafka itself
    refuses to send an expired one)."""
    import json

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]}))
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log", {
                            "SILT_AGENT_SASL_ENABLED_MECHANISMS": "OAUTHBEARER",
                            "SILT_AGENT_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": str(jwks),
                            "SILT_AGENT_SASL_OAUTHBEARER_EXPECTED_ISSUER": "https://idp",
                            "SILT_AGENT_SASL_OAUTHBEARER_EXPECTED_AUDIENCE": "kafka",
                            "SILT_AGENT_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS": "10",
                            "SILT_AGENT_LOG_LEVEL": "info"})
    proc.listeners = {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    proc.start()
    try:
        with proc.metadata() as md:
            md.create_topic("oauth", 1)

        def tokens(not_before_s: int = 0) -> Any:
            def oauth_cb(config: object) -> tuple[str, float]:
                now = int(time.time())
                token = jwt.encode({"sub": "svc-orders", "iss": "https://idp", "aud": "kafka",
                                    "iat": now, "nbf": now + not_before_s, "exp": now + 300,
                                    "scope": "kafka"}, key, algorithm="RS256",
                                   headers={"kid": "k1"})
                return token, float(now + 300)
            return oauth_cb

        conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
                "oauth_cb": tokens()}
        bootstrap = proc.address("SASL_PLAINTEXT")
        assert secure_clients.confluent(bootstrap, conf, "oauth") == secure_clients.VALUES
        assert "authenticated as User:svc-orders (SASL OAUTHBEARER)" in proc.log()
        from aiokafka.abc import AbstractTokenProvider as AioTokenProvider
        from kafka.net.sasl.oauth import AbstractTokenProvider

        class Tokens(AbstractTokenProvider):  # type: ignore[misc]
            def token(self) -> str:
                return str(tokens()(None)[0])

        class AioTokens(AioTokenProvider):  # type: ignore[misc]
            async def token(self) -> str:
                return str(tokens()(None)[0])

        got = secure_clients.kafka_python(bootstrap, {
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Tokens()}, "oauth")
        assert got[-3:] == secure_clients.VALUES
        got = secure_clients.aiokafka(bootstrap, {
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": AioTokens()}, "oauth")
        assert got == secure_clients.VALUES
        errors: list[KafkaError] = []
        early: dict[str, Any] = {**conf, "oauth_cb": tokens(not_before_s=600),
                                   "bootstrap.servers": bootstrap, "error_cb": errors.append}
        admin = AdminClient(early)
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=10)
        admin.poll(1)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        assert "SASL OAUTHBEARER authentication failed (invalid JWT: The token is not yet" \
            " valid (nbf))" in proc.log()
    finally:
        proc.terminate()


def _until(moment: float) -> None:
    """Wait until time.monotonic() reaches `moment`: the session's lifetime is the server's
    real time, so these waits are the subject of the test, each relative to the event
    it follows (not a fixed sleep after whatever the previous step cost)."""
    time.sleep(max(0.0, moment - time.monotonic()))


def test_session_lifetime_and_pre_auth_deadline(tmp_path: Path) -> None:
    """connections.max.reauth.ms: SaslAuthenticate v1+ answers the session's lifetime and a
    request past it closes the connection (re-authenticating renews it); a connection that
    never authenticates is closed after sasl.authentication.timeout.ms."""
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log", {
                            "SILT_AGENT_SASL_ENABLED_MECHANISMS": "PLAIN",
                            "SILT_AGENT_CONNECTIONS_MAX_REAUTH_MS": "1500",
                            "SILT_AGENT_SASL_AUTHENTICATION_TIMEOUT_MS": "1000"})
    proc.listeners = {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    proc.start()
    try:
        with proc.metadata() as md:
            md.alter_scram_credentials([], [
                ("alice", make_credential("SCRAM-SHA-512", PASSWORD, 4096))])
        port = proc.ports["SASL_PLAINTEXT"]
        metadata = m12.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                       include_topic_authorized_operations=False)

        def login(client: RawClient) -> int:
            client.call(17, 1, sh1.SaslHandshakeRequest(mechanism="PLAIN"))
            answer = client.call(36, 2, sa2.SaslAuthenticateRequest(
                auth_bytes=f"\0alice\0{PASSWORD}".encode()))
            assert answer.error_code == ErrorCode.none
            return int(answer.session_lifetime.total_seconds() * 1000)

        idle = RawClient(port)  # never authenticates
        client = RawClient(port)
        connected = time.monotonic()
        assert login(client) == 1500
        first = time.monotonic()
        client.call(3, 12, metadata)
        assert idle.closed_by_server()  # read until the server closes it: the pre-auth
        assert time.monotonic() - connected >= 1.0  # deadline, and not before
        _until(first + 1.0)
        assert login(client) == 1500  # renewed before it ended
        renewed = time.monotonic()
        _until(first + 2.0)
        client.call(3, 12, metadata)  # 2 s after the first login: served
        _until(renewed + 1.5 + 0.5)  # past the renewed session
        client.send_raw(client.frame(3, 12, metadata))
        assert client.closed_by_server()
        client.close()
        idle.close()
    finally:
        proc.terminate()
