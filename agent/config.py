"""Agent settings (the `agent` section): how often and how much an agent buffers before it
writes one object. Declared once here; loaded by `settings.load`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from fileformat import WRITABLE_COMPRESSIONS, Compression
from settings import choice, integer, setting, text
from telemetry import MetricsPortSettings
from telemetry import config as metrics

from .listeners import (
    DEFAULT_PROTOCOL_MAP,
    Listener,
    listener_names,
    parse_advertised,
    parse_listeners,
    parse_protocol_map,
)
from .principals import PrincipalMapper

LINGER_MS = "linger.ms"
FLUSH_BYTES = "flush.bytes"
BUFFER_MEMORY = "buffer.memory"
MAX_BLOCK_MS = "max.block.ms"
COMPRESSION_TYPE = "compression.type"
TOPIC_REFRESH_MS = "topic.refresh.ms"
# The Kafka wire-protocol server of `silt agent` (agent/protocol/).
LISTENERS = "listeners"
ADVERTISED_LISTENERS = "advertised.listeners"
LISTENER_SECURITY_PROTOCOL_MAP = "listener.security.protocol.map"
# TLS of the SSL and SASL_SSL listeners (agent/protocol/tls.py): PEM files, librdkafka's names.
SSL_CERTIFICATE_LOCATION = "ssl.certificate.location"
SSL_KEY_LOCATION = "ssl.key.location"
SSL_CA_LOCATION = "ssl.ca.location"
SSL_CLIENT_AUTH = "ssl.client.auth"
SSL_PRINCIPAL_MAPPING_RULES = "ssl.principal.mapping.rules"
SSL_RELOAD_INTERVAL_MS = "ssl.reload.interval.ms"
# SASL on the SASL_PLAINTEXT and SASL_SSL listeners (agent/protocol/authenticator.py).
SASL_ENABLED_MECHANISMS = "sasl.enabled.mechanisms"
SASL_SERVER_MAX_RECEIVE_SIZE = "sasl.server.max.receive.size"
SASL_AUTHENTICATION_TIMEOUT_MS = "sasl.authentication.timeout.ms"
CONNECTIONS_MAX_REAUTH_MS = "connections.max.reauth.ms"
CONNECTION_FAILED_AUTHENTICATION_DELAY_MS = "connection.failed.authentication.delay.ms"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SASL_OAUTHBEARER_JWKS_ENDPOINT_URL = "sasl.oauthbearer.jwks.endpoint.url"
SASL_OAUTHBEARER_EXPECTED_ISSUER = "sasl.oauthbearer.expected.issuer"
SASL_OAUTHBEARER_EXPECTED_AUDIENCE = "sasl.oauthbearer.expected.audience"
SASL_OAUTHBEARER_SUB_CLAIM_NAME = "sasl.oauthbearer.sub.claim.name"
SASL_OAUTHBEARER_SCOPE_CLAIM_NAME = "sasl.oauthbearer.scope.claim.name"
SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS = "sasl.oauthbearer.clock.skew.seconds"
SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS = "sasl.oauthbearer.jwks.endpoint.refresh.ms"
SOCKET_REQUEST_MAX_BYTES = "socket.request.max.bytes"
FETCH_CACHE_BYTES = "fetch.cache.bytes"
QUEUED_MAX_REQUEST_BYTES = "queued.max.request.bytes"
QUEUED_MAX_REQUEST_BYTES_PER_CONNECTION = "connection.queued.max.request.bytes"
CONNECTIONS_MAX_IDLE_MS = "connections.max.idle.ms"
REQUEST_READ_TIMEOUT_MS = "request.read.timeout.ms"
MAX_CONNECTIONS = "max.connections.total"  # Kafka's max.connections (TOML: not a prefix of per.ip)
MAX_CONNECTIONS_PER_IP = "max.connections.per.ip"
LOG_LEVEL = "log.level"
AUTO_CREATE_TOPICS_ENABLE = "auto.create.topics.enable"
NUM_PARTITIONS = "num.partitions"
# The group coordinator (agent/groups/), with Kafka's broker setting names.
GROUP_MIN_SESSION_TIMEOUT_MS = "group.min.session.timeout.ms"
GROUP_MAX_SESSION_TIMEOUT_MS = "group.max.session.timeout.ms"
GROUP_INITIAL_REBALANCE_DELAY_MS = "group.initial.rebalance.delay.ms"
OFFSET_METADATA_MAX_BYTES = "offset.metadata.max.bytes"
# The transaction coordinator (agent/transactions/), with Kafka's broker setting names.
TRANSACTION_MAX_TIMEOUT_MS = "transaction.max.timeout.ms"
TRANSACTION_ABORT_INTERVAL_MS = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
# Limits on the work one request may ask of an agent.
MAX_PARTITIONS_PER_REQUEST = "max.partitions.per.request"
FETCH_MAX_BYTES = "fetch.max.bytes"
# Client quotas' rate window (agent/quotas.py), Kafka's broker setting names.
QUOTA_WINDOW_NUM = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS = "quota.window.size.seconds"
# Authorization (agent/protocol/authz.py), Kafka's broker setting names.
AUTHORIZER_CLASS_NAME = "authorizer.class.name"
SUPER_USERS = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND = "allow.everyone.if.no.acl.found"
# The authorizers `authorizer.class.name` accepts: Kafka's StandardAuthorizer (KRaft) and
# AclAuthorizer (ZooKeeper), whose decisions are the same; "" is none.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZERS = (STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer")


def _parse_bool(value: str) -> bool:
    """Kafka's booleans: "true" or "false" (any case)."""
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(value)
    return lowered == "true"


