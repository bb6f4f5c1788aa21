"""`replica-agent run` as a child process: the demo, the benchmarks, the chaos run and the
tests all start it here (`start_agent`), and only here.

The child is started as `python -m replica_agent.cli run` with its settings in the
environment (the DSN never on a command line), its schemas written as Prostore DDL files in
its data directory, its output in a log file. It is ready when its metrics page answers: it
serves that page after recovering from staging and before it consumes. It stops with
SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from podd_runtime.errors import AgentChildError
from podd_runtime.ports import free_port
from protocol.schema import LogicalSchema


@dataclass(frozen=True)
class AgentSpec:
    """What a `replica-agent run` child serves, and where it connects."""

    schemas: Sequence[LogicalSchema]
    bootstrap: str
    dsn: str
    data_dir: Path
    group_id: str
    spark_master: str = "local[2]"
    #: More `PODD_*` settings (topics, timeouts, fault injection), over the defaults.
    extra_env: Mapping[str, str] = field(default_factory=dict)


def start_agent(
    spec: AgentSpec, log_path: Path, *, append: bool = True, cwd: Path | None = None
) -> AgentChild:
    """Write the schemas' DDL into the data directory and start the child on a free metrics
    port (not yet ready: `wait_ready`)."""
    spec.data_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    for schema in spec.schemas:
        path = spec.data_dir / f"{schema.datamart}.sql"
        path.write_text(schema.to_ddl())
        files[schema.datamart] = path
    port = free_port()
    env = agent_env(
        files,
        bootstrap=spec.bootstrap,
        dsn=spec.dsn,
        data_dir=spec.data_dir,
        metrics_port=port,
        group_id=spec.group_id,
        spark_master=spec.spark_master,
    )
    env["PYTHONUNBUFFERED"] = "1"  # its log is read while it runs
    env.update(spec.extra_env)
    return AgentChild(env, log_path, port, append=append, cwd=cwd)


def agent_env(
    schema_files: Mapping[str, Path],
    *,
    bootstrap: str,
    dsn: str,
    data_dir: Path,
    metrics_port: int,
    group_id: str,
    spark_master: str,
) -> dict[str, str]:
    """The environment of a `replica-agent run` child serving `schema_files` (by datamart)."""
    return {
        "PODD_DATAMART": ",".join(schema_files),
        "PODD_SCHEMA": ",".join(str(p) for p in schema_files.values()),
        "PODD_BROKER": f"kafka://{bootstrap}",
        "PODD_REPLICA_DSN": dsn,  # in the environment, not on a command line
        "PODD_DATA_DIR": str(data_dir),
        "PODD_METRICS_PORT": str(metrics_port),
        "PODD_GROUP_ID": group_id,
        "PODD_SESSION_TIMEOUT_SECONDS": "6",
        "PODD_SPARK_MASTER": spark_master,
        "PODD_LOG_FORMAT": "json",
    }


def stop_process(process: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """SIGTERM, then SIGKILL after `timeout` seconds; the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return int(process.returncode)


class AgentChild:
    """One running `replica-agent run` child; `env` is added to this process's environment."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_path: Path,
        metrics_port: int,
        *,
        append: bool = True,
        cwd: Path | None = None,
    ) -> None:
        self.log_path = log_path
        self.metrics_port = metrics_port
        with open(log_path, "ab" if append else "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "replica_agent.cli", "run"],
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
            )

    def metrics(self) -> str:
        """The metrics page's text; `OSError` while the agent does not serve it."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            return str(response.read().decode())

    def wait_ready(self, timeout: float = 180) -> None:
        """Until its metrics page answers; `AgentChildError` if it exits or takes too long."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AgentChildError(
                    f"the agent exited with code {self.process.returncode}; see {self.log_path}"
                )
            try:
                self.metrics()
                return
            except (OSError, http.client.HTTPException):
                # Not serving yet; or, in the moment before it binds, another listener on the
                # port (a Spark port the agent's own JVM took) answered with no HTTP at all.
                time.sleep(0.3)
        raise AgentChildError(f"the agent did not come up in {timeout:g} s; see {self.log_path}")

    def kill(self) -> None:
        """`kill -9`: no clean-up of any kind."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self, timeout: float = 60) -> int:
        return stop_process(self.process, timeout)
