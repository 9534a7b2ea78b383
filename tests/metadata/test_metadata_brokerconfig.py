"""Dynamic configs in the metadata store, on SQLite and PostgreSQL: broker configs
(metadata/brokerconfig.py: Kafka's names and checks, per broker and at the cluster default,
incremental and replacing changes, validate_only) and group configs (groupconfig.py)."""

from __future__ import annotations

import pytest

from metadata import MetadataStore
from metadata.brokerconfig import DYNAMIC, PER_BROKER, sensitive, validate
from metadata.errors import InvalidBrokerConfigError, InvalidConfigError
from metadata.groupconfig import validate as validate_group
from metadata.topicconfig import AlterOp, ConfigChange

SET, DELETE, APPEND, SUBTRACT = AlterOp.SET, AlterOp.DELETE, AlterOp.APPEND, AlterOp.SUBTRACT


def test_kafka_dynamic_names_and_modes() -> None:
    """The names librdkafka's 0081 sets are dynamic; the listener/SASL ones per broker only,
    the thread pools and topic defaults also cluster-wide."""
    for name in ("sasl.kerberos.min.time.before.relogin", "background.threads",
                 "log.cleanup.policy", "log.retention.ms", "message.max.bytes",
                 "max.connections", "listener.security.protocol.map"):
        assert name in DYNAMIC
    assert "sasl.kerberos.min.time.before.relogin" in PER_BROKER
    assert not {"background.threads", "log.cleanup.policy", "max.connections"} & PER_BROKER
    assert sensitive("ssl.key.password") and sensitive("listener.name.ext.ssl.key.password")
    assert sensitive("listener.name.ext.plain.sasl.jaas.config")
    assert not sensitive("background.threads")


@pytest.mark.parametrize(("configs", "per_broker", "words"), [
    ({"agent.linger.ms": "5"}, True,
     "Cannot update these configs dynamically: Set(agent.linger.ms)"),
    ({"log.retention.hours": "1", "zookeeper.x": "y"}, True,
     "Cannot update these configs dynamically: Set(log.retention.hours, zookeeper.x)"),
    ({"ssl.keystore.location": "/k"}, True,
     "These security configs can be dynamically updated only per-listener using the listener"
     " prefix: Set(ssl.keystore.location)"),
    ({"sasl.kerberos.min.time.before.relogin": "soon"}, True,
     "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a"
     " number of type LONG"),
    ({"sasl.login.refresh.window.factor": "2"}, True,
     "Invalid value 2 for configuration sasl.login.refresh.window.factor: Value must be no"
     " more than 1.0"),
    ({"background.threads": "0"}, False,
     "Invalid value 0 for configuration background.threads: Value must be at least 1"),
    ({"ssl.client.auth": "maybe"}, True, "String must be one of: required, requested, none"),
    ({"log.cleanup.policy": "sometimes"}, False, "configuration log.cleanup.policy: must be"),
    ({"transaction.partition.verification.enable": "yes"}, False,
     "Expected value to be either true or false"),
    ({"sasl.kerberos.min.time.before.relogin": "58000"}, False,
     "Cannot update these configs at default cluster level, broker id must be specified:"
     " Set(sasl.kerberos.min.time.before.relogin)"),
    ({"listener.name.ext.ssl.keystore.location": "/k"}, False,
     "Cannot update these configs at default cluster level"),
])
def test_validate_refuses_as_kafka(configs: dict[str, str], per_broker: bool,
                                   words: str) -> None:
    with pytest.raises(InvalidBrokerConfigError) as refused:
        validate(configs, per_broker=per_broker)
    assert words in str(refused.value)


def test_validate_accepts_per_listener_and_cluster_wide() -> None:
    validate({"listener.name.ext.ssl.keystore.location": "/k",
              "listener.name.ext.scram-sha-256.sasl.jaas.config": "x required;",
              "sasl.kerberos.min.time.before.relogin": "58000"}, per_broker=True)
    validate({"max.connections": "100", "log.retention.ms": "1000",
              "listener.name.ext.max.connections": "5"}, per_broker=False)


