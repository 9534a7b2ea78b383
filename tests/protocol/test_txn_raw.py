"""The transaction coordinator's APIs with exact requests against a real `silt agent`:
Kafka's error codes, their order and their per-version forms (PRODUCER_FENCED as
INVALID_PRODUCER_EPOCH for old versions), KIP-890 verification of transactional produces,
DescribeTransactions and ListTransactions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kio.schema.add_offsets_to_txn.v3 import request as ao3
from kio.schema.add_partitions_to_txn.v1 import request as ap1
from kio.schema.add_partitions_to_txn.v3 import request as ap3
from kio.schema.add_partitions_to_txn.v4 import request as ap4
from kio.schema.describe_transactions.v0 import request as dt0
from kio.schema.end_txn.v3 import request as et3
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as ip4
from kio.schema.list_transactions.v1 import request as lt1
from kio.schema.offset_fetch.v7 import request as of7
from kio.schema.produce.v9 import request as p9
from kio.schema.txn_offset_commit.v3 import request as tc3
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from .server import AgentProcess, RawClient

E = ErrorCode


def _init(client: RawClient, txn: str, timeout_ms: int = 60_000,
          pid: int = -1, epoch: int = -1) -> tuple[ErrorCode, int, int]:
    r = client.call(22, 4, ip4.InitProducerIdRequest(
        transactional_id=TransactionalId(txn),
        transaction_timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
        producer_id=ProducerId(pid), producer_epoch=i16(epoch)))
    return r.error_code, int(r.producer_id), int(r.producer_epoch)


def _add(client: RawClient, txn: str, pid: int, epoch: int,
         parts: list[tuple[str, int]], version: int = 3) -> dict[tuple[str, int], ErrorCode]:
    module = ap3 if version == 3 else ap1
    topics: dict[str, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    r = client.call(24, version, module.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(txn),
        v3_and_below_producer_id=ProducerId(pid), v3_and_below_producer_epoch=i16(epoch),
        v3_and_below_topics=tuple(module.AddPartitionsToTxnTopic(
            name=TopicName(t), partitions=tuple(i32(p) for p in ps))
            for t, ps in topics.items())))
    return {(t.name, int(p.partition_index)): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def _txn_batch(pid: int, epoch: int, seq: int = 0) -> bytes:
    b = AioBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=pid,
                   producer_epoch=epoch, base_sequence=seq, batch_size=1 << 30)
    b.append(0, timestamp=1_000, key=b"k", value=b"v", headers=[])
    return bytes(b.build())


def _produce(client: RawClient, txn: str | None, parts: dict[tuple[str, int], bytes]
             ) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[Any]] = {}
    for (topic, p), records in parts.items():
        topics.setdefault(topic, []).append(
            p9.PartitionProduceData(index=i32(p), records=Records(records)))
    r = client.call(0, 9, p9.ProduceRequest(
        transactional_id=None if txn is None else TransactionalId(txn), acks=i16(-1),
        timeout=i32Timedelta.parse(timedelta(seconds=30)), topic_data=tuple(
            p9.TopicProduceData(name=TopicName(t), partition_data=tuple(ps))
            for t, ps in topics.items())))
    return {(t.name, int(p.index)): p.error_code for t in r.responses
            for p in t.partition_responses}


def test_coordinator_errors_in_kafkas_order(agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    md.create_topic("t", 2)
    md.close()
    client = RawClient(agent_proc.port)
    try:
        assert _init(client, "tx", timeout_ms=900_001)[0] is E.invalid_transaction_timeout
        assert _init(client, "")[0] is E.invalid_request
        assert _init(client, "tx", pid=5)[0] is E.invalid_request  # epoch -1 without id
        error, pid, epoch = _init(client, "tx")
        assert (error, epoch) == (E.none, 0) and pid >= 0
        # Unknown partitions fail the whole request (nothing added).
        assert _add(client, "tx", pid, 0, [("t", 0), ("t", 9)]) == {
            ("t", 0): E.operation_not_attempted, ("t", 9): E.unknown_topic_or_partition}
        assert _add(client, "nope", pid, 0, [("t", 0)]) == {
            ("t", 0): E.invalid_producer_id_mapping}
        assert _add(client, "tx", pid + 1, 0, [("t", 0)]) == {
            ("t", 0): E.invalid_producer_id_mapping}
        assert _add(client, "tx", pid, 0, [("t", 0)]) == {("t", 0): E.none}
        # A second InitProducerId fences the first producer and aborts its transaction.
        retried = _init(client, "tx")
        assert retried[0] in (E.concurrent_transactions, E.none)
        # Old request versions get INVALID_PRODUCER_EPOCH for PRODUCER_FENCED.
        assert _add(client, "tx", pid, 0, [("t", 1)]) == {("t", 1): E.producer_fenced}
        assert _add(client, "tx", pid, 0, [("t", 1)], version=1) == {
            ("t", 1): E.invalid_producer_epoch}
        r = client.call(25, 3, ao3.AddOffsetsToTxnRequest(
            transactional_id=TransactionalId("tx"), producer_id=ProducerId(pid),
            producer_epoch=i16(0), group_id=GroupId("g")))
        assert r.error_code is E.producer_fenced
        r = client.call(26, 3, et3.EndTxnRequest(
            transactional_id=TransactionalId("tx"), producer_id=ProducerId(pid),
            producer_epoch=i16(0), committed=True))
        assert r.error_code is E.producer_fenced
    finally:
        client.close()


def test_produce_verification(agent_proc: AgentProcess) -> None:
    """KIP-890 part 1 as Kafka answers a Produce before v12: the transactional id's producer
    and the partition added to its ongoing transaction, else nothing stored."""
    md = agent_proc.metadata()
    md.create_topic("t", 2)
    md.close()
    client = RawClient(agent_proc.port)
    try:
        _, pid, _ = _init(client, "tx")
        assert _produce(client, None, {("t", 0): _txn_batch(pid, 0)}) == {
            ("t", 0): E.transactional_id_authorization_failed}
        assert _produce(client, "nope", {("t", 0): _txn_batch(pid, 0)}) == {
            ("t", 0): E.invalid_producer_id_mapping}
        # Not added to a transaction: INVALID_TXN_STATE.
        assert _produce(client, "tx", {("t", 0): _txn_batch(pid, 0)}) == {
            ("t", 0): E.invalid_txn_state}
        assert _add(client, "tx", pid, 0, [("t", 0)]) == {("t", 0): E.none}
        # Another partition of the same request, never added: refused alone.
        got = _produce(client, "tx", {("t", 1): _txn_batch(pid, 0)})
        assert got == {("t", 1): E.invalid_txn_state}
        assert _produce(client, "tx", {("t", 0): _txn_batch(pid, 1)}) == {
            ("t", 0): E.invalid_producer_epoch}
        # Two producers' batches in one request.
        assert set(_produce(client, "tx", {("t", 0): _txn_batch(pid, 0),
                                           ("t", 1): _txn_batch(pid + 1, 0)}).values()) == {
            E.invalid_producer_id_mapping}
    finally:
        client.close()


def test_describe_and_list(agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    md.create_topic("t", 2)
    md.close()
    client = RawClient(agent_proc.port)
    try:
        _, pid, _ = _init(client, "tx", timeout_ms=30_000)
        _add(client, "tx", pid, 0, [("t", 0), ("t", 1)])
        _init(client, "idle")
        r = client.call(65, 0, dt0.DescribeTransactionsRequest(
            transactional_ids=(TransactionalId("tx"), TransactionalId("none"),
                               TransactionalId(""))))
        tx, none, empty = r.transaction_states
        assert (tx.error_code, tx.transaction_state, int(tx.producer_id)) == (
            E.none, "Ongoing", pid)
        assert tx.transaction_timeout == timedelta(seconds=30)
        assert [(t.topic, list(t.partitions)) for t in tx.topics] == [("t", [0, 1])]
        assert none.error_code is E.transactional_id_not_found
        assert empty.error_code is E.invalid_request
        listed = client.call(66, 1, lt1.ListTransactionsRequest(
            state_filters=("Ongoing", "Bogus"), producer_id_filters=(),
            duration_filter=i64(-1)))
        assert listed.error_code is E.none and listed.unknown_state_filters == ("Bogus",)
        assert [(s.transactional_id, s.transaction_state)
                for s in listed.transaction_states] == [("tx", "Ongoing")]
        every = client.call(66, 1, lt1.ListTransactionsRequest(
            state_filters=(), producer_id_filters=(), duration_filter=i64(-1)))
        assert sorted(s.transactional_id for s in every.transaction_states) == ["idle", "tx"]
    finally:
        client.close()


def test_txn_offset_commit_and_require_stable(agent_proc: AgentProcess) -> None:
    """TxnOffsetCommit's offsets are held by the transaction: OffsetFetch with
    require_stable answers UNSTABLE_OFFSET_COMMIT until it ends, then the committed ones."""
    md = agent_proc.metadata()
    md.create_topic("t", 2)
    client = RawClient(agent_proc.port)
    try:
        _, pid, _ = _init(client, "tx")

        def commit(epoch: int) -> ErrorCode:
            r = client.call(28, 3, tc3.TxnOffsetCommitRequest(
                transactional_id=TransactionalId("tx"), group_id=GroupId("g"),
                producer_id=ProducerId(pid), producer_epoch=i16(epoch),
                generation_id=i32(-1), member_id="", group_instance_id=None,
                topics=(tc3.TxnOffsetCommitRequestTopic(name=TopicName("t"), partitions=(
                    tc3.TxnOffsetCommitRequestPartition(
                        partition_index=i32(0), committed_offset=i64(7),
                        committed_leader_epoch=i32(-1), committed_metadata="m"),)),)))
            code: ErrorCode = r.topics[0].partitions[0].error_code
            return code

        def fetch(stable: bool) -> tuple[ErrorCode, int]:
            r = client.call(9, 7, of7.OffsetFetchRequest(
                group_id=GroupId("g"), topics=(of7.OffsetFetchRequestTopic(
                    name=TopicName("t"), partition_indexes=(i32(0),)),),
                require_stable=stable))
            p = r.topics[0].partitions[0]
            return p.error_code, int(p.committed_offset)

        assert commit(0) is E.invalid_txn_state  # the group was never added
        r = client.call(25, 3, ao3.AddOffsetsToTxnRequest(
            transactional_id=TransactionalId("tx"), producer_id=ProducerId(pid),
            producer_epoch=i16(0), group_id=GroupId("g")))
        assert r.error_code is E.none
        assert commit(1) is E.invalid_producer_epoch  # PRODUCER_FENCED, as verification
        assert commit(0) is E.none
        assert fetch(True) == (E.unstable_offset_commit, -1)
        assert fetch(False) == (E.none, -1)  # not committed yet
        r = client.call(26, 3, et3.EndTxnRequest(
            transactional_id=TransactionalId("tx"), producer_id=ProducerId(pid),
            producer_epoch=i16(0), committed=True))
        assert r.error_code is E.none
        assert fetch(True) == (E.none, 7)
        assert [o.offset for o in md.fetch_offsets("g")] == [7]
    finally:
        client.close()
        md.close()


def _add_batched(client: RawClient, txns: list[tuple[str, int, int, bool, list[tuple[str, int]]]]
                 ) -> dict[str, dict[tuple[str, int], ErrorCode]]:
    """AddPartitionsToTxn v4 (a broker's batch): per transactional id, its partitions'
    errors."""
    r = client.call(24, 4, ap4.AddPartitionsToTxnRequest(transactions=tuple(
        ap4.AddPartitionsToTxnTransaction(
            transactional_id=TransactionalId(txn), producer_id=ProducerId(pid),
            producer_epoch=i16(epoch), verify_only=verify, topics=tuple(
                ap4.AddPartitionsToTxnTopic(name=TopicName(t), partitions=(i32(p),))
                for t, p in parts))
        for txn, pid, epoch, verify, parts in txns)))
    assert r.error_code is E.none
    return {res.transactional_id: {(t.name, int(p.partition_index)): p.partition_error_code
                                   for t in res.topic_results for p in t.results_by_partition}
            for res in r.results_by_transaction}


def test_batched_add_and_verify_as_a_broker_sends_them(agent_proc: AgentProcess) -> None:
    """v4 (KIP-890): many transactions in one request, some only verified: added
    partitions NONE, others TRANSACTION_ABORTABLE, an unknown id INVALID_PRODUCER_ID_MAPPING,
    a stale epoch PRODUCER_FENCED, an unknown partition fails its transaction only."""
    md = agent_proc.metadata()
    md.create_topic("b", 3)
    md.close()
    client = RawClient(agent_proc.port)
    try:
        _, pid_a, epoch_a = _init(client, "ta")
        _, pid_b, epoch_b = _init(client, "tb")
        assert _add_batched(client, [
            ("ta", pid_a, epoch_a, False, [("b", 0), ("b", 1)]),
            ("tb", pid_b, epoch_b, False, [("b", 2), ("b", 7)]),
        ]) == {"ta": {("b", 0): E.none, ("b", 1): E.none},
               "tb": {("b", 2): E.operation_not_attempted,
                      ("b", 7): E.unknown_topic_or_partition}}
        assert _add_batched(client, [
            ("ta", pid_a, epoch_a, True, [("b", 0), ("b", 2)]),
            ("tb", pid_b, epoch_b, True, [("b", 2)]),
            ("ta", pid_a, epoch_a + 1, True, [("b", 0)]),
        ])["ta"] == {("b", 0): E.producer_fenced}  # the later entry of "ta" answers
        verified = _add_batched(client, [("ta", pid_a, epoch_a, True, [("b", 0), ("b", 2)]),
                                         ("tb", pid_b, epoch_b, True, [("b", 2)]),
                                         ("nope", 1, 0, True, [("b", 0)])])
        assert verified == {"ta": {("b", 0): E.none, ("b", 2): E.transaction_abortable},
                            "tb": {("b", 2): E.transaction_abortable},
                            "nope": {("b", 0): E.invalid_producer_id_mapping}}
        # What the client versions see of the batched adds: "ta" holds b/0 and b/1.
        assert _add(client, "ta", pid_a, epoch_a, [("b", 1)]) == {("b", 1): E.none}
    finally:
        client.close()
