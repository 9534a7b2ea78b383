"""Which of librdkafka's tests need a broker, which scenario each runs in, and what we say about
the ones not run: read from the `tests[]` table of librdkafka's tests/test.c (the runner's own
list, so a new librdkafka release brings its new tests without an edit here).

A test entry (`0045_subscribe_update_topic_remove`) belongs to a test number (`0045`); the
runner selects by number, so one run of a number runs all its entries of that scenario.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The Kafka version siltstream answers as (issue 26: Kafka 4.0's API surface); the runner's
# `-V` (TEST_KAFKA_VERSION): tests needing a later broker (share groups, 4.2) are skipped by
# the runner as "not applicable for broker version", and version-dependent checks expect
# 4.0's answers.
KAFKA_VERSION = "4.0.0"



@dataclass(frozen=True)
class Scenario:
    """A cluster the tests of a librdkafka scenario run against: one `silt agent` with these
    settings, and a `silt compactor` beside it when the scenario's tests expect a broker's
    log cleaner (Kafka's brokers run one; here it is a process of its own)."""

    runner: str  # librdkafka's scenario (tests/scenarios/*.json), the runner's `-s`
    env: dict[str, str]
    compactor: bool = False
    # A listener of this security protocol beside the PLAINTEXT one, which the runner then
    # connects to (its test.conf gets `conf`), and SCRAM users (name, password) the harness
    # creates in the metadata store, as `silt users add` does.
    listener: str = ""
    conf: tuple[tuple[str, str], ...] = ()
    users: tuple[tuple[str, str], ...] = ()
    tls: bool = False  # certificates for the listener and the runner (harness.compat.tls)
    oidc: bool = False  # an OIDC token endpoint the agent trusts (harness.compat.oidc)


# librdkafka's scenarios as agent settings: topic auto-creation on or off, 4 partitions for
# topics created without a count; the default one with an authorizer. Two are ours:
# `low-linger`, a 1 ms flush for 0055's latency bounds (BY_DESIGN); `compaction`, for 0077,
# with a `silt compactor` whose first dedupe comes within a second (`planner.l0.max.age.ms`,
# 30 s by default, where 0077 waits about 20 s; the topic's segment.ms, by which Kafka rolls
# its active segment, is not applied here). A Kafka broker's cleaner touches compacted topics
# only; silt's compactor also merges every other topic's small objects, so a 1 s age in the
# default scenario rewrites every test's data as it arrives (0038 and 0041 then time out).
_DEFAULT = {"SILT_AGENT_AUTO_CREATE_TOPICS_ENABLE": "true", "SILT_AGENT_NUM_PARTITIONS": "4"}
# Kafka's authorizer, open where no ACL says otherwise: what the ACL tests (0081's
# Create/Describe/DeleteAcls, 0109, 0115, 0119 through kafka-acls.sh) need of a PLAINTEXT
# cluster, where every client is User:ANONYMOUS.
_AUTHORIZER = {
    "SILT_AGENT_AUTHORIZER_CLASS_NAME": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "SILT_AGENT_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true",
}
# SASL as trivup's `--sasl SCRAM-SHA-256` sets a cluster up (librdkafka's sasl_tests.py): a
# SASL_PLAINTEXT listener, a SCRAM user the runner authenticates as; sessions re-authenticate
# every 10 s (connections.max.reauth.ms, which 0142 reads with DescribeConfigs and skips
# without; trivup sets 10 s too).
_SASL_ENV = {**_DEFAULT, "SILT_AGENT_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
             "SILT_AGENT_CONNECTIONS_MAX_REAUTH_MS": "10000"}
SCENARIOS: dict[str, Scenario] = {
    "default": Scenario("default", {**_DEFAULT, **_AUTHORIZER}),
    "noautocreate": Scenario("noautocreate", {**_DEFAULT,
                                              "SILT_AGENT_AUTO_CREATE_TOPICS_ENABLE": "false"}),
    "low-linger": Scenario("default", {**_DEFAULT, "SILT_AGENT_LINGER_MS": "1"}),
    "compaction": Scenario("default", {**_DEFAULT, "SILT_PLANNER_L0_MAX_AGE_MS": "1000"},
                           compactor=True),
    "sasl": Scenario("default", _SASL_ENV, listener="SASL_PLAINTEXT", conf=(
        ("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanisms", "SCRAM-SHA-256"),
        ("sasl.username", "testuser"), ("sasl.password", "testpass")),
        users=(("testuser", "testpass"),)),
    "ssl": Scenario("default", _DEFAULT, listener="SSL", tls=True),
    # OAUTHBEARER as trivup's `--sasl OAUTHBEARER --oidc` sets a cluster up: the clients get
    # their tokens from the harness's OIDC endpoint (sasl.oauthbearer.method=oidc), whose
    # 4 s tokens the agent checks against its JWKS; sessions end with the token.
    "oauthbearer": Scenario("default", {
        **_DEFAULT, "SILT_AGENT_SASL_ENABLED_MECHANISMS": "OAUTHBEARER",
        "SILT_AGENT_CONNECTIONS_MAX_REAUTH_MS": "10000"}, listener="SASL_PLAINTEXT", conf=(
        ("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanisms", "OAUTHBEARER")),
        oidc=True),
}
# Tests run in a scenario of ours rather than librdkafka's (the runner still gets `-s default`).
SCENARIO_OF: dict[str, str] = {"0055": "low-linger", "0077": "compaction", "0129": "low-linger",
                               "0097": "ssl", "0126": "oauthbearer",
                               "0135": "sasl", "0142": "sasl"}

# Tests not run, and why: a reviewer should accept each reason.
NOT_APPLICABLE: dict[str, str] = {
    "0028": "librdkafka marks it a known issue of its own (librdkafka#529); its runner skips it",
    "0047": "librdkafka marks it a known issue of its own; its runner skips it",
    "0098": "its transactions are produced by Kafka's Java client (tests/java"
            " TransactionProducerCli, built against $KAFKA_PATH/libs/kafka-clients-*.jar), which"
            " is not on this machine (no Kafka distribution); librdkafka's own transactional"
            " producer is tested by 0103, 0129 and the transactions sub-tests of 0061 and 0137",
    "0101": "fetch-from-follower needs 3 brokers in racks with a replica selector; a leaderless"
            " cluster has no followers: every agent serves every partition",
}
# Tests waiting for a feature another issue brings; switched on as it lands.
PENDING: dict[str, str] = {
}
# Tests run whose failure in a sub-test named by the substring is reported with this status
# (pending: waits for another issue; n/a: does not apply to Kafka 4.0) and why, with the
# runner's reason; any other failure as a failure.
_SHARE = ("n/a", "its share-consumer sub-test needs share groups (KIP-932, Kafka 4.1+, which"
          " the runner's own share tests require 4.2 for; not served at 4.0): the runner"
          " stops the test there, so later sub-tests do not run")
SUBTEST_FAILURES: dict[str, tuple[str, str, str]] = {
    "0126": ("share consumer", *_SHARE),
    "0135": ("Share consumer", *_SHARE),
    "0142": ("share consumer", *_SHARE),
}
# Tests run whose failure is a design difference, not a bug: a failure is reported as n/a
# with the runner's reason (the figure it measured) and this note.
BY_DESIGN: dict[str, str] = {
    "0055": "not applicable by design: an ack waits until the batch is durable, in an object"
            " written and committed to the metadata store (one per flush), where Kafka's"
            " leader acks from its page cache; the test's bounds are a few ms above linger.ms."
            " Run at agent.linger.ms=1 (the default flush is 250 ms) the ack still includes"
            " that write and commit (fsync'd file and SQLite here), which is what the runner"
            " measured",
}
# What librdkafka's own runner against a real cluster writes to every test.conf
# (tests/LibrdkafkaTestApp.py): each test's own time budget doubled.
RUNNER_CONF = (("test.timeout.multiplier", "2"),)

# Tests run in a time limit of their own (seconds), whatever --timeout says.
TIME_LIMIT_S: dict[str, float] = {"0113": 1200.0}
# What we know about a result (shown beside it in docs/compatibility.md).
NOTES: dict[str, str] = {
    **BY_DESIGN,
    "0077": "in the `compaction` scenario (planner.l0.max.age.ms=1000); at the default 30 s"
            " the first dedupe comes after the test looks: the topic's segment.ms=500 is"
            " accepted, not applied (applying it to the planner's active-segment age is the"
            " fix, not done)",
    "0081": "run at test.timeout.multiplier=2, as librdkafka's own runner against a real"
            " cluster writes it (LibrdkafkaTestApp.py): each client type's half takes about"
            " 225 s of the 2 x 180 s it gives itself, its consumer-group sub-tests waiting"
            " out group.initial.rebalance.delay.ms (3 s, Kafka's default) for 22 consumers."
            " AlterConfigs and"
            " IncrementalAlterConfigs of the BROKER resource (sasl.kerberos.min.time.before."
            "relogin, background.threads, log.cleanup.policy"
            " APPEND/SUBTRACT) and of the GROUP resource (consumer.session.timeout.ms) are"
            " accepted as Kafka accepts them: Kafka's dynamic broker configs and 4.0's group"
            " configs, kept in the metadata store and shown by DescribeConfigs"
            " (DYNAMIC_BROKER_CONFIG, GROUP_CONFIG), stored and not applied (an agent runs on"
            " its settings; silt serves no consumer-protocol or share groups);"
            " DescribeConfigs_groups, DescribeTopics and DescribeCluster with authorized"
            " operations and UserScramCredentials pass; DescribeConsumerGroups_with_"
            "authorized_ops skips itself here (it needs SASL), and passes run alone"
            " (SUBTESTS=) over the `sasl` scenario's listener with Kafka's authorizer on",
    "0097": "the agent's SSL listener with ssl.client.auth=required: every combination of"
            " client key, certificate and CA loading (location, PEM string, setter; PEM, DER,"
            " PKCS#12) connects; client certificates not from the agent's CA (librdkafka's"
            " fixtures/ssl/client2*) are refused during the handshake",
    "0126": "in the `oauthbearer` scenario: the clients fetch tokens from the harness's OIDC"
            " endpoint (harness.compat.oidc, trivup's valid, expired and badformat URLs), the"
            " agent checks them against its JWKS; the client-credentials sub-test passes first"
            " (4 s tokens refreshed, sessions re-authenticated). Run one at a time (SUBTESTS=),"
            " the 21 sub-tests after the share-consumer ones pass too: JWT-bearer grants (key"
            " file, encrypted, PEM string, template), Azure IMDS, subject-claim names, expired"
            " and badly signed tokens refused by the agent, failing grants (ES256 with an RSA"
            " key, invalid scope, IMDS queries missing a parameter, a missing claim) and"
            " aws_iam. librdkafka needs libcurl at build time for OIDC (Makefile DEBS)",
    "0129": "in the `low-linger` scenario: 1000 transactional messages under"
            " message.max.bytes=10000 are 100+ Produce requests, answered one at a time per"
            " connection (as Kafka does) and each acked after a flush; at the default 250 ms"
            " flush that is about 25 s of the test's 30 s limit before it consumes (it timed"
            " out); at agent.linger.ms=1 it passes in about 15 s",
    "0135": "its SASL sub-tests pass first (wrong credentials refused, then"
            " rd_kafka_sasl_set_credentials() before and after the failure authenticates)",
    "0142": "in the `sasl` scenario (connections.max.reauth.ms=10000, read by the test with"
            " DescribeConfigs): its consumer sub-test passes first (no message lost across"
            " re-authentications); run one at a time (SUBTESTS=...), the sub-tests after the"
            " share-consumer one pass too: producer, re-authentication in the middle of a"
            " transaction (committed and aborted), re-authentication with wrong credentials"
            " failing (its OAUTHBEARER sub-tests skip themselves under SCRAM)",
    "0016": "the clients' software name and version are sent; the test's check of them in the"
            " broker's JMX metrics needs Kafka's JMX (it warns and skips that check)",
}

_VERSION = re.compile(r"TEST_BRKVER\((\d+),\s*(\d+),\s*(\d+),\s*(\d+)\)")
_SCENARIO = re.compile(r'\.scenario\s*=\s*"([^"]*)"')


@dataclass(frozen=True)
class Entry:
    """One entry of test.c's `tests[]`."""

    name: str  # 0045_subscribe_update_topic_remove
    flags: frozenset[str]  # TEST_F_LOCAL, TEST_F_MANUAL, TEST_F_KNOWN_ISSUE, TEST_F_SOCKEM...
    min_version: tuple[int, ...]
    scenarios: tuple[str, ...]  # librdkafka's (default, noautocreate, ak23)

    @property
    def number(self) -> str:
        return self.name.split("_", 1)[0]

    @property
    def needs_broker(self) -> bool:
        return not self.flags & {"TEST_F_LOCAL", "TEST_F_MANUAL"}

    def applies_to(self, version: str) -> bool:
        """Whether the runner would run it against a broker of `version` (its minimum)."""
        given = [int(p) for p in version.split(".")]
        return self.min_version <= tuple(given + [0] * (4 - len(given)))

    @property
    def scenario(self) -> str:
        """The scenario of ours it runs in."""
        if self.number in SCENARIO_OF:
            return SCENARIO_OF[self.number]
        return "default" if "default" in self.scenarios else self.scenarios[0]


def _split_entries(table: str) -> list[str]:
    """The argument lists of the `_TEST(...)` calls in `table`, parentheses balanced."""
    out: list[str] = []
    at = 0
    while (start := table.find("_TEST(", at)) >= 0:
        depth, i = 0, start + len("_TEST")
        while True:
            depth += {"(": 1, ")": -1}.get(table[i], 0)
            i += 1
            if depth == 0:
                break
        out.append(table[start + len("_TEST("):i - 1])
        at = i
    return out


def parse_tests(test_c: str) -> list[Entry]:
    """Every entry of test.c's `tests[]` table, in its order."""
    start = test_c.index("struct test tests[] = {")
    table = re.sub(r"/\*.*?\*/", "", test_c[start:test_c.index("{NULL}}", start)], flags=re.S)
    entries = []
    for args in _split_entries(table):
        name, _, rest = args.partition(",")
        flags_text = rest.split(",", 1)[0]
        version = _VERSION.search(rest)
        scenario = _SCENARIO.search(rest)
        entries.append(Entry(
            name=name.strip(),
            flags=frozenset(re.findall(r"TEST_F_\w+", flags_text)),
            min_version=tuple(int(g) for g in version.groups()) if version else (0,),
            scenarios=tuple(scenario.group(1).split(",")) if scenario else ("default",)))
    return entries


def broker_tests(test_c: str, version: str = KAFKA_VERSION) -> list[Entry]:
    """The entries that need a broker and apply to `version`: what `make compat` accounts
    for, one row each."""
    return [e for e in parse_tests(test_c) if e.needs_broker and e.applies_to(version)]
