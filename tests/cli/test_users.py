"""`silt users add|delete|list` and the SCRAM credentials they keep (metadata/users.py), on
both metadata backends: the password from stdin or a file, never stored; what SCRAM and
PLAIN then accept; one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.sasl.plain import PlainServer
from cli.main import cli
from metadata import MetadataStore


def run(args: list[str], env: dict[str, str], stdin: str = "") -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env, input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def env(metadata_url: str, tmp_path: Path) -> dict[str, str]:
    return {"SILT_STORE": f"file://{tmp_path}/objects", "SILT_METADATA": metadata_url}


def _plain_ok(md: MetadataStore, user: str, password: str) -> bool:
    server = PlainServer(md.scram_credentials)
    try:
        server.step(f"\0{user}\0{password}".encode())
    except Exception:
        return False
    return True


def test_add_list_delete(env: dict[str, str], tmp_path: Path) -> None:
    code, out, err = run(["users", "add", "alice", "--json"], env, stdin="s3cret\n")
    assert (code, err) == (0, "")
    assert json.loads(out)["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    secret = tmp_path / "bob.pw"
    secret.write_text("b0b-pw\n")
    code, _, _ = run(["users", "add", "bob", "--mechanism", "scram-sha-512", "--iterations",
                      "4096", "--password-file", str(secret)], env)
    assert code == 0
    code, out, _ = run(["users", "list", "--json"], env)
    assert json.loads(out) == [
        {"user": "alice", "mechanisms": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192},
                                         {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]},
        {"user": "bob", "mechanisms": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}]
    with MetadataStore.open(env["SILT_METADATA"]) as md:
        creds = md.scram_credentials("alice")
        assert all(b"s3cret" not in c.salt + c.stored_key + c.server_key for c in creds)
        assert _plain_ok(md, "alice", "s3cret") and not _plain_ok(md, "alice", "nope")
        assert _plain_ok(md, "bob", "b0b-pw")
    # A new password replaces the old one.
    assert run(["users", "add", "alice"], env, stdin="n3w\n")[0] == 0
    with MetadataStore.open(env["SILT_METADATA"]) as md:
        assert _plain_ok(md, "alice", "n3w") and not _plain_ok(md, "alice", "s3cret")
    code, out, _ = run(["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"], env)
    assert code == 0 and "deleted SCRAM-SHA-256" in out
    code, _, err = run(["users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"], env)
    assert code == 1 and "has no credential SCRAM-SHA-256" in err
    assert run(["users", "delete", "alice"], env)[0] == 0
    code, out, _ = run(["users", "list", "--json"], env)
    assert [u["user"] for u in json.loads(out)] == ["bob"]


def test_refusals(env: dict[str, str]) -> None:
    code, _, err = run(["users", "add", "carol"], env, stdin="")
    assert code == 1 and "password is empty" in err
    code, _, err = run(["users", "add", "carol", "--iterations", "100"], env, stdin="pw\n")
    assert code == 2 and "4096" in err
    assert run(["users", "add", "carol"], env, stdin="pw\n")[0] == 0
    code, _, err = run(["users", "delete", "nobody"], env)
    assert code == 1 and "has no credential" in err


def test_alter_is_all_or_nothing_per_user(metadata_url: str) -> None:
    """A deletion of a credential that does not exist leaves that user's changes out and
    applies everyone else's (Kafka's RESOURCE_NOT_FOUND per user)."""
    from agent.sasl.scram import make_credential

    with MetadataStore.open(metadata_url, create=True) as md:
        cred = make_credential("SCRAM-SHA-256", "pw", 4096)
        missing = md.alter_scram_credentials([("ghost", "SCRAM-SHA-512")],
                                             [("ghost", cred), ("dora", cred)])
        assert missing == {"ghost"}
        assert md.scram_users() == {"dora": [("SCRAM-SHA-256", 4096)]}
