"""A SparkSession set up for siltstream: workers run this interpreter (so they import
siltstream), the data source is registered, and the driver binds to 127.0.0.1 by default.

Executors get the store's endpoint, region and addressing style from the driver (see
`objectstore.StoreSpec`), never its credentials: those come from each executor's AWS chain
or, set explicitly, from `spark.executorEnv.*` (e.g. `spark.executorEnv.AWS_PROFILE`)."""

from __future__ import annotations

import os
import sys
from typing import Any

ENV_PYSPARK_PYTHON = "PYSPARK_PYTHON"
ENV_SPARK_LOCAL_IP = "SPARK_LOCAL_IP"


def get_session(master: str | None = None, app_name: str = "siltstream", **conf: str) -> Any:
    """Get or create a SparkSession with the `silt` data source registered; `conf`: Spark
    settings, over the defaults (no web UI, no console progress bar)."""
    os.environ.setdefault(ENV_PYSPARK_PYTHON, sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault(ENV_SPARK_LOCAL_IP, "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    defaults = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    from .datasource import register

    register(session)
    return session
