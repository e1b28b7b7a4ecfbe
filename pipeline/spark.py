"""A Spark session for the pipeline: embedded ``local[2]`` on loopback by default,
any ``spark://``, ``k8s://`` or ``yarn`` master unchanged.

On a cluster the executors' Python workers run the data source's readers (and
the export's functions), so they import ``pipeline`` and ``model``: the session
ships them, zipped from where this process imports them, as a Python file of the
application (``addPyFile``, before the data source is registered). The workers
only need Python and the third-party packages (pyarrow, pandas, redis, msgspec); see
deploy/spark/README.md."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

DEFAULT_MASTER = "local[2]"
# The packages the executors import (the data source, transform, export's functions, the model).
SHIPPED_PACKAGES = ("pipeline", "model")
# Spark setting: "false" to not ship them (they are installed on the workers, or sent with --py-files).
SHIP_CODE = "spark.meshgate.shipCode"
_code_zip: str | None = None


def session(master: str = DEFAULT_MASTER, app: str = "meshgate-pipeline", conf: dict[str, str] | None = None) -> Any:
    """The session, with the ``redis_streams`` and ``meshgate_partials`` data sources registered. Under
    ``spark-submit`` (master already set) ``master`` is left to the submitter."""
    # Workers must run this interpreter (it has pyarrow and redis), not a bare python3.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from pipeline import partials, source

    builder = SparkSession.builder.appName(app)
    if "spark.master" in (conf or {}):
        master = (conf or {})["spark.master"]
    elif os.environ.get("SPARK_ENV_LOADED"):
        master = submitted_master() or master
    else:
        builder = builder.master(master)
    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local"):
        # The JVM only plans batches and moves the tasks' packed rows here: C2's compiling
        # cost more CPU than its faster code saved (per 100,000 entries 1.5 -> 0.9 s).
        settings["spark.driver.extraJavaOptions"] = "-XX:TieredStopAtLevel=1"
    if master.startswith("local") or master.startswith("spark://127.") or master.startswith("spark://localhost"):
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    context = spark.sparkContext
    if not context.master.startswith("local") and context.getConf().get(SHIP_CODE, "true").lower() != "false":
        code = code_zip()
        if Path(code).name not in (context._python_includes or []):
            context.addPyFile(code)  # before register(): the data source carries the includes it was made with
    if context._python_includes:
        _streaming_includes(context._python_includes)
    source.register(spark)
    partials.register(spark)
    return spark


def _streaming_includes(includes: list[str]) -> None:
    """Python files of the application (ours, ``--py-files``) where the driver's
    streaming-source Python worker looks for them. Spark 4 starts that worker with
    the files directory ``<SparkFiles root>/streaming_job`` (PythonStreamingSourceRunner),
    where nothing is fetched, so without this it cannot unpickle the data source
    (ModuleNotFoundError: pipeline) unless the driver's ``PYSPARK_PYTHON`` has
    the code installed."""
    from pyspark import SparkFiles

    root = Path(SparkFiles.getRootDirectory())
    streaming = root / "streaming_job"
    streaming.mkdir(exist_ok=True)
    for name in includes:
        if (root / name).is_file() and not (streaming / name).exists():
            shutil.copyfile(root / name, streaming / name)


def submitted_master() -> str | None:
    """The master ``spark-submit`` was given (its JVM is already running), if any."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's JVM (its gateway), where the settings are
    return SparkConf().get("spark.master", None)


def code_zip() -> str:
    """A zip of ``SHIPPED_PACKAGES`` (their ``.py`` files, as this process imports
    them: an installed wheel or a checkout), made once per process."""
    global _code_zip
    if _code_zip is None:
        directory = tempfile.mkdtemp(prefix="meshgate-pyfiles-")
        atexit.register(shutil.rmtree, directory, True)
        path = Path(directory) / "meshgate-pipeline-code.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for package in SHIPPED_PACKAGES:
                spec = importlib.util.find_spec(package)
                if spec is None or not spec.submodule_search_locations:
                    raise RuntimeError(f"cannot ship the package {package!r}: not importable here")
                root = Path(list(spec.submodule_search_locations)[0])
                for source in sorted(root.rglob("*.py")):
                    archive.write(source, Path(package) / source.relative_to(root))
        _code_zip = str(path)
    return _code_zip
