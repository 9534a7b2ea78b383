"""The ONE dispatch table: each API key's handler and the versions it supports.

ApiVersions answers from this table, so what is advertised is what is dispatched. A handler
is `async (context, request header, decoded request, response builder) -> reply`, where the
reply is a response entity, None (no response: Produce with acks=0), or an awaitable of
either (the response is written when it resolves, in request order: Produce returns one so
that the next request on the connection is read while a flush is pending). Each handler's
module names the request it takes, `Request`: the union of kio's request classes of the
versions it serves (tests/protocol/test_codec.py checks they are the table's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Never

from kio.static.protocol import RequestHeader

from ..codec import Builder, Reply
from ..context import ServerContext
from . import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
)

# The request: what kio decoded for the API's key and version, of the handler's `Request` type
# (Never here, so that every handler, whatever its own request type, is a Handler).
Handler = Callable[[ServerContext, RequestHeader, Never, Builder], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class Api:
    """One API: its key, supported versions (inclusive) and handler."""

    key: int
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    @property
    def name(self) -> str:
        """The API's name, as its handler's module is named (produce, join_group, ...)."""
        return self.handler.__module__.rpartition(".")[2]


PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 1, 2, 3, 10, 18
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 20, 21, 22
DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 32, 37, 44, 60
OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 43, 45, 46
DESCRIBE_TOPIC_PARTITIONS, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS, ALTER_CONFIGS = 75, 35, 61, 33
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS = 50, 51

TABLE: Mapping[int, Api] = {api.key: api for api in (
    Api(PRODUCE, 3, 12, produce.handle),
    Api(FETCH, 4, 17, fetch.handle),
    Api(LIST_OFFSETS, 1, 10, list_offsets.handle),
    Api(METADATA, 1, 13, metadata.handle),
    Api(FIND_COORDINATOR, 0, 6, find_coordinator.handle),
    Api(API_VERSIONS, 0, 4, api_versions.handle),
    Api(CREATE_TOPICS, 2, 7, create_topics.handle),
    Api(DELETE_TOPICS, 1, 6, delete_topics.handle),
    Api(DELETE_RECORDS, 0, 2, delete_records.handle),
    Api(INIT_PRODUCER_ID, 0, 4, init_producer_id.handle),
    Api(DESCRIBE_CONFIGS, 1, 4, describe_configs.handle),
    Api(CREATE_PARTITIONS, 0, 3, create_partitions.handle),
    Api(INCREMENTAL_ALTER_CONFIGS, 0, 1, incremental_alter_configs.handle),
    Api(DESCRIBE_CLUSTER, 0, 1, describe_cluster.handle),
    Api(OFFSET_COMMIT, 2, 9, offset_commit.handle),
    Api(OFFSET_FETCH, 1, 9, offset_fetch.handle),
    Api(JOIN_GROUP, 0, 9, join_group.handle),
    Api(HEARTBEAT, 0, 4, heartbeat.handle),
    Api(LEAVE_GROUP, 0, 5, leave_group.handle),
    Api(SYNC_GROUP, 0, 5, sync_group.handle),
    Api(DESCRIBE_GROUPS, 0, 6, describe_groups.handle),
    Api(LIST_GROUPS, 0, 5, list_groups.handle),
    Api(DELETE_GROUPS, 0, 2, delete_groups.handle),
    Api(OFFSET_DELETE, 0, 0, offset_delete.handle),
    Api(ELECT_LEADERS, 0, 2, elect_leaders.handle),
    Api(ALTER_PARTITION_REASSIGNMENTS, 0, 0, alter_partition_reassignments.handle),
    Api(LIST_PARTITION_REASSIGNMENTS, 0, 0, list_partition_reassignments.handle),
    Api(DESCRIBE_TOPIC_PARTITIONS, 0, 0, describe_topic_partitions.handle),
    Api(DESCRIBE_LOG_DIRS, 1, 4, describe_log_dirs.handle),
    Api(DESCRIBE_PRODUCERS, 0, 0, describe_producers.handle),
    Api(ALTER_CONFIGS, 0, 2, alter_configs.handle),
    Api(DESCRIBE_CLIENT_QUOTAS, 0, 1, describe_client_quotas.handle),
    Api(ALTER_CLIENT_QUOTAS, 0, 1, alter_client_quotas.handle),
    Api(DESCRIBE_ACLS, 1, 3, describe_acls.handle),
    Api(CREATE_ACLS, 1, 3, create_acls.handle),
    Api(DELETE_ACLS, 1, 3, delete_acls.handle),
    Api(ADD_PARTITIONS_TO_TXN, 0, 5, add_partitions_to_txn.handle),
    Api(ADD_OFFSETS_TO_TXN, 0, 4, add_offsets_to_txn.handle),
    Api(END_TXN, 0, 4, end_txn.handle),
    Api(TXN_OFFSET_COMMIT, 0, 4, txn_offset_commit.handle),
    Api(DESCRIBE_TRANSACTIONS, 0, 0, describe_transactions.handle),
    Api(LIST_TRANSACTIONS, 0, 1, list_transactions.handle),
    Api(SASL_HANDSHAKE, 0, 1, sasl_handshake.handle),
    Api(SASL_AUTHENTICATE, 0, 2, sasl_authenticate.handle),
    Api(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, describe_user_scram_credentials.handle),
    Api(ALTER_USER_SCRAM_CREDENTIALS, 0, 0, alter_user_scram_credentials.handle),
)}
