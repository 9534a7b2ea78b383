"""A streaming Spark application for tests/spark/test_stream_spark.py, run as its own process
so that a test can SIGKILL its driver mid-query and start it again on the same checkpoint:
readStream.format("silt") from topic IN to writeStream.format("silt") topic OUT, each output
record carrying its source partition and offset in a header `src` ("partition:offset").

Usage: python -m tests.spark.stream_app MASTER STORE_URL METADATA_URL IN OUT CHECKPOINT
       TRIGGER [SPARK_CONF_JSON]
TRIGGER: `availableNow`, or a processing-time interval such as `500 milliseconds` (then the
query runs until killed). Prints one line per finished batch: `batch <id> <rows>`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from spark.session import get_session

MAX_OFFSETS_PER_TRIGGER = "40"


def main(master: str, store_url: str, metadata_url: str, source: str, target: str,
         checkpoint: str, trigger: str, spark_conf: dict[str, str]) -> None:
    from pyspark.sql import functions as F

    spark = get_session(master, "silt-stream-test", **{"spark.sql.shuffle.partitions": "2",
                                                        **spark_conf})
    spark.sparkContext.setLogLevel("ERROR")
    opts = {"store": store_url, "metadata": metadata_url}
    rows = (spark.readStream.format("silt")
            .options(topic=source, startingOffsets="earliest",
                     maxOffsetsPerTrigger=MAX_OFFSETS_PER_TRIGGER, **opts).load())
    src = F.concat_ws(":", F.col("partition").cast("string"), F.col("offset").cast("string"))
    out = rows.select(
        "key", "value", "partition",
        F.array(F.struct(F.lit("src").alias("key"), src.cast("binary").alias("value")))
        .alias("headers"))
    writer = (out.writeStream.format("silt").options(topic=target, queryId=checkpoint, **opts)
              .option("checkpointLocation", checkpoint))

    def progress(batch: Any) -> None:
        print(f"batch {batch['batchId']} {batch['numInputRows']}", flush=True)

    if trigger == "availableNow":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime=trigger).start()
        seen = -1
        while query.isActive:
            last = query.lastProgress
            if last is not None and last["batchId"] != seen:
                seen = last["batchId"]
                progress(last)
            query.awaitTermination(0.2)
    for p in query.recentProgress:
        progress(p)
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    master, store, metadata, source, target, checkpoint, trigger = sys.argv[1:8]
    conf = json.loads(sys.argv[8]) if len(sys.argv) > 8 else {}
    main(master, store, metadata, source, target, checkpoint, trigger, conf)
