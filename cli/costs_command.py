"""`silt costs`: object-store request costs of siltstream against two naive designs (the
`costs/` package, imported only when the command runs: it is not part of the product)."""

from __future__ import annotations

import sys

import click

from .context import one_line_errors
from .output import Output, interactive, json_option, progress


@click.command("costs")
@click.option("--partitions", default="1,10,100,1000", show_default=True,
              help="Comma-separated partitions-per-file sweep.")
@click.option("--files", "files_per_round", type=click.IntRange(min=1), default=4,
              show_default=True, help="Agent flushes (objects) per round.")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="Produce-then-compact rounds.")
@click.option("--records-per-partition", type=click.IntRange(min=1), default=2,
              show_default=True, help="Records per partition per flush.")
@click.option("--record-bytes", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--keys", type=click.IntRange(min=1), default=50, show_default=True,
              help="Key cardinality per compacted partition.")
@click.option("--compacted-share", type=click.FloatRange(0, 1), default=0.5,
              show_default=True, help="Share of partitions on a compacted topic.")
@click.option("--flushes-per-second", type=click.FloatRange(min=0.001), default=4.0,
              show_default=True, help="Ingest rate used for the per-day dollars.")
@click.option("--prices", "price_table", default="s3-standard", show_default=True,
              help="Request price table; an unknown name lists the known ones.")
@click.option("--put-price", type=float, default=None,
              help="Override: dollars per 1,000 PUT/COPY/POST/LIST requests.")
@click.option("--get-price", type=float, default=None,
              help="Override: dollars per 1,000 GET/HEAD requests.")
@json_option(indent=2)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG chart (matplotlib).")
@one_line_errors
def costs(partitions: str, files_per_round: int, rounds: int, records_per_partition: int,
          record_bytes: int, keys: int, compacted_share: float, flushes_per_second: float,
          price_table: str, put_price: float | None, get_price: float | None, out: Output,
          plot_path: str | None) -> None:
    """Measure object-store request costs of siltstream against two naive designs.

    Runs against AWS_ENDPOINT_URL (LocalStack, MinIO, AWS) or a moto server it starts on
    127.0.0.1, and cross-checks client counts with the server's when it started it.
    """
    # Lazily: the cost-comparison tool and its naive designs are not part of the product.
    from costs import PRICE_TABLES, Workload, plot, print_table, run_costs
    from costs import as_json as costs_json

    try:
        sweep = tuple(int(p) for p in partitions.split(",") if p.strip())
    except ValueError:
        raise click.BadParameter(f"{partitions!r} is not a comma-separated list of integers",
                                 param_hint="--partitions") from None
    if not sweep or min(sweep) < 1:
        raise click.BadParameter("partition counts must be >= 1", param_hint="--partitions")
    if price_table not in PRICE_TABLES:
        raise click.BadParameter(f"{price_table!r} is not one of "
                                 f"{', '.join(sorted(PRICE_TABLES))}", param_hint="--prices")
    w = Workload(sweep, files_per_round, rounds, records_per_partition, record_bytes, keys,
                 compacted_share, flushes_per_second)
    prices = dict(PRICE_TABLES[price_table])
    if put_price is not None:
        prices["write"] = put_price / 1000
    if get_price is not None:
        prices["read"] = get_price / 1000
    with progress("measuring") as advance:
        def step(msg: str) -> None:
            advance(1)
            if not interactive():  # a log, not a terminal: one line per step
                click.echo(f"silt costs: measuring {msg}", err=True)
        results = run_costs(w, prices, step)
    report = costs_json(w, price_table, results)
    report["prices_per_request"] = prices
    if plot_path:
        plot(results, plot_path)

    def table(_: object) -> tuple[str, ...]:
        print_table(results, report)  # a rich table, printed by the costs package
        return ()

    out.result(report, table)
    if not report["client_server_agree"]:
        click.echo("silt: client and server request counts disagree", err=True)
        sys.exit(1)
