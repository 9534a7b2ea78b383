"""The cluster's identity (metadata/identity.py, schema v6) and explicit creation
(`MetadataStore.open(create=...)`), on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from metadata import MetadataStore
from metadata import schema as s
from metadata.engine import make_engine
from metadata.errors import MetadataNotFoundError, MetadataUnavailableError


def test_a_new_store_has_an_id_and_no_bound_store(metadata_url: str) -> None:
    with MetadataStore.open(metadata_url, create=True) as md:
        assert md.schema_version() == s.LATEST_VERSION
        ident = md.cluster_identity()
        assert uuid.UUID(ident.cluster_id).version == 4
        assert ident.store_url is None
    with MetadataStore.open(metadata_url) as md:  # existing: no create needed
        assert md.cluster_identity() == ident


def test_the_first_binding_stays(metadata_url: str) -> None:
    with MetadataStore.open(metadata_url, create=True) as md:
        first = md.bind_store("s3://a/x")
        assert first.store_url == "s3://a/x"
        assert md.bind_store("file:///b") == first
        assert md.cluster_identity() == first


def test_without_create_an_empty_database_is_not_found_and_stays_empty(
        metadata_url: str) -> None:
    if metadata_url.startswith("sqlite"):
        Path(metadata_url.removeprefix("sqlite:///")).touch()  # an empty SQLite file
    with pytest.raises(MetadataNotFoundError, match=r"no siltstream metadata.*silt init"):
        MetadataStore.open(metadata_url)
    engine = make_engine(metadata_url)
    with engine.connect() as conn:
        assert sa.inspect(conn).get_table_names() == []
    engine.dispose()


def test_without_create_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/dir/md.db"
    with pytest.raises(MetadataNotFoundError, match="no metadata database"):
        MetadataStore.open(url)
    assert os.listdir(tmp_path) == []


def test_v6_keeps_the_id_agents_derived_before(metadata_url: str) -> None:
    """A v5 database migrates to v6 with the id the agents derived from the secret (their
    Kafka cluster id and topic-id namespace), so those do not change."""
    engine = make_engine(metadata_url, create=True)
    with engine.connect() as conn, conn.begin():
        s.md.create_all(conn, tables=[s.schema_version])
        for version, migrate in enumerate(s.MIGRATIONS[:5]):
            migrate(conn, 0)
            conn.execute(s.schema_version.insert().values(version=version + 1,
                                                          applied_at_ms=0))
        secret = conn.execute(sa.text("SELECT secret FROM cluster")).scalar_one()
    engine.dispose()
    digest = hashlib.sha256(b"siltstream cluster id" + bytes(secret)).digest()
    with MetadataStore.open(metadata_url) as md:  # migrating is not creating
        assert md.schema_version() == s.LATEST_VERSION
        assert md.cluster_identity().cluster_id == str(uuid.UUID(bytes=digest[:16], version=4))
        assert md.cluster_identity().store_url is None


def test_a_file_that_is_not_sqlite_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "md.db"
    path.write_bytes(b"hello" * 1000)
    with pytest.raises(MetadataUnavailableError, match="not a database") as err:
        MetadataStore.open(f"sqlite:///{path}", create=True)
    assert "\n" not in str(err.value)
    assert path.read_bytes() == b"hello" * 1000


def test_postgresql_down_or_missing_is_one_line_without_the_password(
        postgres_url: str) -> None:
    base = postgres_url.rsplit("/", 1)[0]
    missing = f"{base}/silt_missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(MetadataUnavailableError, match="does not exist") as err:
        MetadataStore.open(missing, create=True)
    assert "\n" not in str(err.value)
    with pytest.raises(MetadataUnavailableError, match="Connection refused") as err:
        MetadataStore.open("postgresql://postgres:hunter2@127.0.0.1:1/test")
    assert "hunter2" not in str(err.value) and "postgres:***@" in str(err.value)
