"""`python -m faults.chaos --suite NAME [--trials N] [--seed S] [--write docs/reliability.md]`:
run a reliability suite, print its figures and (with --write) put them, with the command
that reproduces them, between the suite's `<!-- chaos:NAME -->` and `<!-- /chaos:NAME -->`
markers in the document (a section with the markers is appended if it has none).

A suite is one `SUITES` entry: where its `run(trials=..., seed=..., **extra)` is (imported
only when the suite runs) and how many trials `make chaos` gives it. `run` returns its
figures as a mapping, or an object with `as_dict()`, or a dataclass, of name -> value; a
`violations` figure above 0, or an `ok` figure that is false, makes the command exit 1.
List figures (`examples`: the first few violations described) are printed, and written,
as lists after the table. Exit 0: every promise held in every trial.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Suite:
    """A suite: `target` is `module:function`, called as function(trials=N, seed=S,
    **extra); `trials` is the count `make chaos` runs; `unit` names a trial."""

    name: str
    target: str
    trials: int
    summary: str
    unit: str = "trials"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def load(self) -> Callable[..., Any]:
        module, _, function = self.target.partition(":")
        fn: Callable[..., Any] = getattr(importlib.import_module(module), function)
        return fn


SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite("crash", "faults.suites.crash:run", 500,
          "agent, compactor and GC processes SIGKILLed at each named step and at random"),
    Suite("corruption", "faults.suites.corruption:run", 1_000,
          "bit flips and truncations of stored objects (hypothesis)", unit="cases"),
    Suite("concurrency", "faults.suites.concurrency:run", 20,
          "agents and compactors at once on PostgreSQL"),
    Suite("storefaults", "faults.storefaults:run", 50,
          "S3 requests failed through a fault proxy (10 %)", extra={"fault_rate": 0.10}),
    Suite("protocol", "faults.suites.protocol:run", 20,
          "adversarial frames and record batches against a real agent, on its PLAINTEXT"
          " and SASL_PLAINTEXT listeners (issues 22, 25)",
          unit="random mutants per API version", extra={"every_truncation": True}),
)}


def figures_of(result: Any) -> dict[str, Any]:
    """A suite's result as a plain dict (a mapping, `as_dict()`, or a dataclass)."""
    if hasattr(result, "as_dict"):
        return dict(result.as_dict())
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return dict(result)


def command(suite: Suite, trials: int, seed: int, doc: str | None) -> str:
    write = f" --write {doc}" if doc else ""
    return f"python -m faults.chaos --suite {suite.name} --trials {trials} --seed {seed}{write}"


def render(suite: Suite, figures: Mapping[str, Any], trials: int, seed: int, seconds: float,
           doc: str | None) -> str:
    """The block written between a suite's markers."""
    day = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    lines = [
        f"Last run {day}: {trials} {suite.unit}, seed {seed}, {seconds:.0f} s on"
        f" {os.cpu_count()} cores ({platform.system()}, Python {platform.python_version()}).",
        f"Reproduce: `{command(suite, trials, seed, doc)}` (`make chaos` runs every suite).",
        "",
        "| figure | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in figures.items() if not isinstance(v, list)),
    ]
    for k, v in figures.items():
        if isinstance(v, list) and v:
            lines += ["", f"{k}:", "", *(f"- `{e}`" for e in v)]
    return "\n".join(lines)


def failed(figures: Mapping[str, Any]) -> bool:
    """A promise failed: violations above 0, or `ok` false."""
    return int(figures.get("violations", 0)) > 0 or figures.get("ok", True) is False


def write(path: Path, suite: Suite, block: str) -> None:
    """Replace the text between the suite's markers in `path` (append a section if none)."""
    start, end = f"<!-- chaos:{suite.name} -->", f"<!-- /chaos:{suite.name} -->"
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    new = f"{start}\n{block}\n{end}"
    if pattern.search(text):
        text = pattern.sub(lambda _: new, text, count=1)
    else:
        text = text.rstrip("\n") + f"\n\n## {suite.name}: {suite.summary}\n\n{new}\n"
    path.write_text(text)


def run(suite: Suite, trials: int, seed: int) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    figures = figures_of(suite.load()(trials=trials, seed=seed, **suite.extra))
    return figures, time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", required=True, choices=sorted(SUITES), action="append",
                        help="a suite to run (repeatable)")
    parser.add_argument("--trials", type=int, help="trials (cases) per suite;"
                        " default: each suite's own (make chaos's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--write", metavar="DOC", help="put the figures in this document")
    args = parser.parse_args(argv)
    bad = False
    for name in args.suite:
        suite = SUITES[name]
        trials = args.trials if args.trials is not None else suite.trials
        print(f"{name}: {trials} {suite.unit}, seed {args.seed} ...", file=sys.stderr)
        figures, seconds = run(suite, trials, args.seed)
        for k, v in figures.items():
            for line in (v if isinstance(v, list) else [v]):
                print(f"{name}: {k}: {line}")
        if args.write:
            write(Path(args.write), suite, render(suite, figures, trials, args.seed, seconds,
                                                  args.write))
        bad = bad or failed(figures)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
