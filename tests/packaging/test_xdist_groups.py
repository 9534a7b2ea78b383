"""`make test` runs pytest-xdist's `--dist loadgroup` and relies on its groups: the Spark tests
share one local Spark and the LocalStack tests one LocalStack (and its venv's install), each
in one worker (tests/conftest.py marks them). A pytest or pytest-xdist that stops honouring
the groups (pytest 9.2 did: pytest-xdist issue 1386) would start a Spark per worker and
install LocalStack twice at once; this fails first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TEST = '''
import pytest

@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''
CONFTEST = '''
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if "test_grouped" in item.nodeid:
            item.add_marker(pytest.mark.xdist_group("one"))
'''


def test_a_group_runs_in_one_worker(tmp_path: Path) -> None:
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(TEST)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "-p", "no:randomly", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    ran = re.findall(r"\[(gw\d+)\] .*PASSED (\S+)", run.stdout)
    grouped = {worker for worker, test in ran if "test_grouped" in test}
    assert len(ran) == 24 and len(grouped) == 1, run.stdout
