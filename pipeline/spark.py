"""A Spark session for the pipeline: embedded ``local[2]`` on loopback by default,
any ``spark://``, ``k8s://`` or ``yarn`` master unchanged."""

from __future__ import annotations

import os
import sys
from typing import Any

DEFAULT_MASTER = "local[2]"


def session(master: str = DEFAULT_MASTER, app: str = "meshgate-pipeline", conf: dict[str, str] | None = None) -> Any:
    """The session, with the ``redis_streams`` data source registered. Under
    ``spark-submit`` (master already set) ``master`` is left to the submitter."""
    # Workers must run this interpreter (it has pyarrow and redis), not a bare python3.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from pipeline.source import register

    builder = SparkSession.builder.appName(app)
    if not os.environ.get("SPARK_ENV_LOADED") and "spark.master" not in (conf or {}):
        builder = builder.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local") or master.startswith("spark://127.") or master.startswith("spark://localhost"):
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
