"""The metrics pipeline: Spark reads the nodes' Redis streams (``source``), rolls
them up per window (``transform`` on Spark, ``rollup`` on the driver) and writes
the rollups back to Redis for the console (``job``), or the history to Parquet
(``export``). Needs the ``pipeline`` extra (pyspark, pyarrow) and Java 17+."""
