"""The README's "Using it" commands run as written (with the shipped examples/records.jsonl),
and the compaction triggers docs/operations.md quotes are the planner's defaults."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from harness.agent_process import REPO
from planner import PlannerConfig

README = (REPO / "README.md").read_text()
OPERATIONS = (REPO / "docs" / "operations.md").read_text()
MIB = 1024 * 1024


def _using_it() -> list[str]:
    section = README[README.index("## Using it"):]
    block = section[section.index("```sh\n") + 6:section.index("```", section.index("```sh") + 5)]
    return [line for line in block.splitlines() if "silt " in line]


def test_using_it_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the README runs from the checkout: examples/records.jsonl
    env = {"SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    lines = _using_it()
    assert len(lines) == 7, lines
    outputs = []
    for line in lines:
        piped, _, command = line.rpartition("| ")
        stdin = shlex.split(piped)[1] + "\n" if piped else None  # echo 'TEXT' |
        args = shlex.split(command, comments=True)
        assert args[0] == "silt"
        result = CliRunner().invoke(cli, args[1:], env=env, input=stdin,
                                    catch_exceptions=False)
        assert result.exit_code == 0, (line, result.stderr)
        outputs.append(result.stdout)
    examples = (REPO / "examples" / "records.jsonl").read_text().splitlines()
    acks = [json.loads(a) for a in outputs[3].splitlines()]
    assert len(acks) == len(examples) > 0
    assert json.loads(outputs[5])["name"] == "users"


def test_quoted_l0_triggers_are_the_defaults() -> None:
    match = re.search(r"size-tiered, (\d+) files or\s+(\d+) MiB or (\d+) s at L0;"
                      r" bin-packed to (\d+) MiB", OPERATIONS)
    assert match, "docs/operations.md no longer quotes the L0 triggers"
    files, mib, seconds, target = (int(g) for g in match.groups())
    config = PlannerConfig()
    assert files == config.l0_trigger_files
    assert mib * MIB == config.l0_trigger_bytes
    assert seconds * 1000 == config.l0_max_age_ms
    assert target * MIB == config.target_file_bytes
