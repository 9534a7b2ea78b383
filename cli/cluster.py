"""Opening a cluster: an object store and its metadata store, checked to belong together.

The metadata's `cluster` row holds the cluster id (metadata/identity.py); the object store
holds the same id in a marker object, `_silt/cluster.json`, which the first write command
(or `silt init`) writes and then binds the metadata to that store. At every command start:

- a store whose marker names another cluster, or a metadata store bound to a store with no
  marker (two stores sharing one metadata database), is refused in one line;
- a missing S3 bucket is noticed by the marker's GET and said in one line, with how to
  create it (`silt init --create-bucket`);
- read-only commands create nothing (no metadata database, no directory, no marker); write
  commands (`create=True`) create the metadata and the marker when missing.

A metadata store from before cluster identity (not bound, no marker) is bound by its next
write command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from metadata import MetadataStore
from metadata.engine import shown_url
from metadata.errors import MetadataNotFoundError
from metadata.identity import ClusterIdentity
from objects.keys import MARKER_KEY
from objectstore import (
    BucketNotFoundError,
    ObjectStore,
    RetryPolicy,
    S3Store,
    open_backend,
    open_store,
)
from settings.load import Settings

from .errors import ClusterMismatchError

INIT_HINT = "`silt init --create-bucket` creates it"
OWN_METADATA = "give each store its own metadata (--metadata or SILT_METADATA)"


@dataclass(frozen=True, slots=True)
class Marker:
    """The object store's `_silt/cluster.json`: the cluster id, and the metadata URL (its
    password hidden) the writer used, for messages only."""

    cluster_id: str
    metadata: str

    def encode(self) -> bytes:
        return json.dumps({"cluster_id": self.cluster_id, "metadata": self.metadata}).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> Marker:
        try:
            fields = json.loads(data)
            return cls(str(fields["cluster_id"]), str(fields.get("metadata", "")))
        except (ValueError, TypeError, KeyError):
            raise ClusterMismatchError(f"{where}: not a siltstream cluster marker") from None


@dataclass(frozen=True, slots=True)
class Cluster:
    """An opened pair, checked; `marked`: this open wrote the store's marker."""

    store: ObjectStore
    metadata: MetadataStore
    cluster_id: str
    marked: bool


def read_marker(store: ObjectStore, store_url: str) -> Marker | None:
    """The store's marker, None if it has none; a missing bucket is one line saying how to
    create it."""
    try:
        data = store.get(MARKER_KEY)
    except BucketNotFoundError:
        raise BucketNotFoundError(f"store {store_url}: the bucket does not exist;"
                                  f" {INIT_HINT}") from None
    except FileNotFoundError:
        return None
    return Marker.decode(data, f"{store_url} {MARKER_KEY}")


def open_cluster(settings: Settings, *, create: bool) -> Cluster:
    """Open the store (under its retry policy) and the metadata of `settings` and check they
    belong together (module docstring); `create`: a write command's open, which creates the
    metadata and the marker if missing."""
    store_url, metadata_url = settings.store.url, settings.metadata.url
    store = open_store(store_url, retry=RetryPolicy.of(settings.store))
    marker = read_marker(store, store_url)
    try:
        # A marked store's metadata must exist already: a new one would be another cluster.
        md = MetadataStore.open(metadata_url, create=create and marker is None,
                                config=settings.metadata)
    except MetadataNotFoundError:
        if marker is None:
            raise
        raise ClusterMismatchError(
            f"store {store_url} belongs to cluster {marker.cluster_id} (metadata"
            f" {marker.metadata}), and there is no metadata at {shown_url(metadata_url)}:"
            " point --metadata or SILT_METADATA at that cluster's metadata, or use another"
            " store") from None
    try:
        marked = _check(store, store_url, md, marker, create)
        return Cluster(store, md, md.cluster_identity().cluster_id, marked)
    except BaseException:
        md.close()
        raise


def _check(store: ObjectStore, store_url: str, md: MetadataStore, marker: Marker | None,
           create: bool) -> bool:
    """Refuse a mismatched pair; on a write command mark and bind an unmarked store. True
    if the marker was written now."""
    ident = md.cluster_identity()
    if marker is not None:
        if marker.cluster_id != ident.cluster_id:
            raise ClusterMismatchError(
                f"store {store_url} belongs to cluster {marker.cluster_id} (metadata"
                f" {marker.metadata}), but metadata {shown_url(md.url)} is cluster"
                f" {ident.cluster_id}: {OWN_METADATA}")
        if create and ident.store_url is None:  # marked, then stopped before binding
            md.bind_store(store_url)
        return False
    if ident.store_url is not None:
        raise _unmarked(store_url, md, ident)
    if not create:
        return False  # never bound (older metadata, or init not finished): nothing to check
    store.put(MARKER_KEY, Marker(ident.cluster_id, shown_url(md.url)).encode())
    written = read_marker(store, store_url)  # another cluster's writer may have raced us
    if written is None or written.cluster_id != ident.cluster_id:
        raise ClusterMismatchError(f"store {store_url}: another cluster marked it at the same"
                                   f" time: {OWN_METADATA}")
    bound = md.bind_store(store_url)
    if bound.store_url != store_url:  # the metadata was bound to another store meanwhile
        raise _unmarked(store_url, md, bound)
    return True


def _unmarked(store_url: str, md: MetadataStore, ident: ClusterIdentity) -> ClusterMismatchError:
    return ClusterMismatchError(
        f"metadata {shown_url(md.url)} belongs to store {ident.store_url} (cluster"
        f" {ident.cluster_id}), not to {store_url}, which holds no cluster marker:"
        f" {OWN_METADATA}")


def create_bucket(store_url: str) -> bool:
    """Create an s3:// store's bucket (`silt init --create-bucket`); False if it exists.
    Other stores have no bucket to create: their first write creates what they need."""
    backend = open_backend(store_url)
    if not isinstance(backend, S3Store):
        raise ValueError(f"--create-bucket is for s3:// stores, not {store_url}")
    return backend.create_bucket()


def init_report(cluster: Cluster, store_url: str, bucket_created: bool | None) -> dict[str,
                                                                                      object]:
    """What `silt init` prints (as JSON with --json)."""
    return {"cluster_id": cluster.cluster_id, "store": store_url,
            "metadata": shown_url(cluster.metadata.url), "bucket_created": bucket_created,
            "marker_written": cluster.marked}
