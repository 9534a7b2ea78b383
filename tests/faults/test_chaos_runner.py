"""`python -m faults.chaos`: figures between a suite's markers (replaced, other text kept;
a section appended when the document has none), the reproducing command, exit codes, and a
suite added by one registry entry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faults import chaos

ROOT = Path(__file__).resolve().parents[2]


def fake_run(trials: int, seed: int, bad: int = 0) -> dict[str, object]:
    """A suite's run for these tests: figures from its arguments."""
    return {"trials": trials, "seed seen": seed, "violations": bad,
            "examples": [f"violation {i}" for i in range(bad)]}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> chaos.Suite:
    suite = chaos.Suite("fake", f"{__name__}:fake_run", 7, "a suite for tests")
    monkeypatch.setitem(chaos.SUITES, "fake", suite)
    return suite


def test_figures_go_between_the_markers_and_the_rest_stays(tmp_path: Path,
                                                           fake: chaos.Suite) -> None:
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\nbefore\n<!-- chaos:fake -->\nold figures\n"
                   "<!-- /chaos:fake -->\nafter\n")
    assert chaos.main(["--suite", "fake", "--trials", "3", "--seed", "9",
                       "--write", str(doc)]) == 0
    text = doc.read_text()
    assert "old figures" not in text
    assert text.startswith("# Reliability\n\nbefore\n<!-- chaos:fake -->\n")
    assert text.endswith("<!-- /chaos:fake -->\nafter\n")
    assert "| trials | 3 |" in text and "| seed seen | 9 |" in text
    assert (f"`python -m faults.chaos --suite fake --trials 3 --seed 9 --write {doc}`"
            in text)
    # Run again: still one block.
    chaos.main(["--suite", "fake", "--write", str(doc)])
    assert doc.read_text().count("<!-- chaos:fake -->") == 1
    assert "| trials | 7 |" in doc.read_text()  # the suite's own count by default


def test_a_document_without_markers_gets_a_section(tmp_path: Path, fake: chaos.Suite) -> None:
    doc = tmp_path / "r.md"
    doc.write_text("# R\n")
    chaos.main(["--suite", "fake", "--trials", "1", "--write", str(doc)])
    assert "## fake: a suite for tests\n\n<!-- chaos:fake -->" in doc.read_text()


def test_violations_exit_1_and_are_listed(tmp_path: Path, fake: chaos.Suite,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(chaos.SUITES, "fake", chaos.Suite(
        "fake", f"{__name__}:fake_run", 7, "a suite for tests", extra={"bad": 2}))
    doc = tmp_path / "r.md"
    assert chaos.main(["--suite", "fake", "--write", str(doc)]) == 1
    assert "fake: VIOLATION violation 1" in capsys.readouterr().out
    assert "- `violation 0`" in doc.read_text()


def test_every_registered_suite_resolves_to_a_function() -> None:
    assert {"crash", "corruption", "concurrency"} <= set(chaos.SUITES)
    for suite in chaos.SUITES.values():
        assert callable(suite.load())
    assert chaos.SUITES["crash"].trials >= 500 and chaos.SUITES["corruption"].trials >= 1000


def test_the_command_line_refuses_an_unknown_suite() -> None:
    done = subprocess.run([sys.executable, "-m", "faults.chaos", "--suite", "nope"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "invalid choice: 'nope'" in done.stderr
