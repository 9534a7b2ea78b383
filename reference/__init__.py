"""The generated reference sections of docs/: every setting (from the sections `settings.load`
composes) and the Kafka APIs served (from the dispatch table), written between markers
`<!-- reference:NAME -->` and `<!-- /reference:NAME -->` in the page each belongs to.

`python -m reference --write` rewrites them after a setting or an API changes;
`python -m reference --check` (and tests/reference/) fails while a page differs from what
the declarations say. A development tool, not part of the wheel.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.protocol.apis import TABLE
from settings import declared, show
from settings.load import SECTIONS, env_name

REPO = Path(__file__).resolve().parents[1]

# One line per setting whose declaration has no `doc=` yet, by full key. The `agent` section
# and the `metrics.*` declarations (telemetry/config.py) were being edited by another change
# when the reference was introduced: move each line into its declaration's `doc=` and delete
# it here (tests/reference/ fails on a line whose declaration has a doc of its own).
PENDING_DOCS: Mapping[str, str] = {
    "agent.linger.ms": "how long an agent buffers produced records before it writes one object",
    "agent.flush.bytes": "an agent writes its object as soon as it buffers this many bytes",
    "agent.buffer.memory": "bytes of records an agent holds until their flush commits (>="
                           " flush.bytes); a produce finding it full waits",
    "agent.max.block.ms": "how long a produce through the Python API waits for room in"
                          " buffer.memory",
    "agent.compression.type": "the codec of batches the agent builds itself (`silt produce`,"
                              " `Agent.produce`)",
    "agent.topic.refresh.ms": "how long an agent trusts its cached topics before reading them"
                              " again",
    "agent.socket.request.max.bytes": "the largest request frame; a bigger one closes the"
                                      " connection",
    "agent.fetch.cache.bytes": "bytes of segment reads the fetch path keeps, shared by"
                               " consumers",
    "agent.auto.create.topics.enable": "whether a Metadata request that allows it creates"
                                       " unknown topics",
    "agent.num.partitions": "partitions of topics created without a count (auto-created,"
                            " CreateTopics with -1)",
    "agent.group.min.session.timeout.ms": "the shortest session timeout a JoinGroup may ask"
                                          " for",
    "agent.group.max.session.timeout.ms": "the longest session timeout a JoinGroup may ask"
                                          " for",
    "agent.group.initial.rebalance.delay.ms": "how long an empty group's first rebalance"
                                              " waits for more members",
    "agent.offset.metadata.max.bytes": "the longest metadata string an OffsetCommit may"
                                       " store",
    "agent.metrics.listeners": "where `silt agent` serves /metrics, /healthz, /readyz (empty:"
                               " no port)",
    "agent.metrics.refresh.interval.ms": "how often the agent computes its groups' lag"
                                         " gauges",
    "compactor.metrics.listeners": "where `silt compactor` serves /metrics, /healthz, /readyz"
                                   " (empty: no port)",
}

START, END = "<!-- reference:{} -->", "<!-- /reference:{} -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def setting_doc(full_key: str, doc: str) -> str:
    """A setting's one line: its declaration's `doc`, else its pending line."""
    return doc or PENDING_DOCS.get(full_key, "")


def settings_table() -> str:
    """Every declared setting, section by section: key, default, allowed values, environment
    variable, what it does."""
    out: list[str] = []
    for name, cls in SECTIONS.items():
        defaults = dict(cls().items())
        out += [f"### `{name}`", "",
                "| key | default | allowed | env | what |", "|---|---|---|---|---|"]
        for key, (_, spec) in declared(cls).items():
            full = f"{name}.{key}"
            out.append(f"| `{full}` | `{_cell(show(defaults[key]))}` | {_cell(spec.allowed)}"
                       f" | `{env_name(cls, spec)}` | {_cell(setting_doc(full, spec.doc))} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def api_name(module_name: str) -> str:
    """Kafka's name of an API from its handler module's (`join_group` -> `JoinGroup`)."""
    return "".join(part.capitalize() for part in module_name.split("_"))


def apis_table() -> str:
    """The APIs the agent serves, by key, with the versions ApiVersions advertises."""
    rows = ["| API | key | versions |", "|---|---|---|"]
    for key in sorted(TABLE):
        api = TABLE[key]
        versions = (str(api.min_version) if api.min_version == api.max_version
                    else f"{api.min_version}-{api.max_version}")
        rows.append(f"| {api_name(api.name)} | {key} | {versions} |")
    return "\n".join(rows)


@dataclass(frozen=True, slots=True)
class Section:
    """One generated section: its marker name, the page holding it, how it is rendered."""

    name: str
    page: str  # relative to the repository
    render: Callable[[], str]


SECTIONS_GENERATED = (
    Section("settings", "docs/settings.md", settings_table),
    Section("apis", "docs/architecture.md", apis_table),
)


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(START.format(name)) + r"\n.*?" + re.escape(END.format(name)),
                      re.DOTALL)


def current(text: str, name: str) -> str | None:
    """What `text` holds between `name`'s markers (None: no markers)."""
    match = _pattern(name).search(text)
    if match is None:
        return None
    return match.group(0)[len(START.format(name)) + 1:-len(END.format(name))].rstrip("\n")


def replace(text: str, name: str, block: str) -> str:
    """`text` with `block` between `name`'s markers; ValueError if it has none."""
    if _pattern(name).search(text) is None:
        raise ValueError(f"no {START.format(name)} ... {END.format(name)} markers")
    new = f"{START.format(name)}\n{block}\n{END.format(name)}"
    return _pattern(name).sub(lambda _: new, text, count=1)


def stale(root: Path = REPO) -> list[str]:
    """The generated sections whose page differs from the declarations ("page: name")."""
    return [f"{s.page}: {s.name}" for s in SECTIONS_GENERATED
            if current((root / s.page).read_text(), s.name) != s.render()]


def write(root: Path = REPO) -> list[str]:
    """Rewrite every generated section; the pages changed."""
    changed = []
    for s in SECTIONS_GENERATED:
        path = root / s.page
        text = path.read_text()
        new = replace(text, s.name, s.render())
        if new != text:
            path.write_text(new)
            changed.append(s.page)
    return changed
