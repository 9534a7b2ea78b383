"""`silt acls add|remove|list` against the metadata store directly, on both metadata
backends: bindings as kafka-acls makes them, removal by filter, refusals in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from acl import Acl, Operation, PatternType, Permission, ResourceType
from cli.main import cli
from metadata import MetadataStore


def run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def env(metadata_url: str, tmp_path: Path) -> dict[str, str]:
    return {"SILT_STORE": f"file://{tmp_path}/objects", "SILT_METADATA": metadata_url}


def test_add_list_remove(env: dict[str, str]) -> None:
    code, out, err = run(["acls", "add", "--topic", "t", "--group", "g", "--allow-principal",
                          "User:alice", "--operation", "read", "--operation", "describe",
                          "--json"], env)
    assert (code, err) == (0, "")
    assert len(json.loads(out)) == 4
    code, out, _ = run(["acls", "add", "--topic", "p", "--resource-pattern-type", "prefixed",
                        "--deny-principal", "User:bob", "--deny-host", "10.0.0.1"], env)
    assert code == 0 and "PREFIXED" in out and "DENY" in out
    md = MetadataStore.open(env["SILT_METADATA"])
    try:
        _, stored = md.list_acls()
        assert Acl(ResourceType.TOPIC, "p", PatternType.PREFIXED, "User:bob", "10.0.0.1",
                   Operation.ALL, Permission.DENY) in stored
        assert len(stored) == 5
    finally:
        md.close()
    code, out, _ = run(["acls", "list", "--topic", "t", "--json"], env)
    assert {(r["operation"], r["principal"]) for r in json.loads(out)} == {
        ("READ", "User:alice"), ("DESCRIBE", "User:alice")}
    code, out, _ = run(["acls", "list", "--principal", "User:bob", "--json"], env)
    assert [r["name"] for r in json.loads(out)] == ["p"]
    code, out, _ = run(["acls", "remove", "--topic", "t", "--operation", "read", "--json"], env)
    assert [(r["name"], r["operation"]) for r in json.loads(out)] == [("t", "READ")]
    code, out, _ = run(["acls", "remove", "--group", "g", "--json"], env)
    assert len(json.loads(out)) == 2
    code, out, _ = run(["acls", "list", "--json"], env)
    assert sorted(r["name"] for r in json.loads(out)) == ["p", "t"]


@pytest.mark.parametrize(("args", "message"), [
    (["--topic", "t", "--allow-principal", "alice"], "principalType:principalName"),
    (["--topic", "t"], "give a resource"),
    (["--allow-principal", "User:a"], "give a resource"),
])
def test_add_refusals(env: dict[str, str], args: list[str], message: str) -> None:
    code, _, err = run(["acls", "add", *args], env)
    assert code == 1 and message in err and err.count("\n") == 1
