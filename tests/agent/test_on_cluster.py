"""The agent with `--spark-master spark://…`: its loads run on a standalone Spark cluster.

The executors run in the worker's own JVM and working directory. The agent is started as a
user would start it, `--data-dir` relative to its own working directory: nothing relative
may reach an executor. The wire-level scenarios of `test_integration` run here unchanged.
The start-up probe refuses clusters whose executors cannot do a load, before consuming.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from podd_runtime.agent_child import AgentSpec, start_agent
from podd_runtime.spark_cluster import StandaloneCluster
from protocol.exit_codes import ExitCode
from protocol.schema import LogicalSchema
from tests.agent import test_integration as wire
from tests.agent.conftest import AgentProcess, renamed

pytestmark = pytest.mark.slow

# The same scenarios as in local mode, collected here with this module's `agent` fixture.
test_several_deltas_on_the_cluster = (
    wire.test_several_deltas_chunks_twice_shuffled_interleaved_with_empty_tables
)
test_every_rejection_on_the_cluster = (
    wire.test_every_rejection_is_answered_and_leaves_the_replica_unchanged
)
test_an_incomplete_transfer_on_the_cluster = (
    wire.test_an_incomplete_transfer_is_reported_then_completed_by_its_missing_chunks
)
test_a_resent_delta_on_the_cluster = (
    wire.test_a_resent_applied_delta_is_answered_with_its_stored_result
)


@pytest.fixture(scope="module")
def agent(
    broker: str,
    replica_dsn: str,
    marketing: LogicalSchema,
    spark_cluster: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[AgentProcess]:
    process = AgentProcess(
        broker,
        replica_dsn,
        tmp_path_factory.mktemp("cluster-agent") / "var",
        [renamed(marketing) for _ in range(4)],
        incomplete_timeout=6,
        spark_master=spark_cluster,
        relative_data_dir=True,
        extra_env={"PODD_IN_DRIVER_MAX_MIB": "0"},  # every delta, however small, on the cluster
    ).start()
    yield process
    assert process.stop() == 0, process.log_tail()


@pytest.fixture
def schema(agent: AgentProcess) -> LogicalSchema:
    return agent.take()


def test_the_agent_writes_nothing_in_its_working_directory_but_its_data_dir(
    agent: AgentProcess,
) -> None:
    working_directory = agent.data_dir.parent
    assert sorted(p.name for p in working_directory.iterdir()) == [agent.data_dir.name]
    assert (agent.data_dir / "faust").is_dir()


def _refused_start(
    master: str,
    broker: str,
    dsn: str,
    marketing: LogicalSchema,
    data_dir: Path,
    probe_timeout: float,
) -> str:
    """Start an agent on `master`: it must exit 2 before consuming; its log."""
    spec = AgentSpec(
        [marketing],
        broker,
        dsn,
        data_dir,
        f"refused-{data_dir.name}",
        master,
        {"PODD_EXECUTOR_PROBE_TIMEOUT_SECONDS": f"{probe_timeout:g}"},
    )
    child = start_agent(spec, data_dir / "agent.log")
    assert child.process.wait(180) == ExitCode.CANNOT_RUN, (data_dir / "agent.log").read_text()
    log = (data_dir / "agent.log").read_text()
    assert "agent cannot start" in log
    assert "agent starting" not in log  # refused before Faust consumed anything
    return log


def test_a_master_without_executors_is_refused_at_start(
    broker: str, replica_dsn: str, marketing: LogicalSchema, tmp_path: Path
) -> None:
    with StandaloneCluster(tmp_path / "lonely", workers=0) as master:
        log = _refused_start(master, broker, replica_dsn, marketing, tmp_path / "var", 8)
    assert "no executor ran the start-up probe within 8 s" in log


def _can_hide_mounts() -> bool:
    if shutil.which("unshare") is None or sys.platform != "linux":
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _can_hide_mounts(), reason="needs mount namespaces (unshare -m)")
def test_a_worker_without_the_staging_mount_is_refused_at_start(
    broker: str, replica_dsn: str, marketing: LogicalSchema, tmp_path: Path
) -> None:
    # The worker sees an empty directory where the agent's staging directory is: a worker
    # started without the shared volume.
    data_dir = tmp_path / "var"
    spool = data_dir / "staging"
    spool.mkdir(parents=True)
    hide = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"', str(spool)]
    with StandaloneCluster(tmp_path / "unshared", worker_wrapper=hide) as master:
        # Executors do start here: a slow machine must not turn this into a probe timeout.
        log = _refused_start(master, broker, replica_dsn, marketing, data_dir, 120)
    assert f"cannot read the staging directory {spool}" in log
    assert "mount it at the same absolute path" in log
