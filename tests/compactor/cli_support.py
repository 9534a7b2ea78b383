"""The `silt` command in-process for the compactor's CLI tests, and the two backend pairs
they run against."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli

BACKENDS = ["file+sqlite", "s3+postgres"]


def run(args: list[str], env: dict[str, str], input: str | None = None) -> tuple[int, str, str]:
    """`silt ARGS` with `env`: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(cli, args, env=env, input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def backend_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """SILT_STORE and SILT_METADATA for the backend pair `request.param` (BACKENDS)."""
    if request.param == "file+sqlite":
        return {"SILT_STORE": f"file://{tmp_path}/objects",
                "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    return {"SILT_STORE": str(request.getfixturevalue("s3_url")),
            "SILT_METADATA": str(request.getfixturevalue("postgres_url"))}
