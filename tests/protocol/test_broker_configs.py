"""Dynamic broker configs (KIP-226) and group configs through real clients against a real
`silt agent`, on SQLite and PostgreSQL: what librdkafka's 0081 (do_test_AlterConfigs,
do_test_IncrementalAlterConfigs) asks of a broker — `sasl.kerberos.min.time.before.relogin`
set on the broker by AlterConfigs and IncrementalAlterConfigs, `background.threads` SET and
DELETE, `log.cleanup.policy` APPEND and SUBTRACT, a group's consumer.session.timeout.ms —
then DescribeConfigs showing them with Kafka's sources and synonyms order; Kafka's
refusals; the checks both alter APIs share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import KafkaAdminClient
from kio.schema.alter_configs.v2 import request as ac2
from kio.schema.describe_configs.v4 import request as dc4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as iac1
from kio.static.primitive import i8

from .server import AgentProcess, RawClient

KERBEROS = "sasl.kerberos.min.time.before.relogin"
BROKER_SOURCE = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DEFAULT_BROKER_SOURCE = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value


def _node(agent: AgentProcess) -> str:
    md = agent.metadata()
    try:
        return str(md.live_brokers()[0].node_id)
    finally:
        md.close()


def _set(name: str, value: str | None,
         op: AlterConfigOpType = AlterConfigOpType.SET) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=op)


def _error(admin: AdminClient, resource: ConfigResource, validate_only: bool = False
           ) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([resource], validate_only=validate_only)[
            resource].result(60)
    error: KafkaError = refused.value.args[0]
    return error


@pytest.fixture
def admin(any_agent: AgentProcess) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": any_agent.bootstrap})


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_admin_sets_and_describes_broker_configs(any_agent: AgentProcess,
                                                           admin: AdminClient) -> None:
    node = _node(any_agent)
    legacy = ConfigResource(ResourceType.BROKER, node, set_config={KERBEROS: "58000"})
    admin.alter_configs([legacy])[legacy].result(60)
    broker = ConfigResource(ResourceType.BROKER, node)
    described = admin.describe_configs([broker])[broker].result(60)
    kerberos = described[KERBEROS]
    assert (kerberos.value, kerberos.source, kerberos.is_read_only) == (
        "58000", BROKER_SOURCE, False)
    assert list(kerberos.synonyms) == [KERBEROS]  # (confluent keys synonyms by name)
    assert described["auto.create.topics.enable"].is_read_only  # not dynamic in Kafka
    assert not described["background.threads"].is_read_only  # dynamic, at Kafka's default
    assert described["background.threads"].source == DEFAULT

    # 0081's test helper: SET and APPEND, then DELETE and SUBTRACT, on the broker.
    changes = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        _set("background.threads", "9"),
        _set("log.cleanup.policy", "compact", AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([changes])[changes].result(60)
    described = admin.describe_configs([broker])[broker].result(60)
    assert {k: (described[k].value, described[k].source) for k in (
        "background.threads", "log.cleanup.policy", KERBEROS)} == {
        "background.threads": ("9", BROKER_SOURCE),
        "log.cleanup.policy": ("delete,compact", BROKER_SOURCE),
        KERBEROS: ("58000", BROKER_SOURCE)}  # incremental: the others stay
    back = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        _set("background.threads", None, AlterConfigOpType.DELETE),
        _set("log.cleanup.policy", "compact", AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([back])[back].result(60)
    described = admin.describe_configs([broker])[broker].result(60)
    assert (described["background.threads"].value, described["background.threads"].source,
            described["log.cleanup.policy"].value) == ("10", DEFAULT, "delete")

    # The cluster-wide default (""; confluent-kafka refuses an empty name): beneath the
    # broker's own, above the static ones.
    mine = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        _set("log.retention.ms", "2000")])
    admin.incremental_alter_configs([mine])[mine].result(60)
    client = RawClient(any_agent.port)
    try:
        cluster = client.call(44, 1, iac1.IncrementalAlterConfigsRequest(resources=(
            iac1.AlterConfigsResource(resource_type=i8(4), resource_name="", configs=tuple(
                iac1.AlterableConfig(name=k, config_operation=i8(0), value=v)
                for k, v in (("log.retention.ms", "1000"), ("max.connections", "500")))),),
            validate_only=False)).responses
        assert [r.error_code for r in cluster] == [ErrorCode.none]
        got = client.call(32, 4, dc4.DescribeConfigsRequest(resources=(
            dc4.DescribeConfigsResource(resource_type=i8(4), resource_name=node,
                                        configuration_keys=("log.retention.ms",)),
            dc4.DescribeConfigsResource(resource_type=i8(4), resource_name="",
                                        configuration_keys=None),
        ), include_synonyms=True, include_documentation=True)).results
    finally:
        client.close()
    (retention,) = got[0].configs
    assert (retention.value, retention.config_source, retention.read_only) == (
        "2000", BROKER_SOURCE, False)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.ms", "2000", BROKER_SOURCE),
        ("log.retention.ms", "1000", DEFAULT_BROKER_SOURCE),
        ("log.retention.ms", "604800000", DEFAULT)]
    assert retention.documentation is not None and "not applied" in retention.documentation
    assert [(c.name, c.value, c.config_source) for c in got[1].configs] == [
        ("log.retention.ms", "1000", DEFAULT_BROKER_SOURCE),
        ("max.connections", "500", DEFAULT_BROKER_SOURCE)]  # "": the default's only

    # A password: stored, never described.
    secret = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        _set("listener.name.plaintext.ssl.key.password", "s3cret")])
    admin.incremental_alter_configs([secret])[secret].result(60)
    hidden = admin.describe_configs([broker])[broker].result(60)[
        "listener.name.plaintext.ssl.key.password"]
    assert (hidden.value, hidden.is_sensitive, hidden.source) == (None, True, BROKER_SOURCE)
    md = any_agent.metadata()
    try:
        default, own = md.broker_configs(int(node))
    finally:
        md.close()
    assert default == {"log.retention.ms": "1000", "max.connections": "500"}
    assert own == {KERBEROS: "58000", "log.cleanup.policy": "delete",
                   "log.retention.ms": "2000", "listener.name.plaintext.ssl.key.password":
                   "s3cret"}


def test_confluent_admin_gets_kafkas_refusals(any_agent: AgentProcess,
                                              admin: AdminClient) -> None:
    node = _node(any_agent)
    cases = [
        (node, _set("agent.linger.ms", "5"),
         "Cannot update these configs dynamically: Set(agent.linger.ms)"),
        (node, _set("ssl.keystore.location", "/k"), "only per-listener"),
        (node, _set(KERBEROS, "soon"), "Not a number of type LONG"),
        (node, _set("background.threads", "30"),
         "not be greater than double the current value 10"),
    ]
    for name, change, words in cases:
        error = _error(admin, ConfigResource(ResourceType.BROKER, name,
                                             incremental_configs=[change]))
        assert error.code() == KafkaError.INVALID_REQUEST, (change.name, error)
        assert words in error.str(), (change.name, error.str())
    appended = _error(admin, ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        _set("background.threads", "1", AlterConfigOpType.APPEND)]))
    assert appended.code() == KafkaError.INVALID_CONFIG
    dry = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        _set(KERBEROS, "58000")])
    admin.incremental_alter_configs([dry], validate_only=True)[dry].result(60)
    md = any_agent.metadata()
    try:
        assert md.broker_configs(int(node)) == ({}, {})  # nothing of it all stored
    finally:
        md.close()


def test_kafka_python_admin_alters_broker_configs(any_agent: AgentProcess) -> None:
    node = _node(any_agent)
    admin = KafkaAdminClient(bootstrap_servers=any_agent.bootstrap)
    try:
        admin.alter_configs([KConfigResource("BROKER", node, configs={
            KERBEROS: "58000", "log.cleanup.policy": ("APPEND", "compact")})])
        admin.alter_configs([KConfigResource("BROKER", node, configs={
            "num.io.threads": "12"})], incremental=False)  # legacy: the set is replaced
        described = admin.describe_configs([KConfigResource("BROKER", node)],
                                           include_synonyms=True)
        modified = described["broker"][node]  # kafka-python's default filter: modified
        assert {k: (v["value"], v["config_source"]) for k, v in modified.items()
                if v["config_source"] == "DYNAMIC_BROKER_CONFIG"} == {
            KERBEROS: ("58000", "DYNAMIC_BROKER_CONFIG"),
            "log.cleanup.policy": ("delete,compact", "DYNAMIC_BROKER_CONFIG"),
            "num.io.threads": ("12", "DYNAMIC_BROKER_CONFIG")}
        with pytest.raises(ValueError, match="Unrecognized configs"):  # read-only here
            admin.alter_configs([KConfigResource("BROKER", node, configs={
                "auto.create.topics.enable": "true"})])
    finally:
        admin.close()


def test_both_alter_apis_check_a_request_as_kafkas_broker(any_agent: AgentProcess) -> None:
    """The checks AlterConfigs and IncrementalAlterConfigs share (Kafka's
    ConfigAdminManager.preprocess): a resource named twice (both answered), a key given
    twice, a null value, an unknown resource type; the others are altered."""
    node = _node(any_agent)
    client = RawClient(any_agent.port)
    try:
        legacy = client.call(33, 2, ac2.AlterConfigsRequest(resources=(
            ac2.AlterConfigsResource(resource_type=i8(4), resource_name=node, configs=(
                ac2.AlterableConfig(name=KERBEROS, value="58000"),)),
            ac2.AlterConfigsResource(resource_type=i8(2), resource_name="u", configs=(
                ac2.AlterableConfig(name="retention.ms", value=None),)),
            ac2.AlterConfigsResource(resource_type=i8(99), resource_name="x", configs=()),
            ac2.AlterConfigsResource(resource_type=i8(2), resource_name="t", configs=(
                ac2.AlterableConfig(name="retention.ms", value="1"),
                ac2.AlterableConfig(name="retention.ms", value="2"))),
            ac2.AlterConfigsResource(resource_type=i8(4), resource_name="", configs=(
                ac2.AlterableConfig(name=KERBEROS, value="1"),)),
            *(ac2.AlterConfigsResource(resource_type=i8(4), resource_name=other, configs=(
                ac2.AlterableConfig(name=KERBEROS, value="1"),))
              for other in (str(int(node) + 1), "x")),  # (librdkafka waits for such a broker)
        ), validate_only=False)).responses
        incremental = client.call(44, 1, iac1.IncrementalAlterConfigsRequest(resources=tuple(
            iac1.AlterConfigsResource(resource_type=i8(4), resource_name=node, configs=(
                iac1.AlterableConfig(name="background.threads", config_operation=i8(0),
                                     value=v),)) for v in ("9", "11")), validate_only=False
        )).responses
    finally:
        client.close()
    assert [(r.error_code, r.error_message) for r in legacy] == [
        (ErrorCode.none, None),
        (ErrorCode.invalid_request, "Null value not supported for : retention.ms"),
        (ErrorCode.invalid_request, "Unknown resource type 99"),
        (ErrorCode.invalid_request, "Error due to duplicate config keys"),
        (ErrorCode.invalid_request, "Cannot update these configs at default cluster level,"
         f" broker id must be specified: Set({KERBEROS})"),
        (ErrorCode.invalid_request,
         f"Unexpected broker id, expected {node}, but received {int(node) + 1}"),
        (ErrorCode.invalid_request, "Node id must be an integer, but it is: x")]
    assert [(r.error_code, r.error_message) for r in incremental] == [
        (ErrorCode.invalid_request, "Each resource must appear at most once.")] * 2
    md = any_agent.metadata()
    try:
        assert md.broker_configs(int(node)) == ({}, {KERBEROS: "58000"})
    finally:
        md.close()


def test_group_configs_set_and_described(any_agent: AgentProcess, admin: AdminClient) -> None:
    """0081's GROUP resource: Kafka 4.0's consumer.session.timeout.ms set on a group (any
    id), described as GROUP_CONFIG, bounds refused as Kafka's GroupConfig, DELETE back."""
    group = ConfigResource(ResourceType.GROUP, "my-group", incremental_configs=[
        _set("consumer.session.timeout.ms", "50000")])
    admin.incremental_alter_configs([group])[group].result(60)
    plain = ConfigResource(ResourceType.GROUP, "my-group")
    entry = admin.describe_configs([plain])[plain].result(60)["consumer.session.timeout.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "50000", ConfigSource.GROUP_CONFIG.value, False)
    other = ConfigResource(ResourceType.GROUP, "other")
    assert admin.describe_configs([other])[other].result(60)[
        "consumer.session.timeout.ms"].value == "45000"
    too_long = _error(admin, ConfigResource(ResourceType.GROUP, "my-group", incremental_configs=[
        _set("consumer.session.timeout.ms", "70000")]))
    assert too_long.code() == KafkaError.INVALID_CONFIG
    assert "group.consumer.max.session.timeout.ms" in too_long.str()
    unknown = _error(admin, ConfigResource(ResourceType.GROUP, "my-group", incremental_configs=[
        _set("retention.ms", "1")]))
    assert (unknown.code(), unknown.str()) == (
        KafkaError.INVALID_CONFIG, "Unknown group config name: retention.ms")
    back = ConfigResource(ResourceType.GROUP, "my-group", incremental_configs=[
        _set("consumer.session.timeout.ms", None, AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([back])[back].result(60)
    entry = admin.describe_configs([plain])[plain].result(60)["consumer.session.timeout.ms"]
    assert (entry.value, entry.source) == ("45000", DEFAULT)
