"""What `silt costs` shows: dollar ratios, the JSON report, the chart and the table."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from .designs import DESIGNS
from .measure import DesignResult, Workload
from .prices import PRICE_TABLES, writes


def ratios(results: Sequence[DesignResult]) -> dict[str, float]:
    """Request dollars of each design relative to siltstream, at the largest partition count."""
    top = max(r.partitions for r in results)
    at_top = {r.design: r.dollars for r in results if r.partitions == top}
    base = at_top["siltstream"] or 1e-12
    return {d: round(v / base, 2) for d, v in at_top.items()}


def as_json(w: Workload, price_table: str, results: Sequence[DesignResult]) -> dict[str, Any]:
    """The whole report as JSON-able data."""
    return {
        "workload": asdict(w),
        "price_table": price_table,
        "prices_per_request": PRICE_TABLES.get(price_table),
        "results": [asdict(r) for r in results],
        "dollar_ratio_vs_siltstream_at_max_partitions": ratios(results),
        "client_server_agree": all(r.server is None or r.server == r.client for r in results),
    }


def plot(results: Sequence[DesignResult], path: str) -> None:
    """Compaction GETs and request dollars vs partitions per file, one line per design."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for design in DESIGNS:
        rows = sorted((r for r in results if r.design == design), key=lambda r: r.partitions)
        xs = [r.partitions for r in rows]
        ax1.plot(xs, [max(r.compaction_gets, 1) for r in rows], marker="o", label=design)
        ax2.plot(xs, [r.dollars_per_day for r in rows], marker="o", label=design)
    for ax, title, ylabel in ((ax1, "GET requests in compaction", "GETs"),
                              (ax2, "Request dollars per day", "USD / day")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("partitions per file")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(results: Sequence[DesignResult], report: Mapping[str, Any]) -> None:
    """The results as a table on the terminal, then the dollar ratios."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Object-store requests per workload run")
    for col in ("partitions/file", "design", "PUT-class", "GET", "compaction GETs",
                "GETs/input file", "$ per run", "$ per day", "server agrees"):
        table.add_column(col, justify="right" if col != "design" else "left")
    for r in results:
        agrees = "n/a" if r.server is None else ("yes" if r.server == r.client else "NO")
        table.add_row(str(r.partitions), r.design, f"{writes(r.client):,}",
                      f"{r.client.get('GET', 0):,}", f"{r.compaction_gets:,}",
                      f"{r.gets_per_input_file:g}", f"{r.dollars:.6f}",
                      f"{r.dollars_per_day:,.2f}", agrees)
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(table)
    ratios = report["dollar_ratio_vs_siltstream_at_max_partitions"]
    top = max(r.partitions for r in results)
    console.print(f"request dollars at {top} partitions per file, relative to siltstream: "
                  + ", ".join(f"{d} x{v:g}" for d, v in ratios.items()))
