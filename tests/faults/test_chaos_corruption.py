"""The corruption suite, bounded: hypothesis cases of bit flips and truncations, and the
pieces it stands on (the damage it does, errors that name the object)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import Reader
from compactor import Compactor
from faults.suites import corruption
from fileformat import CorruptDataError


def test_corrupt_objects_give_right_data_or_an_error_naming_them() -> None:
    figures = corruption.run(trials=40, seed=5)
    assert figures["cases"] == 40
    assert figures["violations"] == 0, figures["examples"]
    assert figures["wrong data"] == figures["errors not naming the object"] == 0
    # Both outcomes happen: damage that is detected, and damage in bytes no read uses.
    assert figures["read: error naming the object"] > 0
    assert figures["read: right data"] > 0


def test_damage_flips_one_bit_or_truncates() -> None:
    data = bytes(range(10))
    flipped = corruption.damage(data, "flip", 13, 7)  # position modulo the size: byte 3
    assert [i for i in range(10) if flipped[i] != data[i]] == [3]
    assert flipped[3] == 3 ^ 0x80
    assert corruption.damage(data, "truncate", 4, 0) == data[:4]


@pytest.fixture
def base(tmp_path: Path) -> corruption.Base:
    return corruption.build(tmp_path)


def test_a_flipped_chunk_byte_fails_reads_and_compaction_naming_the_object(
        base: corruption.Base) -> None:
    victim = next(k for k in base.live if k.startswith("data/"))
    store, md = corruption.copy(base, base.root / "case",
                                lambda _, d: corruption.damage(d, "flip", 40, 0), victim)
    (f,) = [f for f in md.audit_snapshot().files if f.object_key == victim]
    assert f.layout is not None and f.size is not None
    assert f.layout.data_offset <= 40 < f.layout.data_offset + f.layout.data_length  # a chunk
    failed = []
    for tp in corruption.PARTITIONS:
        try:
            list(Reader(store, md).read(*tp))
        except CorruptDataError as exc:
            failed.append(str(exc))
    assert failed and all(victim in msg for msg in failed)
    committed = md.list_jobs(state="committed")  # the base state's own compaction
    reports = Compactor(store, md).run_once(everything=True)
    assert [r.outcome for r in reports] == ["failed"]
    assert victim in (reports[0].error or "")
    assert md.list_jobs(state="committed") == committed  # nothing built from it committed
    md.close()
