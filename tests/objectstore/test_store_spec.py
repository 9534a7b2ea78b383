"""StoreSpec: a store resolved in one process opens the same store in another whose
environment lacks the endpoint and region (a Spark executor), and carries no credentials."""

from __future__ import annotations

import pickle

import pytest

from objectstore import S3Options, StoreSpec, open_store
from objectstore.s3 import DEFAULT_REGION
from objectstore.testserver import RecordingMotoServer

AWS_ONLY_HERE = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION")


def test_resolve_reads_the_aws_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS_ONLY_HERE:
        monkeypatch.delenv(name, raising=False)
    assert StoreSpec.resolve("s3://b/p") == StoreSpec("s3://b/p", S3Options())
    assert S3Options() == S3Options(None, DEFAULT_REGION, "auto")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://global:1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert StoreSpec.resolve("s3://b/p").s3 == S3Options("http://global:1", "eu-west-1", "path")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:2")  # botocore's order
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert StoreSpec.resolve("s3://b/p").s3 == S3Options("http://s3-only:2", "ap-south-1",
                                                         "path")
    assert StoreSpec.resolve("file:///tmp/x") == StoreSpec("file:///tmp/x")  # nothing to ship
    with pytest.raises(ValueError, match="addressing style 'dns'"):
        S3Options(addressing_style="dns")  # type: ignore[arg-type]


def test_spec_opens_the_same_store_without_the_variables(
        s3_url: str, moto_server: RecordingMotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = StoreSpec.resolve(s3_url)
    assert spec.s3 is not None and spec.s3.endpoint_url == moto_server.endpoint_url
    text = repr(spec) + repr(pickle.dumps(spec))
    assert "testing" not in text  # no credentials in what travels to executors
    shipped = pickle.loads(pickle.dumps(spec))
    # An executor: credentials from its own chain, no endpoint, another region.
    for name in AWS_ONLY_HERE:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    store = open_store(shipped)
    store.put("k", b"payload")
    assert store.get_range("k", 0, 7) == b"payload"
    assert moto_server.counts()["PUT"] == 1 and moto_server.counts()["GET"] == 1


def test_no_credentials_says_where_they_come_from(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = open_store(StoreSpec("s3://b/p", S3Options("http://127.0.0.1:1", "us-east-1",
                                                       "path")))
    with pytest.raises(PermissionError) as err:
        store.size("k")
    message = str(err.value)
    assert message.startswith("head s3://b/p/k: Unable to locate credentials (")
    assert "AWS_ACCESS_KEY_ID" in message and "spark.executorEnv" in message
    assert "\n" not in message
