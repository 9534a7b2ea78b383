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
    assert "fake: examples: violation 1" in capsys.readouterr().out
    assert "examples:\n\n- `violation 0`\n- `violation 1`" in doc.read_text()


def test_every_registered_suite_resolves_to_a_function() -> None:
    assert {"crash", "corruption", "concurrency", "storefaults"} <= set(chaos.SUITES)
    for suite in chaos.SUITES.values():
        assert callable(suite.load())
    assert chaos.SUITES["crash"].trials >= 500 and chaos.SUITES["corruption"].trials >= 1000


class Result:
    """A result with `as_dict()` and an `ok` verdict, as faults.storefaults returns."""

    def __init__(self, ok: bool) -> None:
        self.ok = ok

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "failure_messages": [] if self.ok else ["produce gave up"]}


def test_results_with_as_dict_and_an_ok_verdict() -> None:
    assert chaos.figures_of(Result(True)) == {"ok": True, "failure_messages": []}
    assert not chaos.failed(chaos.figures_of(Result(True)))
    assert chaos.failed(chaos.figures_of(Result(False)))
    assert chaos.failed({"violations": 2}) and not chaos.failed({"violations": 0})


def test_the_command_line_refuses_an_unknown_suite() -> None:
    done = subprocess.run([sys.executable, "-m", "faults.chaos", "--suite", "nope"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "invalid choice: 'nope'" in done.stderr
