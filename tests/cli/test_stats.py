"""`silt stats` shows the bytes of every file state, so live + awaiting GC is what the store
holds (after a compaction the inputs are retired, still on disk until the GC grace ends)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cli.main import cli
from objects.keys import MARKER_KEY


def run(env: dict[str, str], *args: str, input: str | None = None) -> str:
    result = CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_live_plus_awaiting_gc_is_what_the_store_holds(tmp_path: Path) -> None:
    env = {"SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    run(env, "topics", "create", "t", "--partitions", "2")
    for i in range(3):
        run(env, "produce", "t", input=json.dumps({"key": f"k{i}", "value": "v" * 100}) + "\n")
    run(env, "compact", "--once", "--all")
    objects = tmp_path / "objects"
    on_disk = sum(p.stat().st_size for p in objects.rglob("*")  # data: not the cluster marker
                  if p.is_file() and p.relative_to(objects).as_posix() != MARKER_KEY)

    data = json.loads(run(env, "stats", "--json"))
    by_state = data["bytes_by_state"]
    assert data["files_by_state"]["retired"] == 3
    live = sum(level["bytes"] for level in data["levels"])
    assert live == by_state["live"]
    assert sum(b for state, b in by_state.items() if state != "deleted") == on_disk

    text = run(env, "stats")
    retired = next(line.split() for line in text.splitlines() if line.startswith("retired"))
    assert retired[1:3] == ["3", str(by_state["retired"])]
    assert (f"in the store: {on_disk} bytes (live {live}, awaiting GC"
            f" {by_state['retired']})") in text
