"""`silt gc`: collect now what compaction retired, with the grace period from the settings
or `--grace-ms`; uploads still pending are left for compactor.lease.ms."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from metadata import MetadataStore
from objects.keys import MARKER_KEY
from objectstore import open_store
from objectstore.base import ABORT_MULTIPART, LIST_MULTIPART
from objectstore.local import UPLOAD_PREFIX, UPLOAD_SUFFIX
from objectstore.testserver import RecordingMotoServer
from tests.compactor.cli_support import BACKENDS, backend_env, run


def gc(env: dict[str, str], *args: str) -> dict[str, Any]:
    code, out, err = run(["gc", "--json", *args], env)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    return backend_env(request, tmp_path)


def keys(env: dict[str, str]) -> set[str]:
    """The store's data objects (not its cluster marker)."""
    return {o.key for o in open_store(env["SILT_STORE"]).list() if o.key != MARKER_KEY}


def test_gc_deletes_retired_inputs_now_with_a_zero_grace(env: dict[str, str]) -> None:
    assert run(["topics", "create", "t", "--partitions", "2"], env)[0] == 0
    for rnd in range(3):
        rows = "".join(json.dumps({"key": f"k{i}", "value": f"{rnd}-{i}"}) + "\n"
                       for i in range(10))
        assert run(["produce", "t"], env, input=rows)[0] == 0
    inputs = keys(env)
    assert len(inputs) == 3
    code, out, err = run(["compact", "--once", "--all", "--json"], env)
    assert code == 0, err
    assert json.loads(out)[0]["outcome"] == "committed"
    assert keys(env) > inputs  # the retired inputs wait for the 60 s default grace

    assert gc(env) == {"deleted": 0, "keys": [], "waiting": 3, "grace_ms": 60_000,
                      "uploads_aborted": 0}
    assert keys(env) > inputs
    result = gc(env, "--grace-ms", "0")
    assert sorted(result["keys"]) == sorted(inputs) and result["deleted"] == 3
    assert result["waiting"] == 0
    left = keys(env)
    assert len(left) == 1 and not left & inputs
    code, out, _ = run(["consume", "t"], env)
    assert code == 0 and len(out.splitlines()) == 30
    code, out, _ = run(["gc"], env)
    assert code == 0 and out.startswith("deleted 0 objects; 0 files wait")


def test_gc_grace_from_the_settings_and_pending_uploads_wait_for_the_lease(
        env: dict[str, str]) -> None:
    assert run(["topics", "create", "t", "--partitions", "1"], env)[0] == 0
    md = MetadataStore.open(env["SILT_METADATA"])
    try:
        pending = md.register_pending_file("data/pending-upload", level=0)
    finally:
        md.close()
    open_store(env["SILT_STORE"]).put("data/pending-upload", b"half an upload")
    assert gc({**env, "SILT_COMPACTOR_FILE_DELETE_DELAY_MS": "0"})["deleted"] == 0
    result = gc({**env, "SILT_COMPACTOR_LEASE_MS": "1"}, "--grace-ms", "0")
    assert result["keys"] == ["data/pending-upload"] and pending > 0
    assert keys(env) == set()
    code, _, err = run(["gc", "--grace-ms", "-1"], env)
    assert code == 2 and "-1" in err


def start_upload(env: dict[str, str], key: str) -> None:
    """Begin an upload of `key` and leave it unfinished, as a process killed mid-upload
    does (S3: a multipart upload; file://: its temporary file, named as the writer names
    it)."""
    url = env["SILT_STORE"]
    if url.startswith("s3://"):
        import boto3

        bucket, _, prefix = url[5:].partition("/")
        boto3.client("s3").create_multipart_upload(Bucket=bucket, Key=f"{prefix}/{key}")
        return
    path = Path(url[len("file://"):]) / key
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / f"{UPLOAD_PREFIX}{path.name}.x1y2z3{UPLOAD_SUFFIX}").write_bytes(b"half")


def unfinished(env: dict[str, str]) -> list[str]:
    """The keys of the store's unfinished uploads, however young."""
    return sorted(u.key for u in open_store(env["SILT_STORE"]).unfinished_uploads(2**62))


def aged(env: dict[str, str], age_ms: int, count: int) -> None:
    """Return once `count` unfinished uploads are at least `age_ms` old by the store's own
    clock (polled: the file store's mtimes, the S3 server's Initiated)."""
    store = open_store(env["SILT_STORE"])
    deadline = time.monotonic() + 30
    while len(store.unfinished_uploads(int(time.time() * 1000) - age_ms)) < count:
        assert time.monotonic() < deadline, "the uploads never aged"
        time.sleep(0.1)


def upload_requests(server: RecordingMotoServer) -> dict[str, int]:
    """The upload requests the S3 server served since the last call."""
    counts = server.counts()
    server.clear_log()
    return {k: v for k, v in counts.items() if k in (LIST_MULTIPART, ABORT_MULTIPART)}


def test_gc_aborts_unfinished_uploads_older_than_the_lease(
        env: dict[str, str], request: pytest.FixtureRequest) -> None:
    """One listing per run (S3: the server's count; the CLI's file store is not seen)."""
    assert run(["topics", "create", "t", "--partitions", "1"], env)[0] == 0
    start_upload(env, "data/killed-mid-upload")
    start_upload(env, "compacted/renewed-output")
    aged(env, 3_200, 2)  # older than the lease (2 s) and the store clock's slack (1 s)
    start_upload(env, "data/young")
    md = MetadataStore.open(env["SILT_METADATA"])
    try:  # a job's output whose lease was just renewed: its upload may still complete
        md.register_pending_file("compacted/renewed-output", level=1)
    finally:
        md.close()
    server: RecordingMotoServer | None = None
    if env["SILT_STORE"].startswith("s3://"):
        server = request.getfixturevalue("moto_server")
    if server is not None:
        upload_requests(server)
    result = gc({**env, "SILT_COMPACTOR_LEASE_MS": "2000"}, "--grace-ms", "0")
    assert result["uploads_aborted"] == 1 and result["deleted"] == 0
    if server is not None:
        assert upload_requests(server) == {LIST_MULTIPART: 1, ABORT_MULTIPART: 1}
    assert unfinished(env) == ["compacted/renewed-output", "data/young"]
    if server is not None:
        upload_requests(server)
    assert gc(env, "--grace-ms", "0")["uploads_aborted"] == 0  # the 60 s default lease
    if server is not None:
        assert upload_requests(server) == {LIST_MULTIPART: 1}
    assert unfinished(env) == ["compacted/renewed-output", "data/young"]