def _mechanisms(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.strip().upper() for m in value.split(",") if m.strip()))


def _parses(parse: Callable[[str], object]) -> Callable[[str], bool]:
    """A setting check: whether `parse` accepts the value."""
    def check(value: str) -> bool:
        try:
            parse(value)
        except ValueError:
            return False
        return True
    return check


@dataclass(frozen=True, slots=True)
class AgentConfig(MetricsPortSettings):
    """How often and how much an agent buffers before it writes one object."""

    SECTION: ClassVar[str] = "agent"

    linger_ms: int = integer(LINGER_MS, 250, lo=0)
    flush_bytes: int = integer(FLUSH_BYTES, 8 * 1024 * 1024, lo=1)
    buffer_memory: int = integer(BUFFER_MEMORY, 64 * 1024 * 1024, lo=1)  # >= flush.bytes
    max_block_ms: int = integer(MAX_BLOCK_MS, 60_000, lo=0)
    compression: Compression = choice(COMPRESSION_TYPE, Compression.NONE, WRITABLE_COMPRESSIONS)
    # How long an agent trusts its cached topics (partition count, cleanup.policy,
    # max.message.bytes) before reading them again: another agent's admin change (new
    # partitions, altered configs) is seen within this time. The agent making the change,
    # and any agent whose commit finds a topic gone, forget them at once.
    topic_refresh_ms: int = integer(TOPIC_REFRESH_MS, 10_000, lo=0)
    # `silt agent` only: where it listens (Kafka's listener model, agent/listeners.py: named
    # listeners, each with a security protocol; a bare HOST:PORT is the PLAINTEXT listener),
    # what Metadata tells clients of each listener to connect to ("" = the listen address),
    # the largest request frame (Kafka's default, 100 MiB) and the bytes of segment reads the
    # fetch path keeps (so N consumers of one hot partition cost one GET).
    listeners: str = text(
        LISTENERS, "127.0.0.1:9092", allowed="NAME://HOST:PORT,... or HOST:PORT",
        check=lambda v: _parses(listener_names)(v) and bool(listener_names(v)),
        doc="where `silt agent` listens for Kafka clients: NAME://HOST:PORT per listener,"
            " comma-separated (a bare HOST:PORT is PLAINTEXT)")
    advertised_listeners: str = text(
        ADVERTISED_LISTENERS, "", allowed="NAME://HOST:PORT,..., HOST:PORT or empty",
        check=_parses(listener_names),
        doc="the address Metadata gives the clients of each listener (a listener not named:"
            " its listen address; never a wildcard)")
    listener_security_protocol_map: str = text(
        LISTENER_SECURITY_PROTOCOL_MAP, DEFAULT_PROTOCOL_MAP,
        allowed="NAME:PROTOCOL,... (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
        check=_parses(parse_protocol_map),
        doc="the security protocol of each listener name")
    # TLS (the SSL and SASL_SSL listeners; TLS 1.2 and up): the certificate chain (PEM; it
    # may hold the key), the unencrypted private key (PEM; "" = in the certificate file),
    # the CAs client certificates must chain to, Kafka's ssl.client.auth, the mapping of a
    # client certificate's subject to its principal (Kafka's rules), and how often the files
    # are checked for a renewed certificate (also on SIGHUP).
    ssl_certificate_location: str = text(
        SSL_CERTIFICATE_LOCATION, "", allowed="a PEM file path or empty", check=lambda v: True,
        doc="the TLS listeners' certificate chain (PEM; may also hold the key)")
    ssl_key_location: str = text(
        SSL_KEY_LOCATION, "", allowed="a PEM file path or empty", check=lambda v: True,
        doc="the TLS listeners' private key (PEM, unencrypted; empty: in the certificate file)")
    ssl_ca_location: str = text(
        SSL_CA_LOCATION, "", allowed="a PEM file path or empty", check=lambda v: True,
        doc="the CAs client certificates must chain to (PEM; needed by ssl.client.auth)")
    ssl_client_auth: str = choice(
        SSL_CLIENT_AUTH, "none", {name: name for name in ("none", "requested", "required")},
        doc="whether TLS clients are asked for a certificate (requested) or must give one")
    ssl_principal_mapping_rules: str = text(
        SSL_PRINCIPAL_MAPPING_RULES, "DEFAULT",
        allowed="Kafka's rules: DEFAULT or RULE:pattern/replacement/[LU], comma-separated",
        check=_parses(PrincipalMapper),
        doc="a client certificate's subject to its principal name (Kafka's rules)")
    ssl_reload_interval_ms: int = integer(
        SSL_RELOAD_INTERVAL_MS, 60_000, lo=100,
        doc="how often the TLS files are checked for a renewed certificate (and on SIGHUP)")
    # SASL (the SASL_PLAINTEXT and SASL_SSL listeners), Kafka's names: the mechanisms served
    # (Kafka's default is GSSAPI, not served here: SCRAM needs nothing but the metadata
    # store), the largest frame before a connection has authenticated (Kafka's default),
    # how long a session lasts before the client must authenticate again (KIP-368; 0:
    # forever) and how long a failed authentication's answer waits (doubled for each further
    # failure from the same address within a minute, up to 64 times). Ours: a connection
    # that has not authenticated this long after it was accepted is closed.
    sasl_enabled_mechanisms: str = text(
        SASL_ENABLED_MECHANISMS, "SCRAM-SHA-256,SCRAM-SHA-512",
        allowed="a comma-separated list of " + ", ".join(SASL_MECHANISMS),
        check=lambda v: bool(_mechanisms(v)) and set(_mechanisms(v)) <= set(SASL_MECHANISMS),
        doc="the SASL mechanisms the SASL listeners serve")
    sasl_server_max_receive_size: int = integer(
        SASL_SERVER_MAX_RECEIVE_SIZE, 524_288, lo=64,
        doc="the largest frame a SASL listener reads before the client authenticated")
    sasl_authentication_timeout_ms: int = integer(
        SASL_AUTHENTICATION_TIMEOUT_MS, 30_000, lo=1,
        doc="a SASL connection not authenticated this long after it was accepted is closed")
    connections_max_reauth_ms: int = integer(
        CONNECTIONS_MAX_REAUTH_MS, 0, lo=0,
        doc="a SASL session's lifetime: past it the connection is closed unless the client"
            " authenticated again (0: forever)")
    # OAUTHBEARER (agent/sasl/oauth.py), Kafka's broker names: where the signing keys are
    # (JWKS: an https URL, or a file), the issuer and audiences tokens must name ("": not
    # checked), the claims holding the principal and the scopes, the clock skew allowed,
    # and how long fetched keys are kept.
    sasl_oauthbearer_jwks_endpoint_url: str = text(
        SASL_OAUTHBEARER_JWKS_ENDPOINT_URL, "", allowed="an https URL, a file path or empty",
        check=lambda v: True, doc="the JWKS OAUTHBEARER tokens are checked against (URL or"
                                  " file)")
    sasl_oauthbearer_expected_issuer: str = text(
        SASL_OAUTHBEARER_EXPECTED_ISSUER, "", allowed="text", check=lambda v: True,
        doc="the iss an OAUTHBEARER token must have (empty: not checked)")
    sasl_oauthbearer_expected_audience: str = text(
        SASL_OAUTHBEARER_EXPECTED_AUDIENCE, "", allowed="comma-separated audiences",
        check=lambda v: True,
        doc="audiences one of which an OAUTHBEARER token's aud must name (empty: not checked)")
    sasl_oauthbearer_sub_claim_name: str = text(
        SASL_OAUTHBEARER_SUB_CLAIM_NAME, "sub", allowed="a claim name", check=bool,
        doc="the token claim naming the principal")
    sasl_oauthbearer_scope_claim_name: str = text(
        SASL_OAUTHBEARER_SCOPE_CLAIM_NAME, "scope", allowed="a claim name", check=bool,
        doc="the token claim holding its scopes (a string or a list of strings)")
    sasl_oauthbearer_clock_skew_seconds: int = integer(
        SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS, 30, lo=0,
        doc="clock skew allowed when checking a token's exp, nbf and iat")
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = integer(
        SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS, 3_600_000, lo=1000,
        doc="how long keys fetched from a JWKS URL are kept")
    connection_failed_authentication_delay_ms: int = integer(
        CONNECTION_FAILED_AUTHENTICATION_DELAY_MS, 100, lo=0,
        doc="how long the answer to a failed authentication waits (doubled per recent"
            " failure from the same address)")
    socket_request_max_bytes: int = integer(SOCKET_REQUEST_MAX_BYTES, 100 * 1024 * 1024, lo=8)
    fetch_cache_bytes: int = integer(FETCH_CACHE_BYTES, 64 * 1024 * 1024, lo=0)
    # Kafka's broker settings: whether a Metadata request that allows it creates unknown
    # topics, and the partition count of topics created without one (auto-created topics,
    # CreateTopics with num_partitions -1).
    auto_create_topics_enable: bool = setting(
        AUTO_CREATE_TOPICS_ENABLE, False, allowed="true or false",
        check=lambda v: isinstance(v, bool), parse=_parse_bool)
    num_partitions: int = integer(NUM_PARTITIONS, 1, lo=1)
    # Kafka's group coordinator settings: the session timeouts a JoinGroup may ask for
    # (else INVALID_SESSION_TIMEOUT), how long an empty group's first rebalance waits for
    # more members (each joining member extends it, up to the rebalance timeout), and the
    # longest metadata string an OffsetCommit may store (else OFFSET_METADATA_TOO_LARGE).
    group_min_session_timeout_ms: int = integer(GROUP_MIN_SESSION_TIMEOUT_MS, 6_000, lo=1)
    group_max_session_timeout_ms: int = integer(GROUP_MAX_SESSION_TIMEOUT_MS, 1_800_000, lo=1)
    group_initial_rebalance_delay_ms: int = integer(GROUP_INITIAL_REBALANCE_DELAY_MS, 3_000,
                                                    lo=0)
    offset_metadata_max_bytes: int = integer(OFFSET_METADATA_MAX_BYTES, 4096, lo=0)
    # Kafka's transaction coordinator settings: the longest transaction.timeout.ms an
    # InitProducerId may ask for (else INVALID_TRANSACTION_TIMEOUT), and how often each
    # agent aborts the transactions past their timeout and finishes those whose coordinator
    # died (markers still to write).
    transaction_max_timeout_ms: int = integer(
        TRANSACTION_MAX_TIMEOUT_MS, 900_000, lo=1,
        doc="the longest transaction.timeout.ms a transactional producer may ask for")
    transaction_abort_interval_ms: int = integer(
        TRANSACTION_ABORT_INTERVAL_MS, 10_000, lo=1,
        doc="how often timed-out transactions are aborted and orphaned ones finished")
    # `silt agent`'s metrics port (telemetry/: /metrics, /healthz, /readyz; "" = none), and
    # how often it computes the lag of the consumer groups it coordinates.
    metrics_listeners: str = metrics.listeners()
    # Its TLS and basic auth: MetricsPortSettings' (the base class).
    metrics_refresh_interval_ms: int = metrics.refresh_interval_ms()
    # The front door (agent/protocol/server.py), Kafka's names where Kafka has one. Bytes of
    # requests read and not yet answered, in all (Kafka's default -1 is unbounded: here 256
    # MiB, what a few of the largest frames take, 4x buffer.memory that bounds the produces
    # among them) and per connection (ours: 64 MiB holds thousands of pipelined produces):
    # past either the agent stops reading (that connection, or every connection with
    # requests pending) until replies free room; a connection with nothing pending may
    # always read one frame.
    queued_max_request_bytes: int = integer(
        QUEUED_MAX_REQUEST_BYTES, 256 * 1024 * 1024, lo=1,
        doc="bytes of requests read and not yet answered, all connections together; past it"
            " the agent stops reading")
    queued_max_request_bytes_per_connection: int = integer(
        QUEUED_MAX_REQUEST_BYTES_PER_CONNECTION, 64 * 1024 * 1024, lo=1,
        doc="bytes of requests read and not yet answered on one connection")
    # A connection with no request pending that sends nothing this long is closed (Kafka's
    # default); a frame must arrive whole this long after its first byte (ours: 30 s, the
    # clients' own request.timeout.ms, after which they gave up on the request anyway).
    connections_max_idle_ms: int = integer(
        CONNECTIONS_MAX_IDLE_MS, 600_000, lo=1,
        doc="a connection with no request pending that sends nothing this long is closed")
    request_read_timeout_ms: int = integer(
        REQUEST_READ_TIMEOUT_MS, 30_000, lo=1,
        doc="a request frame must arrive whole this long after its first byte")
    # Connections beyond these are closed as they are accepted (Kafka's defaults are
    # unbounded): 10,000 in all (each may buffer some 0.4 MiB of unread bytes besides its
    # queued requests; the process needs as many file descriptors, RLIMIT_NOFILE), 1,000
    # from one address (a host running hundreds of clients, each with a connection per
    # agent, and still well short of max.connections).
    max_connections: int = integer(
        MAX_CONNECTIONS, 10_000, lo=1, doc="connections beyond this are closed as accepted")
    max_connections_per_ip: int = integer(
        MAX_CONNECTIONS_PER_IP, 1_000, lo=1,
        doc="connections from one address beyond this are closed as accepted")
    # `silt agent`'s log level (--verbose lowers it to info): refused frames and limits
    # show at info, every connection opened and closed at debug.
    log_level: str = choice(LOG_LEVEL, "warning",
                            {name: name for name in ("debug", "info", "warning", "error")},
                            doc="`silt agent`'s log level; --verbose lowers it to info")
    # The partitions one CreateTopics or CreatePartitions request may add (Kafka's KRaft
    # controller refuses more than 10,000, MAX_PARTITIONS_PER_BATCH, with POLICY_VIOLATION
    # "Excessively large number of partitions per request."; not a setting there). The
    # cluster-wide limit is the metadata section's max.partitions.
    max_partitions_per_request: int = integer(
        MAX_PARTITIONS_PER_REQUEST, 10_000, lo=1,
        doc="partitions one CreateTopics or CreatePartitions request may add in all")
    # Kafka's broker fetch.max.bytes: the most record bytes one Fetch response holds,
    # whatever its max_bytes asks (but the first batch of the first partition with data,
    # KIP-74, so a consumer always progresses).
    fetch_max_bytes: int = integer(
        FETCH_MAX_BYTES, 57_671_680, lo=1024,
        doc="record bytes one Fetch response holds at most, whatever its max_bytes asks")
    # Kafka's client quota window: a client's byte rate is measured over this many samples
    # of this many seconds (agent/quotas.py).
    quota_window_num: int = integer(
        QUOTA_WINDOW_NUM, 11, lo=2,
        doc="samples a client's byte rate is measured over (client quotas)")
    quota_window_size_seconds: int = integer(
        QUOTA_WINDOW_SIZE_SECONDS, 1, lo=1,
        doc="seconds of each sample a client's byte rate is measured over")

    # Kafka's authorizer settings: which authorizer decides (none: everything is allowed and
    # the ACL APIs answer SECURITY_DISABLED), the principals allowed everything ("User:a;
    # User:b"), and what a resource with no ACL at all allows (Kafka's default: nothing).
    authorizer_class_name: str = text(
        AUTHORIZER_CLASS_NAME, "", allowed="empty (none) or " + " or ".join(AUTHORIZERS),
        check=lambda v: v in ("", *AUTHORIZERS),
        doc="the authorizer enforcing ACLs; empty: none, every request is allowed")
    super_users: str = text(
        SUPER_USERS, "", allowed="principals (type:name) separated by ';'",
        check=lambda v: all(":" in p for p in v.split(";") if p.strip()),
        doc="principals allowed every operation whatever the ACLs say")
    allow_everyone_if_no_acl_found: bool = setting(
        ALLOW_EVERYONE_IF_NO_ACL_FOUND, False, allowed="true or false",
        check=lambda v: isinstance(v, bool), parse=_parse_bool,
        doc="whether a resource no ACL names is open to everyone")

    def check_across(self) -> None:
        if self.group_max_session_timeout_ms < self.group_min_session_timeout_ms:
            raise self.invalid(GROUP_MAX_SESSION_TIMEOUT_MS, self.group_max_session_timeout_ms,
                               f"an integer >= {GROUP_MIN_SESSION_TIMEOUT_MS}"
                               f" ({self.group_min_session_timeout_ms})")
        if self.buffer_memory < self.flush_bytes:
            raise self.invalid(BUFFER_MEMORY, self.buffer_memory,
                               f"an integer >= {FLUSH_BYTES} ({self.flush_bytes})")
        # What Metadata tells clients, and the agent's id in the registry: a wildcard would
        # be unreachable, and agents on different hosts would register as one broker.
        try:
            listeners = self.listener_list()
        except ValueError as exc:
            raise self.invalid(LISTENERS, self.listeners, f"valid listeners ({exc})") from None
        try:
            parse_advertised(self.advertised_listeners, listeners)
        except ValueError as exc:
            raise self.invalid(
                ADVERTISED_LISTENERS, self.advertised_listeners,
                f"HOST:PORT clients can reach per listener: not a wildcard address, and"
                f" set when {LISTENERS} is one ({exc})") from None

        tls = [lst.name for lst in listeners if lst.tls]
        if tls and not self.ssl_certificate_location:
            raise self.invalid(SSL_CERTIFICATE_LOCATION, "",
                               f"a certificate file: listeners {', '.join(tls)} use TLS")
        if "OAUTHBEARER" in self.enabled_mechanisms() and \
                not self.sasl_oauthbearer_jwks_endpoint_url:
            raise self.invalid(SASL_OAUTHBEARER_JWKS_ENDPOINT_URL, "",
                               "the JWKS when sasl.enabled.mechanisms has OAUTHBEARER")
        if self.ssl_client_auth != "none" and not self.ssl_ca_location:
            raise self.invalid(SSL_CA_LOCATION, "", f"the CAs of client certificates when"
                               f" {SSL_CLIENT_AUTH} is {self.ssl_client_auth}")

    def enabled_mechanisms(self) -> tuple[str, ...]:
        """sasl.enabled.mechanisms, in order."""
        return _mechanisms(self.sasl_enabled_mechanisms)

    def listener_list(self) -> tuple[Listener, ...]:
        """The listeners, parsed (checked when the section was built)."""
        return parse_listeners(self.listeners, self.listener_security_protocol_map)

    def advertised(self) -> dict[str, tuple[str, int]]:
        """Listener name -> the address Metadata gives its clients."""
        return parse_advertised(self.advertised_listeners, self.listener_list())

