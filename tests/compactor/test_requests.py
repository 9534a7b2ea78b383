"""What a compaction job costs, as the S3 server (moto) saw it: two GETs per input file,
whatever the number of partitions in it, and no byte read twice; through boto3 (`s3://`)
and through s3fs (`fsspec+s3://`) alike."""

from __future__ import annotations

from collections import Counter

import pytest

from objectstore.testserver import RecordingMotoServer
from tests.compactor.support import Harness, Row, assert_preserved, latest_per_key

FILES = 3


@pytest.mark.parametrize("client", ["boto3", "s3fs"])
@pytest.mark.parametrize("partitions", [1, 100, 1000])
def test_job_does_two_gets_per_input_file_on_the_server(
    partitions: int, client: str, s3_url: str, moto_server: RecordingMotoServer,
    metadata_url: str
) -> None:
    h = Harness.open(metadata_url, s3_url if client == "boto3" else f"fsspec+{s3_url}")
    try:
        compacted = max(1, partitions // 2)
        plain = partitions - compacted
        h.md.create_topic("state", compacted, {"cleanup.policy": "compact"})
        if plain:
            h.md.create_topic("events", plain)
        for rnd in range(FILES):  # every file holds every partition, 1 record each
            rows: list[Row] = [("state", p, b"k%d" % (rnd % 2), b"v%d" % rnd, ())
                               for p in range(compacted)]
            rows += [("events", p, None, b"e%d" % rnd, ()) for p in range(plain)]
            h.produce(rows)
        snap = h.md.snapshot()
        inputs = {f.object_key for f in snap.files}
        assert len(inputs) == FILES
        assert all(len([s for s in snap.segments if s.object_key == k]) == partitions
                   for k in inputs)

        moto_server.clear_log()
        (report,) = h.compactor().run_once(everything=True)
        served = moto_server.requests
        counts = moto_server.counts()

        assert report.outcome == "committed", report.error
        assert report.input_files == FILES
        assert counts["GET"] == 2 * FILES
        # Each input object is opened exactly twice (META stream, DATA stream), each with
        # one ranged GET; nothing else is read, listed or probed.
        gets = Counter(r.path.rsplit("/", 1)[-1] for r in served if r.operation == "GET")
        assert sorted(gets.values()) == [2] * FILES
        assert {k.rsplit("/", 1)[-1] for k in inputs} == set(gets)
        assert all(r.range for r in served if r.operation == "GET")
        assert counts["LIST"] == counts["HEAD"] == 0
        # run_once's GC pass after the job does not list unfinished uploads (only the
        # service's timer, hourly, and `silt gc` do).
        assert counts.pop("ListMultipartUploads", 0) == 0
        # The client's own counts agree with the server's log, request type by type.
        assert report.requests == {k: v for k, v in counts.items() if v}
        assert report.bytes_read <= 1.05 * report.input_bytes
        assert report.bytes_read >= report.input_bytes  # every section byte was read once
        # One output file per kind of data (compacted / delete policy), one PUT each.
        assert report.output_files == (2 if plain else 1)
        assert counts["PUT"] == report.output_files

        for p in range(0, compacted, max(1, compacted // 40)):
            got = h.read("state", p)
            assert_preserved(got, h.produced[("state", p)])
            assert got == sorted(latest_per_key(h.produced[("state", p)]).values(),
                                 key=lambda r: r.offset)
        for p in range(0, plain, max(1, plain // 7)):
            assert h.read("events", p) == h.produced[("events", p)]
    finally:
        h.close()
