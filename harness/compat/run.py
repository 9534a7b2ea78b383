"""librdkafka's regression suite against `silt agent`: `python -m harness.compat [--tests
0011,0081] [--timeout S] [--write docs/compatibility.md]` (what `make compat` runs).

Builds librdkafka's test-runner (harness.compat.build), starts one cluster per scenario it
needs (`silt agent`, and `silt compactor` where a broker's log cleaner is expected; its own
object store and SQLite metadata under the work directory), and
runs the broker tests one number at a time (`-p1 -L`, `TESTS=<number>`, `-s <scenario>`,
`TEST_KAFKA_VERSION`), each under a time limit. A test's result is what the runner's report
says (`TEST_REPORT`), with the reason from its summary line; a runner killed at the limit or
crashing fails the entries it had not reported. A cluster's process that died is restarted
for the next test (the death is in the result).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from agent.sasl.scram import make_credential
from harness.agent_process import REPO, AgentProcess

from . import build, kafka_scripts, oidc, suite, tls

DEFAULT_TIMEOUT_S = 600.0
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# A summary line: "| 0011_produce_batch | FAILED | 12.345s | reason"
_SUMMARY = re.compile(r"^\|\s*(\S+)\s*\|\s*([A-Z_]+)\s*\|\s*([\d.]+)s\s*\|\s?(.*)$")
# A failure: '### Test "0045_x (subtest)" failed at file.c:12:fn() at <date>: ###' and the
# message on the next line.
_FAILURE = re.compile(r'^### Test "(\S+)(?: \((.*)\))?" failed at (\S+) at [^#]*###\n(.*)$',
                      re.M)
_STATUS = {"PASSED": "pass", "FAILED": "fail", "SKIPPED": "skipped", "RUNNING": "fail",
           "NOT_STARTED": "fail"}


@dataclass(frozen=True)
class Result:
    """One test entry's outcome: pass, fail, skipped (by the runner or the test itself, with
    its reason), n/a (not run: not applicable here) or pending (not run: waits for an
    issue)."""

    name: str
    status: str
    seconds: float | None = None
    detail: str = ""

    @property
    def number(self) -> str:
        return self.name.split("_", 1)[0]


def not_run(entry: suite.Entry) -> Result | None:
    """The result of an entry that is not run (n/a or pending), else None."""
    if entry.number in suite.NOT_APPLICABLE:
        return Result(entry.name, "n/a", None, suite.NOT_APPLICABLE[entry.number])
    if entry.number in suite.PENDING:
        return Result(entry.name, "pending", None, suite.PENDING[entry.number])
    return None


@dataclass
class Cluster:
    """A scenario's `silt agent` and, if it has one, `silt compactor`, on their own object
    store and SQLite metadata under `home`."""

    home: Path
    scenario: suite.Scenario
    agent: AgentProcess
    compactor: subprocess.Popen[bytes] | None = None
    # The runner's test.conf beyond bootstrap.servers, and its environment's additions
    conf: tuple[tuple[str, str], ...] = ()
    runner_env: dict[str, str] = field(default_factory=dict)
    token_endpoint: oidc.Endpoint | None = None  # the OIDC scenario's

    def start(self) -> Self:
        """Start what is not running (after a death too)."""
        if self.agent.proc is None or self.agent.proc.poll() is not None:
            self.agent.start()
            if self.scenario.users:
                with self.agent.metadata() as md:
                    for user, password in self.scenario.users:
                        md.alter_scram_credentials([], [
                            (user, make_credential(m, password))
                            for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")])
        if self.scenario.compactor and (self.compactor is None
                                        or self.compactor.poll() is not None):
            with (self.home / "compactor.log").open("ab") as log:
                self.compactor = subprocess.Popen(
                    [sys.executable, "-m", "cli", "--store", self.agent.store_url,
                     "--metadata", self.agent.metadata_url, "compactor"],
                    env={**os.environ, **self.scenario.env, "PYTHONPATH": str(REPO)},
                    cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        return self

    def died(self) -> str | None:
        """What exited of the cluster's processes, if anything."""
        dead = []
        if self.agent.proc is not None and self.agent.proc.poll() is not None:
            dead.append(f"silt agent exited {self.agent.proc.returncode}")
        if self.compactor is not None and self.compactor.poll() is not None:
            dead.append(f"silt compactor exited {self.compactor.returncode}")
        return "; ".join(dead) or None

    @property
    def bootstrap(self) -> str:
        """Where the runner connects: the scenario's listener, else PLAINTEXT."""
        if self.scenario.listener:
            return self.agent.address(self.scenario.listener)
        return self.agent.bootstrap

    def stop(self) -> None:
        if self.agent.proc is not None and self.agent.proc.poll() is None:
            self.agent.terminate()
        if self.compactor is not None and self.compactor.poll() is None:
            self.compactor.terminate()
            self.compactor.wait(60)
        if self.token_endpoint is not None:
            self.token_endpoint.shutdown()
            self.token_endpoint.server_close()
            self.token_endpoint = None


