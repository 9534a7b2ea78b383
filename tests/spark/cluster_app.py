"""A Spark application for tests/spark/test_cluster.py, run as its own process (pytest's
process holds a local SparkContext already, and a process has one): against a standalone
master, it writes a compacted topic with format("silt"), compacts it with run_on_spark
and reads it back with format("silt"), then prints what it saw as one JSON object.

Usage: python -m tests.spark.cluster_app MASTER STORE_URL METADATA_URL TOPIC SPARK_CONF_JSON
The executors get AWS credentials only as the user would give them explicitly
(`spark.executorEnv.*`); the endpoint and region only through the driver's StoreSpec.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from spark.compaction import run_on_spark
from spark.session import get_session

CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
KEYS = 20
ROUNDS = 2


def _aws_variables(_: object) -> list[str]:
    """The AWS_* variable names an executor's Python worker sees."""
    return sorted(k for k in os.environ if k.startswith("AWS_"))


def main(master: str, store_url: str, metadata_url: str, topic: str,
         spark_conf: dict[str, str]) -> dict[str, Any]:
    conf = {f"spark.executorEnv.{k}": os.environ[k] for k in CREDENTIALS}
    spark = get_session(master, "silt-cluster-test", **spark_conf, **conf)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        seen_env = spark.sparkContext.parallelize([0], 1).map(_aws_variables).collect()[0]
        opts = {"topic": topic, "store": store_url, "metadata": metadata_url}
        for rnd in range(ROUNDS):  # one object per write (one task each)
            rows = [(f"k{i}", f"r{rnd}-{i}") for i in range(KEYS)]
            spark.createDataFrame(rows, "key string, value string").coalesce(1) \
                .write.format("silt").options(**opts).mode("append").save()
        reports = run_on_spark(store_url, metadata_url, everything=True, session=spark)
        after = spark.read.format("silt").options(**opts).load().collect()
        return {
            "executor_aws_variables": seen_env,
            "reports": [r.as_dict() for r in reports],
            "records_after": sorted((r.partition, r.offset, bytes(r.key).decode(),
                                     bytes(r.value).decode()) for r in after),
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    master, store_url, metadata_url, topic, conf = sys.argv[1:6]
    print(json.dumps(main(master, store_url, metadata_url, topic, json.loads(conf))))
