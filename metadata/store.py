"""`MetadataStore`: the one handle on the metadata database, a thin facade over the
concern modules — topics.py, files.py (agent commits, GC), history.py (pruning finished
jobs' and deleted files' rows), retention.py, reads.py (segments, snapshots, stats),
jobs.py (compaction leases and commits), agents.py (the agent registry), producers.py
(idempotent producers), quotas.py (client quotas), brokerconfig.py and groupconfig.py
(dynamic broker and group configs; dynconfigs.py their rows), txnlog.py (open
transactions, the aborted-transaction index), groups.py (consumer groups: coordinator
leases, stored groups, committed offsets), acls.py (ACL bindings), users.py (SCRAM
credentials), txnstate.py (transaction coordinators' leases and state), notify.py (commit
notifications across processes) — on the shared `Database` of engine.py (engine,
migrations, transactions, the commit helper and its failure model), identity.py (the
cluster id and its bound store) and audit.py (`silt doctor`'s reads). The methods are
those modules' functions, so each is documented where it is implemented.
"""

from __future__ import annotations

from . import (
    acls,
    agents,
    audit,
    brokerconfig,
    files,
    groupconfig,
    groups,
    history,
    identity,
    jobs,
    notify,
    producers,
    quotas,
    reads,
    retention,
    topics,
    txnlog,
    txnstate,
    users,
)
from .engine import DEFAULT_URL, Database

__all__ = ["DEFAULT_URL", "MetadataStore"]


class MetadataStore(Database):
    """The cluster's metadata: topics and configs, partitions' offsets, objects and segments,
    compaction jobs, agents, idempotent producers' state. Thread-safe: one handle may be
    shared by threads (each call checks out its own connection). Open with
    `MetadataStore.open(url, create=..., clock=..., config=...)`."""

    # topics
    create_topic = topics.create_topic
    get_topic = topics.get_topic
    list_topics = topics.list_topics
    partitions = topics.partitions
    delete_topic = topics.delete_topic
    add_partitions = topics.add_partitions
    alter_topic_configs = topics.alter_topic_configs
    finish_hidden = topics.finish_hidden  # big creates and deletes a crash interrupted
    partition_summaries = topics.partition_summaries  # `silt topics describe`
    # files: agent commits and GC
    register_pending_file = files.register_pending_file
    commit_file = files.commit_file
    commit_files = files.commit_files
    commit_produced = files.commit_produced
    commit_sink_batch = files.commit_sink_batch  # exactly-once streaming sinks
    last_sink_batch = files.last_sink_batch
    abandon_file = files.abandon_file
    get_file = files.get_file
    files_to_gc = files.files_to_gc
    mark_deleting = files.mark_deleting
    mark_deleted = files.mark_deleted
    prune = history.prune  # history rows past their retention
    # retention
    apply_retention = retention.apply_retention
    retention_due = retention.retention_due
    delete_records = retention.delete_records
    # reads
    find_segments = reads.find_segments
    partitions_from = reads.partitions_from  # Fetch: offsets and first segments of many
    partition_offsets = reads.partition_offsets  # woken long-polls: offsets of many
    stats = reads.stats
    snapshot = reads.snapshot
    # `silt doctor`
    audit_snapshot = audit.audit_snapshot
    files_by_key = audit.files_by_key
    # compaction jobs
    lease_job = jobs.lease_job
    renew_lease = jobs.renew_lease
    release_job = jobs.release_job
    commit_compaction = jobs.commit_compaction
    get_job = jobs.get_job
    list_jobs = jobs.list_jobs
    # the agent registry
    register_agent = agents.register_agent
    heartbeat_agent = agents.heartbeat_agent
    deregister_agent = agents.deregister_agent
    live_brokers = agents.live_brokers
    # transactions on the partitions' side (last stable offsets: `partitions`, `snapshot`)
    aborted_transactions = txnlog.aborted_transactions
    # idempotent producers
    allocate_producer_id = producers.allocate_producer_id
    producer_state = producers.producer_state
    partition_producers = producers.partition_producers  # DescribeProducers
    # client quotas
    client_quotas = quotas.client_quotas
    alter_client_quotas = quotas.alter_client_quotas
    # dynamic broker configs (stored and described, not applied)
    broker_configs = brokerconfig.broker_configs
    alter_broker_configs = brokerconfig.alter_broker_configs
    # group configs (Kafka 4.0's GroupConfig: stored and described, not applied)
    group_configs = groupconfig.group_configs
    alter_group_configs = groupconfig.alter_group_configs
    expire_producers = producers.expire_producers
    # consumer groups
    group_coordinator = groups.group_coordinator
    acquire_group = groups.acquire_group
    held_groups = groups.held_groups
    held_existing_groups = groups.held_existing_groups
    adopt_groups = groups.adopt_groups
    live_coordinators = groups.live_coordinators
    load_group = groups.load_group
    store_group = groups.store_group
    list_groups = groups.list_groups
    commit_offsets = groups.commit_offsets
    fetch_offsets = groups.fetch_offsets
    group_lag = groups.group_lag
    delete_offsets = groups.delete_offsets
    reset_offsets = groups.reset_offsets
    delete_group = groups.delete_group
    expire_offsets = groups.expire_offsets
    # transactions (coordinator leases, state, pending offsets)
    transaction_coordinator = txnstate.transaction_coordinator
    acquire_transaction = txnstate.acquire_transaction
    held_transactions = txnstate.held_transactions
    live_transaction_coordinators = txnstate.live_coordinators
    load_transaction = txnstate.load_transaction
    store_transaction = txnstate.store_transaction
    list_transactions = txnstate.list_transactions
    unfinished_transactions = txnstate.unfinished
    add_transaction_offsets = txnstate.add_offsets
    pending_transaction_offsets = txnstate.pending_offsets
    pending_group_partitions = txnstate.pending_partitions
    complete_transaction = txnstate.complete_transaction
    # the cluster's identity (the object store's marker holds the same id)
    cluster_identity = identity.cluster_identity
    bind_store = identity.bind_store
    # users: SCRAM credentials (SASL logins read them)
    scram_credentials = users.scram_credentials
    scram_users = users.scram_users
    alter_scram_credentials = users.alter_scram_credentials
    # ACL bindings (agents cache them by version: agent/protocol/authz.py)
    create_acls = acls.create_acls
    delete_acls = acls.delete_acls
    list_acls = acls.list_acls
    acl_version = acls.acl_version
    # commit notifications across processes (long-poll wake-ups)
    watch_commits = notify.watch_commits
