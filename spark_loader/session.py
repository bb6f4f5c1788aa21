"""The long-lived SparkSession the loader uses (local[*] by default; master and conf are
settings, so a cluster works unchanged)."""

from __future__ import annotations

import os
import sys
import threading

from pyspark.sql import SparkSession

from spark_loader.settings import LoaderSettings

#: The loader's JVMs (the driver, and executors on a cluster) only schedule tasks and pipe
#: small results: the rows never leave the Python workers. HotSpot's optimising compiler
#: (C2) was most of their CPU (2.9 of 3.5 CPU seconds over four 1M-row loads), competing
#: with the apply for the cores; C1 alone compiles in a fraction of that. Loader alone,
#: four 1M-row loads in one session: the JVM's CPU 2.2, 0.4-1.3 s per load -> 1.0, 0.22 s;
#: each load 0.2-0.5 s shorter. They go in Spark's `defaultJavaOptions`, which Spark puts
#: before a user's own `extraJavaOptions` (settings' `spark_conf`), so those still apply.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


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
        .config("spark.driver.defaultJavaOptions", JVM_OPTIONS)
        .config("spark.executor.defaultJavaOptions", JVM_OPTIONS)
    )
    for key, value in settings.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


class LazySession:
    """A SparkSession built only when a load first needs one (`get`), or ahead of that in a
    thread (`start`): a run whose deltas are all small enough to be staged by the driver
    (`LoaderSettings.in_driver_max_mib`) never pays the JVM's start (about 3 s and 5 CPU
    seconds here)."""

    def __init__(self, settings: LoaderSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._session: SparkSession | None = None
        self._starting: threading.Thread | None = None
        self._failure: BaseException | None = None

    def start(self) -> None:
        """Begin building the session in a thread; `get` waits for it."""
        with self._lock:
            if self._session is not None or self._starting is not None:
                return
            self._starting = threading.Thread(
                target=self._build_in_thread, name="podd-spark-start", daemon=True
            )
            self._starting.start()

    def _build_in_thread(self) -> None:
        try:
            session = build_session(self.settings)
        except BaseException as exc:  # handed to `get`, which raises it
            self._failure = exc
            return
        self._session = session

    def get(self) -> SparkSession:
        """The session, built now if nobody started it."""
        self.start()
        starting = self._starting
        assert starting is not None
        starting.join()
        if self._failure is not None:
            raise self._failure
        assert self._session is not None
        return self._session

    @property
    def built(self) -> bool:
        return self._session is not None

    def stop(self) -> None:
        """Stop the session if one was built (waiting for one being built)."""
        if self._starting is not None:
            self._starting.join()
        if self._session is not None:
            self._session.stop()
            self._session = None
