"""`silt costs` measures the three designs for real; client and server counts agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli


@pytest.mark.s3server
def test_costs_sweep_flat_for_siltstream_growing_for_seeks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    png = tmp_path / "costs.png"
    result = CliRunner().invoke(
        cli, ["costs", "--partitions", "1,10,50", "--rounds", "1", "--files", "3", "--json",
              "--plot", str(png)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["client_server_agree"] is True
    rows = {(r["design"], r["partitions"]): r for r in report["results"]}
    for p in (1, 10, 50):
        assert rows[("siltstream", p)]["server"] == rows[("siltstream", p)]["client"]
        assert rows[("siltstream", p)]["compaction_gets"] == 2 * 3  # 2 GETs per input file
        assert rows[("per-partition-objects", p)]["ingest_puts"] == 3 * p
    seeks = [rows[("per-partition-seeks", p)]["compaction_gets"] for p in (1, 10, 50)]
    assert seeks[0] < seeks[1] < seeks[2]
    ratios = report["dollar_ratio_vs_siltstream_at_max_partitions"]
    assert ratios["per-partition-seeks"] > 5 and ratios["per-partition-objects"] > 10
    assert png.stat().st_size > 10_000
    # Progress on stderr (not a terminal here: one line per measurement), never on stdout.
    progress = [line for line in result.stderr.splitlines()
                if line.startswith("silt costs: measuring")]
    assert sorted(progress) == sorted(f"silt costs: measuring {d} with {p} partitions per file"
                                      for d, p in rows)


def test_costs_rejects_bad_sweep() -> None:
    result = CliRunner().invoke(cli, ["costs", "--partitions", "1,x"])
    assert result.exit_code == 2 and "comma-separated" in result.stderr
