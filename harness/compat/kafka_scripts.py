"""Stand-ins for the Kafka distribution's scripts that librdkafka's tests run through
`$KAFKA_PATH/bin/` (Kafka itself is not installed here): `kafka-topics.sh` with the options
the tests use (`--create` with partitions, replication factor and `--config`, `--alter
--partitions`, `--delete`) and `kafka-acls.sh` (`--add`/`--remove` of allow or deny ACLs on
a literal topic), doing the same through a Kafka admin client (confluent-kafka), so the
broker sees the same CreateTopics / CreatePartitions / DeleteTopics / CreateAcls /
DeleteAcls requests.

`install(directory)` writes `bin/<script>.sh` there, running
`python -m harness.compat.kafka_scripts <script> ARGS` from this checkout; exit 1 with
Kafka's error on stderr when the broker refuses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.agent_process import REPO

TIMEOUT_S = 30.0


def install(directory: Path) -> Path:
    """Write the scripts into `directory`/bin; returns `directory` (the tests' KAFKA_PATH)."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in SCRIPTS:
        script = bin_dir / f"{name}.sh"
        script.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable}"
                          f" -m harness.compat.kafka_scripts {name} \"$@\"\n")
        script.chmod(0o755)
    return directory


def kafka_topics(argv: list[str]) -> int:
    """kafka-topics.sh: create, alter (partitions) or delete one topic."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewPartitions, NewTopic

    parser = argparse.ArgumentParser(prog="kafka-topics.sh")
    parser.add_argument("--bootstrap-server", required=True)
    action = parser.add_mutually_exclusive_group(required=True)
    for name in ("--create", "--alter", "--delete"):
        action.add_argument(name, action="store_true")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=-1)
    parser.add_argument("--replication-factor", type=int, default=-1)
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    if args.create:
        configs = dict(c.split("=", 1) for c in args.config)
        futures = admin.create_topics(
            [NewTopic(args.topic, args.partitions, args.replication_factor, config=configs)],
            operation_timeout=TIMEOUT_S)
    elif args.alter:
        futures = admin.create_partitions([NewPartitions(args.topic, args.partitions)],
                                          operation_timeout=TIMEOUT_S)
    else:
        futures = admin.delete_topics([args.topic], operation_timeout=TIMEOUT_S)
    try:
        for future in futures.values():
            future.result(TIMEOUT_S)
    except Exception as e:
        print(f"Error while executing topic command : {e}", file=sys.stderr)
        return 1
    return 0


def kafka_acls(argv: list[str]) -> int:
    """kafka-acls.sh: add or remove (`--force`: without asking) the ACLs a principal option
    and `--operation` name on one literal topic."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._acl import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
    )
    from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

    parser = argparse.ArgumentParser(prog="kafka-acls.sh")
    parser.add_argument("--bootstrap-server", required=True)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--allow-principal", action="append", default=[])
    parser.add_argument("--deny-principal", action="append", default=[])
    parser.add_argument("--allow-host", action="append", default=[])
    parser.add_argument("--deny-host", action="append", default=[])
    parser.add_argument("--operation", action="append", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args(argv)
    specs = []
    for permission, principals, hosts in (
            (AclPermissionType.ALLOW, args.allow_principal, args.allow_host or ["*"]),
            (AclPermissionType.DENY, args.deny_principal, args.deny_host or ["*"])):
        for principal in principals:
            for host in hosts:
                for operation in args.operation:
                    specs.append((ResourceType.TOPIC, args.topic, ResourcePatternType.LITERAL,
                                  principal, host, AclOperation[operation.upper()],
                                  permission))
    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    futures = (admin.create_acls([AclBinding(*spec) for spec in specs],
                                 request_timeout=TIMEOUT_S) if args.add else
               admin.delete_acls([AclBindingFilter(*spec) for spec in specs],
                                 request_timeout=TIMEOUT_S))
    try:
        for future in futures.values():
            future.result(TIMEOUT_S)
    except Exception as e:
        print(f"Error while executing ACL command: {e}", file=sys.stderr)
        return 1
    return 0


SCRIPTS = {"kafka-topics": kafka_topics, "kafka-acls": kafka_acls}

if __name__ == "__main__":
    sys.exit(SCRIPTS[sys.argv[1]](sys.argv[2:]))
