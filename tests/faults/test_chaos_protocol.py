"""The protocol suite (issue 22), bounded: a real agent must survive every frame and keep
every promise for a fixed list of seeds; the frames it sends cover every served API
version, hold issue 22's killers whatever the seed, and are the same for the same seed."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest

from agent.protocol.apis import TABLE
from faults import frames
from faults.suites import protocol
from fileformat.validate import check_client_batch

SEEDS = (1, 2)
ISSUE_KILLER = "000000140003000c0000000b000466757a7a00ffffffff7f"  # Metadata v12, 2^35-2


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_an_agent_survives_every_frame_and_keeps_every_promise(seed: int) -> None:
    figures = protocol.run(trials=2, seed=seed, max_deaths=3, produce_versions=(3, 8, 11))
    assert figures["violations"] == 0, figures["examples"]
    assert figures["agent deaths"] == figures["bad batches stored"] == 0
    assert figures["frames sent"] > 3000 and figures["frames skipped (max_deaths reached)"] == 0
    assert figures["good records acked"] > 0
    assert figures["good records read back exactly"] == figures["good records acked"]


@pytest.mark.parametrize("seed", [1, 2, 99])
@pytest.mark.parametrize("trials", [0, 3])
def test_the_killer_frames_are_in_every_run(seed: int, trials: int) -> None:
    sent = [f.data for f in protocol.all_frames(trials, random.Random(seed), False)]
    assert bytes.fromhex(ISSUE_KILLER) in sent
    assert set(frames.KILLERS) <= set(sent)


def test_every_served_api_version_gets_its_lengths_at_every_value() -> None:
    sent = list(protocol.all_frames(1, random.Random(1), False))
    for key, api in TABLE.items():
        for version in range(api.min_version, api.max_version + 1):
            lengths = frames.length_fields(key, version)
            assert lengths, (key, version)
            mine = [f for f in sent if f.what.startswith(f"api {key} v{version} ")]
            assert len(mine) >= len(lengths) * len(frames.LENGTHS) + 1, (key, version)


def test_a_length_mutant_changes_only_its_field_and_the_size_prefix() -> None:
    body = frames.sample_body(3, 12)  # Metadata v12: topics is a compact array
    topics = next(at for at in frames.length_fields(3, 12) if at.path.endswith(".topics"))
    mutant = frames.set_length(body, topics, 2**35 - 2)
    assert mutant[topics.start:topics.start + 5] == bytes.fromhex("ffffffff7f")
    assert mutant[:topics.start] == body[:topics.start]
    assert mutant[topics.start + 5:] == body[topics.end:]
    framed = frames.framed(mutant)
    assert struct.unpack(">i", framed[:4])[0] == len(mutant)
    assert frames.encode_length("i16", 2**31 - 1) == b"\x7f\xff"
    assert frames.encode_length("i32", 2**35 - 2) == b"\x80\x00\x00\x00"
    assert frames.encode_length("uvar", -1) == b"\x00"


def test_the_same_seed_gives_the_same_frames() -> None:
    def run(seed: int) -> list[bytes]:
        return [f.data for f in protocol.all_frames(2, random.Random(seed), False)]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_bad_batches_are_every_kind_of_issue_22_with_a_valid_crc() -> None:
    kinds = frames.bad_batches(producer_id=3, producer_epoch=0)
    for needed in ("count 2^31-1", "count 10^6", "extra records", "missing records",
                   "negative record length", "negative key length", "negative value length",
                   "negative header key length", "negative header value length",
                   "offset deltas out of order", "lastOffsetDelta != count-1",
                   "idempotent baseSequence -1", "bad magic 1", "bad crc"):
        assert needed in kinds
    for codec in frames.CODECS:
        assert f"{codec} garbage" in kinds and f"{codec} truncated" in kinds
    for kind, raw in kinds.items():
        crc_ok = struct.unpack_from(">I", raw, 17)[0] == crc32c.crc32c(raw[frames.CRC_FROM:])
        assert crc_ok == (kind != "bad crc"), kind
    # The same builder's valid batch is one the product stores.
    header, _ = check_client_batch(frames.good_batch([b"a", b"b"]), decode=True)
    assert header.record_count == 2
