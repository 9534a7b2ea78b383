"""No import climbs a floor of docs/architecture.md's Layout block: every module imports only
modules on its own floor or below (imports under TYPE_CHECKING and inside functions count).
The floors are read from the doc, so the doc and the code cannot disagree."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"
TOOLS = 6  # the tools floor: above the product, not shipped

# Imports that still climb, (importer, imported): none since issue 23 (`settings.load` was the
# last); an entry here must go, and the test fails once one is gone so the list only shrinks.
KNOWN_CLIMBS: set[tuple[str, str]] = set()


def floors() -> dict[str, int]:
    """Module or package (dotted) -> floor, from the doc's Layout block."""
    text = ARCHITECTURE.read_text()
    layout = text[text.index("## Layout"):]
    block = layout[layout.index("```\n") + 4:layout.index("```", layout.index("```\n") + 4)]
    out: dict[str, int] = {}
    for line in block.splitlines():
        label, *tokens = line.split()
        floor = TOOLS if label == "tools" else int(tokens.pop(0))
        for token in tokens:
            if re.fullmatch(r"[a-z_]+/([a-z_]+\.py)?", token):
                out[token.removesuffix("/").removesuffix(".py").replace("/", ".")] = floor
    return out


def floor_of(module: str, table: Mapping[str, int]) -> int | None:
    """The floor of the longest entry `module` is or is inside."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = table.get(".".join(parts[:n]))
        if found is not None:
            return found
    return None


def modules(table: Mapping[str, int]) -> Iterator[tuple[str, Path]]:
    for top in {name.split(".")[0] for name in table}:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            yield ".".join(parts), path


def imported(module: str, path: Path, root: Path = REPO) -> Iterator[str]:
    """The modules `path` imports, absolute (`from X import y` is X.y when that is a module
    under `root`)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                where = root / sub.replace(".", "/")
                is_module = where.with_suffix(".py").exists() or (where / "__init__.py").exists()
                yield sub if is_module or not target else target


def climbs() -> set[tuple[str, str]]:
    table = floors()
    out = set()
    for module, path in modules(table):
        own = floor_of(module, table)
        assert own is not None
        for target in imported(module, path):
            theirs = floor_of(target, table)
            if theirs is not None and theirs > own:
                out.add((module, target))
    return out


def test_the_layout_names_every_package() -> None:
    table = floors()
    tops = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert tops <= set(table), tops - set(table)
    assert table["settings.load"] == table["cli"] > table["settings"] == 1


def test_no_import_climbs_a_floor() -> None:
    found = climbs()
    assert found - KNOWN_CLIMBS == set(), "imports that climb a floor of docs/architecture.md"
    assert KNOWN_CLIMBS - found == set(), "gone: delete them from KNOWN_CLIMBS and the doc"


def test_climbs_are_found(tmp_path: Path) -> None:
    table = {"low": 1, "high": 3}
    assert floor_of("low.x.y", table) == 1 and floor_of("elsewhere", table) is None
    source = tmp_path / "low" / "mod.py"
    source.parent.mkdir()
    (tmp_path / "high").mkdir()
    (tmp_path / "high" / "x.py").write_text("")
    source.write_text("import high.thing\nfrom .. import high\nfrom . import mod\n"
                      "def f():\n    from high import x, y\n")
    assert list(imported("low.mod", source, tmp_path)) == [
        "high.thing", "high", "low.mod", "high.x", "high"]
