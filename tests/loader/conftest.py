"""Real parts for the loader tests: one SparkSession per test session (PostgreSQL: ../conftest).

Every test gets datamarts of its own, so tests never see each other's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from protocol.schema import LogicalSchema
from spark_loader.loader import BetweenTables, Commit, DeltaLoader
from spark_loader.session import build_session
from spark_loader.settings import LoaderSettings
from spark_loader.store import ReplicaStore

NewLoader = Callable[..., DeltaLoader]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # local[2,3]: failed tasks are tried again, up to 3 times, as on a cluster.
    session = build_session(LoaderSettings(spark_master="local[2,3]"))
    yield session
    session.stop()


def unique(schema: LogicalSchema) -> LogicalSchema:
    """The same tables under a datamart name no other test uses."""
    return schema.model_copy(update={"datamart": f"t_{uuid.uuid4().hex[:10]}"})


@pytest.fixture
def new_loader(replica_dsn: str, spark: SparkSession, tmp_path: Path) -> NewLoader:
    def make(
        schema: LogicalSchema,
        *,
        attempts: int = 2,
        between_tables: BetweenTables | None = None,
        max_slice_mib: float = 16,
        commit: Commit | None = None,
        fail_first_attempt: bool = False,
    ) -> DeltaLoader:
        settings = LoaderSettings(
            load_attempts=attempts,
            retry_backoff_seconds=0.05,
            max_slice_mib=max_slice_mib,
            data_dir=tmp_path / "var",
            fault_fail_first_task_attempt=fail_first_attempt,
        )
        loader = DeltaLoader(
            ReplicaStore(replica_dsn), spark, settings, between_tables=between_tables
        )
        if commit is not None:
            loader.commit = commit
        loader.register(schema)
        return loader

    return make


@pytest.fixture
def staging_root(tmp_path: Path) -> Path:
    return tmp_path / "staging"
