"""Compressed client batches end to end: stored as sent, read back by the Reader and
`silt consume`, and compacted with Kafka's topic `compression.type` rules (fully surviving
batches copied byte for byte; partially surviving ones rewritten in the topic's codec,
`producer` keeping each batch's own)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import Agent, AgentConfig, Reader
from cli.main import cli
from clock import ManualClock
from compactor import Compactor, CompactorConfig
from fileformat import (
    TOPIC_COMPRESSIONS,
    WRITABLE_COMPRESSIONS,
    Compression,
    Record,
    decode_batch,
    iter_batches,
)
from metadata import MetadataStore
from objectstore import ObjectStore, open_store
from tests.fileformat.client_batches import (
    CLIENT_BATCHES,
    Builder,
    ClientRecord,
    expected,
    sample_records,
)

BATCH_IDS = [c[0] for c in CLIENT_BATCHES]


def produce_batches(store: ObjectStore, md: MetadataStore, clock: ManualClock, topic: str,
                    batches: Sequence[bytes]) -> list[int]:
    """One agent flush (one object) holding `batches` for partition 0; their first offsets."""
    with Agent(store, md, AgentConfig(linger_ms=60_000), clock=clock) as agent:
        futures = [agent.produce_batch(topic, 0, raw) for raw in batches]
    return [f.result() for f in futures]


def stored_batches(store: ObjectStore, md: MetadataStore, topic: str) -> list[tuple[int, bytes]]:
    """(absolute base offset, stored bytes) of every live batch of partition 0."""
    out = []
    for seg in md.find_segments(topic, 0, 0):
        data = store.get_range(seg.object_key, seg.data_pos, seg.data_pos + seg.data_len)
        out += [(seg.base_offset + h.base_offset, bytes(v)) for h, v in iter_batches(data)]
    return out


def read_all(store: ObjectStore, md: MetadataStore, topic: str) -> list[Record]:
    return [Record(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in Reader(store, md).read(topic, 0, 0)]


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db"


def test_client_batches_are_stored_as_sent_and_read_back(urls: tuple[str, str]) -> None:
    """Every kind of client batch: the agent stores its bytes (only baseOffset patched), the
    Reader and `silt consume` decode it."""
    store_url, md_url = urls
    store, md, clock = open_store(store_url), MetadataStore.open(md_url, create=True), ManualClock()
    md.create_topic("t", 1)
    records = [sample_records(40, tag=name.encode()) for name in BATCH_IDS]
    # One idempotent producer: each batch's base sequence follows on from the last.
    sent = [build(recs, codec, 40 * i) for i, (recs, (_, build, codec)) in enumerate(zip(
        records, CLIENT_BATCHES, strict=True))]
    firsts = produce_batches(store, md, clock, "t", sent)
    assert firsts == [40 * i for i in range(len(sent))]
    stored = stored_batches(store, md, "t")
    assert [base for base, _ in stored] == firsts
    for raw, (_, got) in zip(sent, stored, strict=True):
        assert got[8:] == raw[8:]  # byte for byte after the baseOffset field
    want = [r for i, recs in enumerate(records) for r in expected(recs, base=40 * i)]
    assert read_all(store, md, "t") == want
    md.close()
    result = CliRunner().invoke(cli, ["consume", "t", "--partition", "0"], catch_exceptions=False,
                                env={"SILT_STORE": store_url, "SILT_METADATA": md_url})
    assert result.exit_code == 0
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(x["offset"], x["key"], x["value"], x["headers"]) for x in lines] == [
        (r.offset, (r.key or b"").decode(), (r.value or b"").decode(),
         {k: (v or b"").decode() for k, v in r.headers}) for r in want]


def _compact_case(tmp: str, topic_setting: str | None, compactor_setting: str | None,
                  kinds: Sequence[tuple[str, Builder, Compression]],
                  rounds: Sequence[Sequence[Sequence[int]]]) -> int:
    """Produce, per round, one batch per kind with the given key numbers; compact the whole
    log; check every surviving batch against the rules and the records against the model
    (Kafka's cleaner: the latest record per key, in offset order). Returns how many
    batches were rewritten."""
    store, clock = open_store(f"file://{tmp}/objects"), ManualClock()
    md = MetadataStore.open(f"sqlite:///{tmp}/md.db", clock=clock, create=True)
    configs = {"cleanup.policy": "compact"}
    if topic_setting is not None:
        configs["compression.type"] = topic_setting
    md.create_topic("c", 1, configs)
    sent: dict[int, tuple[bytes, Compression]] = {}  # first offset -> (batch, its codec)
    produced: list[Record] = []
    sequence = 0  # one idempotent producer: base sequences follow on
    for rnd, keysets in enumerate(rounds):
        batches = []
        for i, ((_, build, codec), keys) in enumerate(zip(kinds, keysets, strict=True)):
            recs: list[ClientRecord] = [
                (1000 + rnd, b"k%d" % k, b"v%d-%d-%d" % (rnd, i, n), [("h", b"1")])
                for n, k in enumerate(keys)]
            raw = build(recs, codec, sequence)
            # The codec the header names: kafka-python leaves a batch uncompressed when
            # compressing would not make it smaller (a nominal gzip batch of two keys).
            batches.append((raw, Compression(raw[22] & 0x07), recs))
            sequence += len(recs)
        firsts = produce_batches(store, md, clock, "c", [b for b, _, _ in batches])
        for first, (raw, codec, recs) in zip(firsts, batches, strict=True):
            sent[first] = (raw, codec)
            produced += expected(recs, base=first)
    cfg = CompactorConfig() if compactor_setting is None else CompactorConfig.from_map(
        {"compression.type": compactor_setting})
    reports = Compactor(store, md, cfg, clock=clock).run_once(everything=True)
    assert reports and all(r.outcome == "committed" for r in reports)
    latest = {r.key: r.offset for r in produced}
    want = [r for r in produced if latest[r.key] == r.offset]
    assert read_all(store, md, "c") == want  # rewrite-then-decode == filter-then-decode
    effective = topic_setting or compactor_setting or "producer"
    rule = TOPIC_COMPRESSIONS[{"none": "uncompressed"}.get(effective, effective)]
    for base, got in stored_batches(store, md, "c"):
        raw, codec = sent[base]  # a rewritten batch keeps its base offset
        if len(decode_batch(got)) == len(decode_batch(raw)):
            assert got[8:] == raw[8:]  # fully surviving: copied byte for byte
        else:
            header_codec = got[22] & 0x07  # attributes' low byte
            assert header_codec == (codec if rule is None else rule)
    md.close()
    return sum(r.stats["batches_reencoded"] for r in reports)


PARTIAL = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]], [[0, 2, 4], [10]]  # round 2 shadows 0, 2, 4


@pytest.mark.parametrize("topic_setting", [*TOPIC_COMPRESSIONS, None])
def test_rewrites_follow_the_topic_compression_type(tmp_path: Path,
                                                    topic_setting: str | None) -> None:
    """Batches of every client codec, some partially shadowed, under each topic value; an
    unset topic value takes the compactor's (default `producer`)."""
    for name, build, codec in CLIENT_BATCHES:
        case = tmp_path / name
        case.mkdir()
        kinds = [(name, build, codec), CLIENT_BATCHES[0]]
        assert _compact_case(str(case), topic_setting, None, kinds, PARTIAL) == 1


@pytest.mark.parametrize(("topic_setting", "compactor_setting"), [
    (None, "zstd"), (None, "none"), (None, "uncompressed"), ("lz4", "zstd"),
    ("producer", "gzip"),
])
def test_compactor_compression_type_is_the_default_for_topics(
        tmp_path: Path, topic_setting: str | None, compactor_setting: str) -> None:
    """As Kafka's broker-level compression.type: it applies only to topics that do not set
    their own."""
    kinds = [CLIENT_BATCHES[1], CLIENT_BATCHES[4]]  # aiokafka snappy, kafka-python gzip
    assert _compact_case(str(tmp_path), topic_setting, compactor_setting, kinds, PARTIAL) == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topic_setting=st.sampled_from(list(TOPIC_COMPRESSIONS)),
    kinds=st.lists(st.sampled_from(CLIENT_BATCHES), min_size=1, max_size=3),
    data=st.data(),
)
def test_rewrite_then_decode_equals_filter_then_decode(
        topic_setting: str, kinds: list[tuple[str, Builder, Compression]],
        data: st.DataObject) -> None:
    """Property: for any mix of client codecs, topic codec and key overlaps, the compacted
    log decodes to the latest record per key of what was produced, and every batch follows
    the codec rules."""
    keys = st.lists(st.integers(0, 6), min_size=1, max_size=8)
    rounds = data.draw(st.lists(st.lists(keys, min_size=len(kinds), max_size=len(kinds)),
                                min_size=1, max_size=3))
    with tempfile.TemporaryDirectory() as tmp:
        _compact_case(tmp, topic_setting, None, kinds, rounds)


@pytest.mark.parametrize("name", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_agent_writes_every_codec(urls: tuple[str, str], name: str) -> None:
    """The agent's compression.type takes Kafka's five names; what it writes reads back and
    is in that codec."""
    store_url, md_url = urls
    store, md, clock = open_store(store_url), MetadataStore.open(md_url, create=True), ManualClock()
    md.create_topic("w", 1)
    config = AgentConfig.from_map({"linger.ms": "60000", "compression.type": name})
    with Agent(store, md, config, clock=clock) as agent:
        futures = [agent.produce("w", 0, b"k%d" % i, b"v" * 300) for i in range(50)]
    assert [f.result() for f in futures] == list(range(50))
    ((_, raw),) = stored_batches(store, md, "w")
    assert raw[22] & 0x07 == int(WRITABLE_COMPRESSIONS[name])
    assert [(r.offset, r.key, r.value) for r in read_all(store, md, "w")] == [
        (i, b"k%d" % i, b"v" * 300) for i in range(50)]
    md.close()