def test_alter_incrementally_per_broker_and_default(store: MetadataStore) -> None:
    assert store.broker_configs(1) == ({}, {})
    got = store.alter_broker_configs(1, True, [
        ConfigChange("sasl.kerberos.min.time.before.relogin", SET, "58000"),
        ConfigChange("background.threads", SET, "9"),
        ConfigChange("log.cleanup.policy", APPEND, "compact")])
    assert got == {"sasl.kerberos.min.time.before.relogin": "58000",
                   "background.threads": "9", "log.cleanup.policy": "delete,compact"}
    store.alter_broker_configs(1, True, [ConfigChange("background.threads", DELETE),
                                         ConfigChange("log.cleanup.policy", SUBTRACT,
                                                      "compact")])
    store.alter_broker_configs(1, False, [ConfigChange("log.retention.ms", SET, "1000")])
    assert store.broker_configs(1) == (
        {"log.retention.ms": "1000"},
        {"sasl.kerberos.min.time.before.relogin": "58000", "log.cleanup.policy": "delete"})
    assert store.broker_configs(2) == ({"log.retention.ms": "1000"}, {})  # another broker


def test_refused_and_dry_changes_store_nothing(store: MetadataStore) -> None:
    store.alter_broker_configs(1, True, [ConfigChange("background.threads", SET, "12")])
    before = store.broker_configs(1)
    with pytest.raises(InvalidConfigError, match=r"append is not allowed for config key:"
                                                 r" background\.threads"):
        store.alter_broker_configs(1, True, [ConfigChange("background.threads", APPEND, "1")])
    with pytest.raises(InvalidBrokerConfigError, match="at least half the current value 12"):
        store.alter_broker_configs(1, True, [ConfigChange("background.threads", SET, "5")])
    with pytest.raises(InvalidBrokerConfigError, match="dynamically: Set"):
        store.alter_broker_configs(1, True, [ConfigChange("num.partitions", SET, "3")])
    dry = store.alter_broker_configs(1, True, [ConfigChange("max.connections", SET, "7")],
                                     validate_only=True)
    assert dry == {"background.threads": "12", "max.connections": "7"}
    assert store.broker_configs(1) == before


def test_replace_sets_exactly_those_given(store: MetadataStore) -> None:
    """The legacy AlterConfigs: the set becomes what it gives."""
    store.alter_broker_configs(1, True, [ConfigChange("background.threads", SET, "12"),
                                         ConfigChange("max.connections", SET, "7")])
    store.alter_broker_configs(1, True, [
        ConfigChange("sasl.kerberos.min.time.before.relogin", SET, "58000")], replace=True)
    assert store.broker_configs(1)[1] == {"sasl.kerberos.min.time.before.relogin": "58000"}
    store.alter_broker_configs(1, True, [], replace=True)
    assert store.broker_configs(1) == ({}, {})


def test_group_configs_checked_as_kafka_and_stored(store: MetadataStore) -> None:
    """Kafka 4.0's GroupConfig on any group id: SET and DELETE, its names, types
    and bounds refused with Kafka's words, nothing stored then; apart from brokers'."""
    assert store.group_configs("g") == {}
    store.alter_group_configs("g", [ConfigChange("consumer.session.timeout.ms", SET, "50000")])
    assert store.group_configs("g") == {"consumer.session.timeout.ms": "50000"}
    assert store.group_configs("other") == {}
    for change, words in [
        (ConfigChange("consumer.session.timeout.ms", SET, "70000"),
         "consumer.session.timeout.ms must be less than or equal to"
         " group.consumer.max.session.timeout.ms"),
        (ConfigChange("share.record.lock.duration.ms", SET, "1000"),
         "share.record.lock.duration.ms must be greater than or equal to"
         " group.share.min.record.lock.duration.ms"),
        (ConfigChange("consumer.heartbeat.interval.ms", SET, "soon"),
         "Invalid value soon for configuration consumer.heartbeat.interval.ms: Not a number"
         " of type INT"),
        (ConfigChange("share.auto.offset.reset", SET, "never"),
         "Invalid value never for configuration share.auto.offset.reset: String must be one"
         " of: earliest, latest"),
        (ConfigChange("retention.ms", SET, "1"), "Unknown group config name: retention.ms"),
        (ConfigChange("consumer.session.timeout.ms", APPEND, "1"),
         "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST."),
    ]:
        with pytest.raises(InvalidConfigError) as refused:
            store.alter_group_configs("g", [change])
        assert str(refused.value) == words
    validate_group({"consumer.session.timeout.ms": "60000",
                    "consumer.heartbeat.interval.ms": "15000",
                    "share.auto.offset.reset": "earliest"})
    store.alter_group_configs("g", [ConfigChange("consumer.session.timeout.ms", DELETE)],
                              validate_only=True)
    assert store.group_configs("g") == {"consumer.session.timeout.ms": "50000"}
    store.alter_group_configs("g", [ConfigChange("consumer.session.timeout.ms", DELETE)])
    assert store.group_configs("g") == {}
    assert store.broker_configs(1) == ({}, {})
