"""Store identity and creation, as a user meets them: real `silt` processes in a scratch
directory. Read-only commands create nothing; `silt init` and the first write command create
the metadata and the store's cluster marker; a store and a metadata store of different
clusters are refused in one line; a missing bucket and an unreachable or missing metadata
database are one line each, exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness.agent_process import REPO
from metadata import DEFAULT_URL, MetadataStore
from objects.keys import MARKER_KEY
from objectstore import open_store


def silt(cwd: Path, *args: str, stdin: str = "") -> tuple[int, str, list[str]]:
    """Run `silt ARGS` in `cwd`: exit code, stdout, stderr lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SILT_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-m", "cli", *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr.splitlines()


def one_line_error(result: tuple[int, str, list[str]], *parts: str) -> str:
    """The single `silt: ...` line of a failed command, checked to contain `parts`."""
    code, _, err = result
    assert code == 1, err
    assert len(err) == 1 and err[0].startswith("silt: "), err
    for part in parts:
        assert part in err[0], err
    return err[0]


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def marker_id(store_url: str) -> str:
    return str(json.loads(open_store(store_url).get(MARKER_KEY))["cluster_id"])


def metadata_id(url: str) -> str:
    with MetadataStore.open(url) as md:
        return md.cluster_identity().cluster_id


def test_read_only_commands_in_an_empty_directory_create_nothing(cwd: Path) -> None:
    for args in (["topics", "list"], ["stats"], ["consume", "t"], ["groups", "list"],
                 ["doctor"], ["plan"], ["compact", "--once"]):
        one_line_error(silt(cwd, *args), "no metadata database", "silt init")
    assert listing(cwd) == []


def test_a_mistyped_sqlite_path_is_one_line_and_creates_nothing(cwd: Path) -> None:
    typo = "sqlite:///./silt-dat/metadata.db"
    one_line_error(silt(cwd, "--metadata", typo, "topics", "list"),
                   "no metadata database ./silt-dat/metadata.db", "silt init")
    assert listing(cwd) == []
    assert silt(cwd, "init")[0] == 0
    before = listing(cwd)
    for args in (["topics", "list"], ["topics", "create", "t", "--partitions", "1"]):
        # The store's marker names the metadata it belongs to: the line says where it is.
        one_line_error(silt(cwd, "--metadata", typo, *args),
                       f"(metadata {DEFAULT_URL}), and there is no metadata at {typo}")
    assert listing(cwd) == before  # neither the file nor its directory


def test_init_creates_metadata_and_marker_with_one_id_and_is_idempotent(cwd: Path) -> None:
    code, out, err = silt(cwd, "init", "--json")
    assert code == 0, err
    report = json.loads(out)
    store_url = "file://./silt-data/objects"
    assert report["store"] == store_url and report["metadata"] == DEFAULT_URL
    assert report["marker_written"] is True and report["bucket_created"] is None
    os.chdir(cwd)  # the default URLs are relative to the working directory
    try:
        assert marker_id(store_url) == metadata_id(DEFAULT_URL) == report["cluster_id"]
    finally:
        os.chdir(REPO)
    again = json.loads(silt(cwd, "init", "--json")[1])
    assert again == {**report, "marker_written": False}
    code, out, err = silt(cwd, "topics", "list")
    assert (code, out, err) == (0, "", [])


def test_the_first_write_command_creates_and_marks(cwd: Path) -> None:
    code, out, err = silt(cwd, "topics", "create", "t", "--partitions", "2")
    assert code == 0, err
    assert (cwd / "silt-data" / "objects" / MARKER_KEY).exists()
    code, out, err = silt(cwd, "produce", "t", stdin='{"key": "k", "value": "v"}\n')
    assert code == 0, err
    assert len(out.splitlines()) == 1


def test_two_stores_sharing_one_metadata_are_refused(cwd: Path) -> None:
    """localstack/silt.env's old mistake: another store with the default store's metadata."""
    assert silt(cwd, "topics", "create", "t", "--partitions", "1")[0] == 0
    before = listing(cwd)
    for args in (["topics", "list"], ["topics", "create", "u", "--partitions", "1"],
                 ["produce", "t"], ["compact", "--once"]):
        one_line_error(silt(cwd, "--store", "file://./other", *args),
                       f"metadata {DEFAULT_URL} belongs to store file://./silt-data/objects",
                       "not to file://./other", "give each store its own metadata")
    assert listing(cwd) == before


