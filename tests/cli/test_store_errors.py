"""An object store that cannot be reached, or a store URL that is misspelt, is one line on
stderr and exit 1, whatever the backend (s3:// through boto3, any fsspec protocol, a scheme
nobody serves): never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from harness.agent_process import free_port

RECORD = '{"key": "k", "value": "v"}\n'


def one_line(store: str, tmp_path: Path, *command: str, **env: str) -> str:
    """Run `silt --store STORE COMMAND` and return its one stderr line (exit 1, no trace)."""
    result = CliRunner().invoke(
        cli, ["--store", store, "--metadata", f"sqlite:///{tmp_path}/md.db", *command],
        input=RECORD, env={"SILT_STORE_RETRY_ATTEMPTS": "2", "SILT_STORE_RETRY_BACKOFF_MS": "1",
                           **env}, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("silt: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["produce", "t"], ["topics", "list"]])
def test_s3_endpoint_unreachable(tmp_path: Path, command: list[str]) -> None:
    line = one_line("s3://bucket/prefix", tmp_path, *command,
                    AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
                    AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
                    AWS_EC2_METADATA_DISABLED="true")
    assert "Could not connect to the endpoint URL" in line


def test_s3_endpoint_misspelt(tmp_path: Path) -> None:
    line = one_line("s3://bucket/prefix", tmp_path, "topics", "list",
                    AWS_ENDPOINT_URL="htp:/127.0.0.1", AWS_ACCESS_KEY_ID="test",
                    AWS_SECRET_ACCESS_KEY="test")
    assert "endpoint" in line.lower()


def test_fsspec_ftp_refused(tmp_path: Path) -> None:
    """fsspec's ftp filesystem connects when it is made: refused is one line."""
    url = f"ftp://127.0.0.1:{free_port()}/silt"
    line = one_line(url, tmp_path, "produce", "t")
    assert line.startswith(f"silt: open {url}: ") and "refused" in line.lower()


def test_fsspec_ftp_unknown_host(tmp_path: Path) -> None:
    """`silt --store ftp://x/y produce t` used to end in a socket.gaierror traceback."""
    line = one_line("ftp://no-such-host.invalid/y", tmp_path, "produce", "t")
    assert line.startswith("silt: open ftp://no-such-host.invalid/y: ")


@pytest.mark.parametrize("url", ["fiel:///tmp/silt", "s4://bucket/prefix", "s3:/bucket/prefix",
                                 "s3://"])
def test_misspelt_scheme(tmp_path: Path, url: str) -> None:
    line = one_line(url, tmp_path, "topics", "list")
    assert url in line
