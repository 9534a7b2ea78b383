"""docs/'s generated reference sections match the declarations (regenerate them with
`python -m reference --write`), and every setting has its one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.protocol.apis import TABLE
from reference import (
    PENDING_DOCS,
    REPO,
    SECTIONS_GENERATED,
    api_name,
    current,
    replace,
    stale,
    write,
)
from reference.__main__ import main
from settings import declared
from settings.load import SECTIONS


def test_docs_match_the_declarations() -> None:
    assert stale() == [], "docs/ drifted from the declarations: run python -m reference --write"


def test_every_setting_has_one_line() -> None:
    missing = [f"{name}.{key}" for name, cls in SECTIONS.items()
               for key, (_, spec) in declared(cls).items()
               if not spec.doc and f"{name}.{key}" not in PENDING_DOCS]
    assert missing == [], "declare doc= for these settings"


def test_pending_docs_are_only_for_undocumented_declarations() -> None:
    documented = {f"{name}.{key}": spec.doc for name, cls in SECTIONS.items()
                  for key, (_, spec) in declared(cls).items()}
    gone = [key for key in PENDING_DOCS if key not in documented]
    moved = [key for key in PENDING_DOCS if documented.get(key)]
    assert gone == [] and moved == [], "delete these PENDING_DOCS lines"


def test_every_key_and_api_is_listed() -> None:
    settings_page = (REPO / "docs/settings.md").read_text()
    for name, cls in SECTIONS.items():
        for key in declared(cls):
            assert f"| `{name}.{key}` |" in settings_page
    apis_page = (REPO / "docs/architecture.md").read_text()
    for api in TABLE.values():
        assert f"| {api_name(api.name)} | {api.key} | {api.min_version}" in apis_page


def test_write_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for s in SECTIONS_GENERATED:
        page = tmp_path / s.page
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(replace((REPO / s.page).read_text(), s.name, "stale"))
    assert stale(tmp_path) == [f"{s.page}: {s.name}" for s in SECTIONS_GENERATED]
    assert sorted(write(tmp_path)) == sorted(s.page for s in SECTIONS_GENERATED)
    assert stale(tmp_path) == [] and write(tmp_path) == []
    for s in SECTIONS_GENERATED:
        assert current((tmp_path / s.page).read_text(), s.name) == s.render()
    assert main(["--check"]) == 0


def test_markers_must_exist() -> None:
    with pytest.raises(ValueError, match="reference:apis"):
        replace("no markers here", "apis", "x")
    assert current("no markers here", "apis") is None
