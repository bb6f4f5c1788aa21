"""Fixtures every test layer shares.

`PODD_TEST_REPLICA_DSN` points the tests at an external PostgreSQL instead of the embedded one,
`PODD_TEST_BROKER` at an external Kafka instead of the embedded Tansu,
`PODD_TEST_SPARK_MASTER` at an external Spark cluster instead of a standalone one started here
(its workers must mount the tests' temporary directory at the same path).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from podd_kafka.broker import embedded_broker
from podd_runtime.spark_cluster import StandaloneCluster
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from replica_store.adqm.store import AdqmStore
from replica_store.embedded_pg import EmbeddedPostgres

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files marked `slow` (a minute or more each) first, each file's tests kept
    together and in order: pytest-xdist hands each worker a file at a time in this order,
    so the long ones run while the short ones fill in, not one left running alone at the
    end."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


def spec_dir() -> Path:
    """The team's contracts: ../shared/spec beside the checkout, or $PODD_SPEC_DIR."""
    return Path(os.environ.get("PODD_SPEC_DIR", REPO.parent / "shared" / "spec"))


@pytest.fixture(scope="session")
def spec() -> Path:
    """The team's contracts, for the tests that keep `docs/` equal to them. A clone of the
    project alone has none: those tests skip, and everything else runs from `docs/`."""
    path = spec_dir()
    if not (path / "PROTOCOL.md").is_file():
        pytest.skip(f"the team's contracts are not beside this checkout ({path})")
    return path


@pytest.fixture(scope="session", autouse=True)
def _traversable_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """As root, the embedded PostgreSQL runs as a system user that must enter the tests'
    temporary directories; the product itself never opens a directory above its data
    directory, so the tests open their own (pytest makes them mode 0700)."""
    if os.geteuid() == 0:
        # Up to the system's temp directory: under pytest-xdist each worker's base is one
        # level deeper (`pytest-N/popen-gwK`).
        top = Path(tempfile.gettempdir()).resolve()
        directory = tmp_path_factory.getbasetemp().resolve()
        while top in directory.parents:
            mode = directory.stat().st_mode
            if not mode & 0o001:
                directory.chmod(mode | 0o001)
            directory = directory.parent


@pytest.fixture(scope="session")
def marketing() -> LogicalSchema:
    return parse_schema((REPO / "examples" / "marketing.sql").read_text())


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka bootstrap address: the embedded Tansu, or `PODD_TEST_BROKER`."""
    external = os.environ.get("PODD_TEST_BROKER")
    if external:
        yield external
        return
    with embedded_broker(log_file=tmp_path_factory.mktemp("tansu") / "tansu.log") as address:
        yield address


@pytest.fixture(scope="session")
def replica_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("PODD_TEST_REPLICA_DSN")
    if external:
        yield external
        return
    server = EmbeddedPostgres(tmp_path_factory.mktemp("replica") / "pgdata").start()
    yield server.dsn
    server.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark master URL: one standalone master and one worker (2 cores) from the installed
    pyspark, shared by every test that runs on a cluster; or `PODD_TEST_SPARK_MASTER`."""
    external = os.environ.get("PODD_TEST_SPARK_MASTER")
    if external:
        yield external
        return
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), cores=2) as master:
        yield master


@pytest.fixture(scope="session")
def adqm_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdqmStore]:
    """The embedded ClickHouse (chdb) of this test process: one directory for the whole
    session, since chdb opens one directory per process. Tests take datamarts of their own."""
    store = AdqmStore(f"chdb://{tmp_path_factory.mktemp('chdb')}")
    yield store
    store.close()
