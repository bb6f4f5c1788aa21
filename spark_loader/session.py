"""The long-lived SparkSession the loader uses (local[*] by default; master and conf are
settings, so a cluster works unchanged)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from spark_loader.settings import LoaderSettings


def build_session(settings: LoaderSettings) -> SparkSession:
    # Executors must run the same interpreter (and so the same `protocol` package).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName("podd-replica-loader")
        .config("spark.ui.enabled", str(settings.spark_ui).lower())
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in settings.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
