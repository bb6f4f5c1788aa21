"""Real parts for the loader tests: a SparkSession (local, or on the standalone cluster of
../conftest) and PostgreSQL (../conftest).

A module whose tests also run on the cluster, and with staging in the driver, says so with
`RUN_ON_CLUSTER = True`.

A process holds one SparkContext: `SparkSessions` keeps the current one and starts the other
kind only when a test asks for it (pytest runs a module's tests grouped by that parameter).
Every test gets datamarts of its own, so tests never see each other's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from protocol.schema import LogicalSchema
from replica_store.delta_transaction import Commit
from replica_store.dialect import Dialect
from replica_store.store import ReplicaStore
from spark_loader.loader import BetweenTables, DeltaLoader
from spark_loader.session import build_session
from spark_loader.settings import LoaderSettings

NewLoader = Callable[..., DeltaLoader]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests of a `RUN_ON_CLUSTER` module that use Spark run in local mode, on the cluster and
    with staging in the driver; every test of a loader runs with both dialects' statements
    (docs/contracts/REPLICA.md), except the `adb` dialect on the cluster: where Spark runs changes
    no statement the store sends (CI time)."""
    dialects = "store_dialect" in metafunc.fixturenames
    on_cluster = getattr(metafunc.module, "RUN_ON_CLUSTER", False)
    if on_cluster and "spark_where" in metafunc.fixturenames:
        places = ["local", "cluster", "driver"]
        if not dialects:
            metafunc.parametrize("spark_where", places, indirect=True, scope="module")
            return
        combinations = [
            (where, dialect)
            for where in places
            for dialect in Dialect
            if not (where == "cluster" and dialect is Dialect.ADB)
        ]
        metafunc.parametrize(
            ("spark_where", "store_dialect"), combinations, indirect=True, scope="module"
        )
    elif dialects:
        metafunc.parametrize("store_dialect", list(Dialect), indirect=True, scope="module")


class SparkSessions:
    """The one SparkSession of this process, rebuilt when a test wants the other kind."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.request = request
        self.where: str | None = None
        self.session: SparkSession | None = None

    def get(self, where: str) -> SparkSession:
        if where != self.where or self.session is None:
            self.close()
            # local[2,3]: failed tasks are tried again, up to 3 times, as on a cluster.
            master = "local[2,3]"
            if where == "cluster":
                master = self.request.getfixturevalue("spark_cluster")
            self.session = build_session(LoaderSettings(spark_master=master))
            self.where = where
        return self.session

    def close(self) -> None:
        if self.session is not None:
            self.session.stop()
            self.session = None


@pytest.fixture(scope="session")
def spark_sessions(request: pytest.FixtureRequest) -> Iterator[SparkSessions]:
    sessions = SparkSessions(request)
    yield sessions
    sessions.close()


@pytest.fixture(scope="module")
def store_dialect(request: pytest.FixtureRequest) -> Dialect:
    return Dialect(getattr(request, "param", Dialect.POSTGRESQL))


@pytest.fixture(scope="module")
def spark_where(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "local"))


@pytest.fixture
def spark(spark_sessions: SparkSessions, spark_where: str) -> SparkSession:
    return spark_sessions.get("cluster" if spark_where == "cluster" else "local")


def unique(schema: LogicalSchema) -> LogicalSchema:
    """The same tables under a datamart name no other test uses."""
    return schema.model_copy(update={"datamart": f"t_{uuid.uuid4().hex[:10]}"})


@pytest.fixture
def new_loader(
    replica_dsn: str,
    spark: SparkSession,
    spark_where: str,
    store_dialect: Dialect,
    tmp_path: Path,
) -> NewLoader:
    """Loaders whose staging runs in Spark (local or cluster: every delta, however small),
    or in the driver ("driver": every delta, however large): one slice function, two
    places to run it, the same tests."""

    def make(
        schema: LogicalSchema,
        *,
        attempts: int = 2,
        between_tables: BetweenTables | None = None,
        max_slice_mib: float = 16,
        commit: Commit | None = None,
        fail_first_attempt: bool = False,
        staging_jobs: int = 3,
    ) -> DeltaLoader:
        settings = LoaderSettings(
            load_attempts=attempts,
            retry_backoff_seconds=0.05,
            max_slice_mib=max_slice_mib,
            data_dir=tmp_path / "var",
            staging_dir=tmp_path / "staging",
            fault_fail_first_task_attempt=fail_first_attempt,
            in_driver_max_mib=2**20 if spark_where == "driver" else 0,
            staging_jobs=staging_jobs,
        )
        loader = DeltaLoader(
            ReplicaStore(replica_dsn, store_dialect),
            spark,
            settings,
            between_tables=between_tables,
        )
        if commit is not None:
            loader.commit = commit
        loader.register(schema)
        return loader

    return make


@pytest.fixture
def staging_root(tmp_path: Path) -> Path:
    return tmp_path / "staging"
