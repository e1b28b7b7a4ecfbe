"""``spark-submit`` entry for the metrics pipeline: the job ``meshgate pipeline``
runs, with the same options (``meshgate pipeline --help``)::

    spark-submit --master spark://spark-master:7077 deploy/spark/meshgate_pipeline.py \\
        --redis redis://redis:6379/0 --checkpoint hdfs:///meshgate/pipeline/checkpoint

The master, deploy mode and Spark settings are spark-submit's; the driver needs
Meshgate installed (``pip install 'meshgate[pipeline]'``). See README.md here."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    from meshgate.cli import main as meshgate

    arguments = list(argv)
    if os.environ.get("SPARK_ENV_LOADED") and not any(a == "--master" or a.startswith("--master=") for a in arguments):
        from pipeline.spark import submitted_master

        master = submitted_master()  # spark-submit's --master: the session uses it; the status records it
        if master:
            arguments = ["--master", master, *arguments]
    return meshgate(["pipeline", *arguments])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