@dataclass
class Clusters:
    """One cluster per scenario, started when first needed."""

    work: Path
    clusters: dict[str, Cluster] = field(default_factory=dict)

    def get(self, name: str) -> Cluster:
        """The scenario's running cluster (what died of it restarted)."""
        cluster = self.clusters.get(name)
        if cluster is None:
            home = self.work / name
            home.mkdir(parents=True, exist_ok=True)
            scenario = suite.SCENARIOS[name]
            agent = AgentProcess(f"file://{home}/objects", f"sqlite:///{home}/metadata.db",
                                 home / "agent.log", dict(scenario.env))
            if scenario.listener:
                agent.listeners = {scenario.listener: scenario.listener}
            cluster = self.clusters[name] = Cluster(home, scenario, agent, conf=scenario.conf)
            fixtures = tls.make(home / "certs") if scenario.tls else None
            if scenario.oidc:
                cluster.token_endpoint, fixtures = oidc.make(home / "oidc")
            if fixtures is not None:
                agent.extra_env.update(fixtures.agent_env)
                cluster.conf += fixtures.conf
                cluster.runner_env = fixtures.runner_env
        return cluster.start()

    def close(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        self.clusters.clear()


def runner_env(tests: Path, number: str, conf: Path, report: Path, bootstrap: str,
               kafka_path: Path) -> dict[str, str]:
    """The test-runner's environment. `TESTS` and `TEST_KAFKA_VERSION` rather than the
    runner's positional argument and `-V`: 2.15.0's test_cleanup frees those argv strings
    (a crash at exit). `KAFKA_PATH` holds our stand-ins for Kafka's scripts. `CI` is
    dropped so that runs here and in CI behave alike (the runner raises its concurrency and
    timeouts under CI)."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update({
        "TESTS": number, "TEST_KAFKA_VERSION": suite.KAFKA_VERSION,
        "RDKAFKA_TEST_CONF": str(conf),
        "TEST_REPORT": str(report), "BROKERS": bootstrap, "KAFKA_PATH": str(kafka_path),
        "LD_LIBRARY_PATH": f"{tests.parent / 'src'}:{tests.parent / 'src-cpp'}",
    })
    return env


def parse_run(output: str, report_path: Path,
              entries: list[suite.Entry]) -> dict[str, Result]:
    """The results of `entries` from a runner's report and summary lines (those it did not
    report are missing)."""
    text = _ANSI.sub("", output)
    reasons = {}
    for line in text.splitlines():
        if m := _SUMMARY.match(line.strip()):
            reasons[m.group(1)] = m.group(4).strip()
    failures: dict[str, str] = {}
    for m in _FAILURE.finditer(text):
        name, subtest, where, message = m.groups()
        failures.setdefault(name, f"{subtest + ': ' if subtest else ''}{message.strip()}"
                                  f" ({where})")
    try:
        report = json.loads(report_path.read_text())["tests"]
    except (OSError, ValueError, KeyError):
        return {}
    out = {}
    for entry in entries:
        got = report.get(entry.name)
        if got is None or (got["state"] == "SKIPPED" and entry.name not in reasons):
            continue
        status = _STATUS.get(got["state"], "fail")
        why = failures.get(entry.name, "") if status == "fail" else ""
        out[entry.name] = Result(entry.name, status, float(got["duration"]),
                                 why or reasons.get(entry.name, ""))
    return out


def reclassified(entry: suite.Entry, result: Result) -> Result:
    """A failure known to be by design (n/a) or in a sub-test waiting for another issue
    (pending) as such; any other result as it is."""
    if result.status != "fail":
        return result
    if entry.number in suite.BY_DESIGN:
        return Result(entry.name, "n/a", result.seconds, result.detail)
    subtest, status, why = suite.SUBTEST_FAILURES.get(entry.number, ("", "", ""))
    if subtest and subtest in result.detail:
        return Result(entry.name, status, result.seconds, f"{why}: {result.detail}")
    return result


def run_number(tests: Path, clusters: Clusters, number: str, scenario: str,
               entries: list[suite.Entry], timeout: float, logs: Path) -> list[Result]:
    """Run one test number in one scenario; a result per entry of `entries`."""
    cluster = clusters.get(scenario)
    home = cluster.home
    conf = home / "test.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in (("bootstrap.servers", cluster.bootstrap),
                                                       *suite.RUNNER_CONF, *cluster.conf)))
    report = home / f"report-{number}.json"
    report.unlink(missing_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{number}-{scenario}.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            # line-buffered: the summary (printf) survives the runner's abort at exit when a
            # failed test left librdkafka threads behind
            ["stdbuf", "-oL", "./test-runner", "-p1", "-L", "-s", cluster.scenario.runner],
            cwd=tests, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**runner_env(tests, number, conf, report, cluster.bootstrap,
                              kafka_scripts.install(clusters.work / "kafka")),
                 **cluster.runner_env})
        try:
            code = proc.wait(timeout)
            why = f"runner exited {code}" if code else ""
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            why = f"time limit: killed after {timeout:.0f} s"
        except BaseException:  # interrupted: the runner (own session) goes too
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    seconds = time.monotonic() - started
    output = log_path.read_text(errors="replace")
    results = parse_run(output, report, entries)
    dead = cluster.died()
    if dead is not None:
        why = f"{why}; {dead}" if why else dead
    out = []
    for entry in entries:
        result = results.get(entry.name)
        if result is None:
            result = Result(entry.name, "fail", round(seconds, 3), why or "not reported")
        elif dead is not None and result.status == "pass":
            result = Result(entry.name, "fail", result.seconds, why)
        result = reclassified(entry, result)
        out.append(result)
    return out


def _say(line: str) -> None:
    print(line, flush=True)


Run = tuple[str, str, list[suite.Entry]]  # test number, scenario, its entries there


def plan(entries: Iterable[suite.Entry], only: set[str] | None) -> list[Run]:
    """(number, scenario, entries) runs in test order; only the numbers in `only` if given."""
    runs: dict[tuple[str, str], list[suite.Entry]] = {}
    for entry in entries:
        if (only is None or entry.number in only) and not_run(entry) is None:
            runs.setdefault((entry.number, entry.scenario), []).append(entry)
    return [(number, scenario, group) for (number, scenario), group in runs.items()]


def run_suite(only: set[str] | None, timeout: float, work: Path,
              say: Callable[[str], None] | None = None) -> list[Result]:
    """Build if needed, run the broker tests (those numbered in `only`, else all), and return
    a result per entry, not-run ones included (progress lines to `say`, else stdout)."""
    say = say or _say
    tests = build.ensure_built(say)
    entries = suite.broker_tests((tests / "test.c").read_text())
    results = {e.name: r for e in entries
               if (only is None or e.number in only) and (r := not_run(e)) is not None}
    shutil.rmtree(work, ignore_errors=True)
    clusters = Clusters(work)
    try:
        for number, scenario, group in plan(entries, only):
            limit = suite.TIME_LIMIT_S.get(number, timeout)
            for result in run_number(tests, clusters, number, scenario, group, limit,
                                     work / "logs"):
                results[result.name] = result
                say(f"{result.name:<48} {result.status:<8} {result.seconds or 0:8.1f} s"
                    f"  {result.detail[:100]}")
    finally:
        clusters.close()
    order = {e.name: i for i, e in enumerate(entries)}
    return sorted(results.values(), key=lambda r: order[r.name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.compat", description=__doc__)
    parser.add_argument("--tests", help="comma-separated test numbers (default: every"
                        " broker test)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds one test number may run (default {DEFAULT_TIMEOUT_S:.0f})")
    parser.add_argument("--work", type=Path, default=build.build_root() / "run",
                        help="agents' data, runner logs (emptied first)")
    parser.add_argument("--write", metavar="MD", type=Path,
                        help="also write this page (with --tests and an existing page: only"
                             " those tests' rows change)")
    args = parser.parse_args(argv)
    only = {t.strip().zfill(4) for t in args.tests.split(",")} if args.tests else None
    started, head = time.time(), commit()  # what the agents run: the tree at the start
    results = run_suite(only, args.timeout, args.work)
    if args.write:
        from .report import render

        previous = args.write.read_text() if only and args.write.exists() else None
        args.write.write_text(render(results, previous, started, head))
    failed = [r for r in results if r.status == "fail"]
    print(f"{sum(r.status == 'pass' for r in results)} passed, {len(failed)} failed")
    return 1 if failed else 0


def commit() -> str:
    """The checkout's HEAD (short), with "+changes" when the tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=False).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


if __name__ == "__main__":
    sys.exit(main())
