"""Spark integration: compaction jobs as Spark tasks, and topics as DataFrames
(`spark.read.format("silt")`, `df.write.format("silt")`). Needs `siltstream[spark]`."""

from .compaction import run_on_spark
from .datasource import SiltDataSource, register

__all__ = ["SiltDataSource", "register", "run_on_spark"]
