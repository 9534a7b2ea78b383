"""`silt gc`: collect now what compaction retired, with the grace period from the settings
or `--grace-ms`; uploads still pending are left for compactor.lease.ms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import cli
from metadata import MetadataStore
from metadata.identity import MARKER_KEY
from objectstore import open_store


def run(args: list[str], env: dict[str, str], input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env, input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def gc(env: dict[str, str], *args: str) -> dict[str, Any]:
    code, out, err = run(["gc", "--json", *args], env)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture(params=["file+sqlite", "s3+postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "file+sqlite":
        return {"SILT_STORE": f"file://{tmp_path}/objects",
                "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    return {"SILT_STORE": str(request.getfixturevalue("s3_url")),
            "SILT_METADATA": str(request.getfixturevalue("postgres_url"))}


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

    assert gc(env) == {"deleted": 0, "keys": [], "waiting": 3, "grace_ms": 60_000}
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
