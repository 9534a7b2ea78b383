"""The wheel holds the product and nothing else: pyproject's package list is exactly the
product's packages on disk, every subpackage included, and no harness, benchmark, fault
injection or docs tool (those run from a checkout)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Top-level packages of the product (docs/architecture.md, floors 1-5).
PRODUCT = {"clock", "settings", "telemetry", "fileformat", "metadata", "objectstore", "planner",
           "objects", "agent", "compactor", "spark", "costs", "cli", "acl"}
# Run from a checkout, never shipped.
NOT_SHIPPED = {"bench", "faults", "harness", "reference", "tests"}


def _packages_on_disk(top: str) -> set[str]:
    root = REPO / top
    return {".".join(init.parent.relative_to(REPO).parts) for init in root.rglob("__init__.py")
            if "build" not in init.parts}


def test_top_level_packages_are_known() -> None:
    tops = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert tops == PRODUCT | NOT_SHIPPED, "new top-level package: product or not shipped?"


def test_pyproject_ships_the_product_only() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    shipped = set(config["tool"]["setuptools"]["packages"])
    expected = set().union(*(_packages_on_disk(top) for top in PRODUCT))
    assert shipped == expected
    assert not {p.split(".")[0] for p in shipped} & NOT_SHIPPED
    assert config["project"]["scripts"] == {"silt": "cli.entry:main"}
