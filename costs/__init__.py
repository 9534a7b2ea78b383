"""`silt costs`: object-store request costs of siltstream measured against naive designs.

Holds the workload engine (`measure`), the alternative designs it compares (`designs`: a
seek-based input reader and a per-partition-objects agent, built on the product's
extension points), request prices (`prices`) and the report (`report`). The product never
imports this package; `silt costs` imports it when it runs.
"""

from .designs import DESIGNS, Design, PerPartitionObjectsAgent, RegionReader, SeekInputs
from .measure import DesignResult, Workload, run_costs, s3_endpoint
from .prices import PRICE_TABLES, request_dollars
from .report import as_json, plot, print_table, ratios

__all__ = [
    "DESIGNS",
    "PRICE_TABLES",
    "Design",
    "DesignResult",
    "PerPartitionObjectsAgent",
    "RegionReader",
    "SeekInputs",
    "Workload",
    "as_json",
    "plot",
    "print_table",
    "ratios",
    "request_dollars",
    "run_costs",
    "s3_endpoint",
]
