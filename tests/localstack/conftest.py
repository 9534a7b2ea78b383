"""LocalStack S3 without Docker, started once per session by localstack/launch.py."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from harness.agent_process import free_port

ROOT = Path(__file__).resolve().parents[2]


def _launcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("silt_localstack_launch",
                                                  ROOT / "localstack" / "launch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LocalStack:
    """A running LocalStack and its request log."""

    def __init__(self, endpoint: str, log: Path) -> None:
        self.endpoint = endpoint
        self.log = log

    def count(self, operation: str) -> int:
        """Requests LocalStack logged for an S3 operation, e.g. 'GetObject'."""
        return sum(1 for line in self.log.read_text(errors="replace").splitlines()
                   if f"s3.{operation} =>" in line)


@pytest.fixture(scope="session")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    launch = _launcher()
    if launch.find_python313() is None:
        pytest.skip("LocalStack needs a Python >= 3.13; none on this machine")
    port = free_port()
    tmp = tmp_path_factory.mktemp("localstack")
    log = tmp / "localstack.log"
    proc = launch.start(port, tmp / "data", log)
    try:
        yield LocalStack(f"http://127.0.0.1:{port}", log)
    finally:
        launch.stop(proc)