def test_a_store_of_another_cluster_is_refused(cwd: Path) -> None:
    a = ["--store", "file://./a", "--metadata", "sqlite:///./a.db"]
    b = ["--store", "file://./b", "--metadata", "sqlite:///./b.db"]
    assert silt(cwd, *a, "init")[0] == 0
    assert silt(cwd, *b, "init")[0] == 0
    os.chdir(cwd)
    try:
        id_a, id_b = metadata_id("sqlite:///./a.db"), metadata_id("sqlite:///./b.db")
    finally:
        os.chdir(REPO)
    assert id_a != id_b
    for args in (["stats"], ["topics", "create", "t", "--partitions", "1"]):
        one_line_error(silt(cwd, "--store", "file://./a", "--metadata", "sqlite:///./b.db",
                            *args),
                       f"store file://./a belongs to cluster {id_a}",
                       f"metadata sqlite:///./b.db is cluster {id_b}")
    # A marked store with no metadata at all: not a new cluster.
    before = listing(cwd)
    one_line_error(silt(cwd, "--store", "file://./a", "--metadata", "sqlite:///./c.db",
                        "topics", "create", "t", "--partitions", "1"),
                   f"store file://./a belongs to cluster {id_a}", "no metadata at")
    assert listing(cwd) == before


def test_localstack_env_gives_its_store_its_own_metadata() -> None:
    env = dict(line.split("=", 1) for line in
               (REPO / "localstack" / "silt.env").read_text().splitlines()
               if "=" in line and not line.startswith("#"))
    assert env["SILT_STORE"].startswith("s3://")
    assert env["SILT_METADATA"] != DEFAULT_URL


def test_a_missing_bucket_is_one_line_saying_how_to_create_it(cwd: Path, s3_url: str) -> None:
    store = f"s3://silt-missing-{uuid.uuid4().hex[:8]}/data"
    md = ["--metadata", "sqlite:///./md.db"]
    for args in (["topics", "list"], ["topics", "create", "t", "--partitions", "1"]):
        one_line_error(silt(cwd, "--store", store, *md, *args), f"store {store}",
                       "the bucket does not exist", "silt init --create-bucket")
    assert listing(cwd) == []  # not even the metadata of the write command
    code, out, err = silt(cwd, "--store", store, *md, "init", "--create-bucket", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["bucket_created"] is True and report["marker_written"] is True
    assert marker_id(store) == report["cluster_id"]
    code, out, err = silt(cwd, "--store", store, *md, "init", "--create-bucket")
    assert code == 0 and out.splitlines()[0] == "bucket exists already", err
    assert silt(cwd, "--store", store, *md, "topics", "create", "t", "--partitions", "1")[0] == 0


def test_create_bucket_is_for_s3_stores(cwd: Path) -> None:
    one_line_error(silt(cwd, "init", "--create-bucket"), "--create-bucket is for s3:// stores")
    assert listing(cwd) == []


def test_a_file_that_is_not_sqlite_is_one_line(cwd: Path) -> None:
    (cwd / "md.db").write_bytes(b"not a database\n" * 100)
    one_line_error(silt(cwd, "--metadata", "sqlite:///./md.db", "topics", "list"),
                   "cannot open metadata sqlite:///./md.db", "not a database")


def test_postgresql_down_or_missing_database_is_one_line(cwd: Path, postgres_url: str) -> None:
    base = postgres_url.rsplit("/", 1)[0]
    missing = f"{base}/silt_missing_{uuid.uuid4().hex[:8]}"
    for url, says in ((missing, "does not exist"),
                      ("postgresql://postgres@127.0.0.1:1/test", "Connection refused")):
        for args in (["topics", "list"], ["topics", "create", "t", "--partitions", "1"]):
            one_line_error(silt(cwd, "--metadata", url, *args), f"cannot open metadata {url}",
                           says)
    # An empty database without the schema: read-only refused, init creates it.
    one_line_error(silt(cwd, "--metadata", postgres_url, "topics", "list"),
                   "no siltstream metadata", "silt init")
    assert silt(cwd, "--metadata", postgres_url, "--store", "file://./objects", "init")[0] == 0
    assert metadata_id(postgres_url) == marker_id(f"file://{cwd}/objects")


def test_metadata_lost_mid_command_is_one_line(cwd: Path, postgres_url: str,
                                               postgres_admin_url: str) -> None:
    """The database dropped under a running `silt consume --follow`: its next poll fails
    with one `silt:` line and exit 1, not a SQLAlchemy traceback."""
    import sqlalchemy as sa

    args = ["--metadata", postgres_url, "--store", "file://./objects"]
    assert silt(cwd, *args, "topics", "create", "t", "--partitions", "1")[0] == 0
    assert silt(cwd, *args, "produce", "t", stdin='{"value": "v"}\n')[0] == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("SILT_")}
    env["PYTHONPATH"] = str(REPO)
    with subprocess.Popen([sys.executable, "-m", "cli", *args, "consume", "t", "--follow"],
                          cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:  # its pipes closed however the test ends
        try:
            assert proc.stdout is not None
            assert '"value":"v"' in proc.stdout.readline()  # it is following now
            name = postgres_url.rsplit("/", 1)[1]
            admin = sa.create_engine(postgres_admin_url.replace(
                "postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            admin.dispose()
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 1, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("silt: metadata database failed: "), err
