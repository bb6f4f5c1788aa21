"""Real parts for the agent tests: a Tansu broker, PostgreSQL, and the agent as a process.

The agent runs as `python -m replica_agent.cli run` (its own Spark, local[2]), so the tests
see what an operator sees, and can `kill -9` it. Each agent gets topics, a consumer group and
a data directory of its own; each test gets datamarts of its own.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from podd_runtime.agent_child import AgentChild, AgentSpec, start_agent
from podd_runtime.errors import AgentChildError
from protocol.schema import LogicalSchema
from tests.agent.kafka_io import Topics


def renamed(schema: LogicalSchema, name: str | None = None) -> LogicalSchema:
    return schema.model_copy(update={"datamart": name or f"a_{uuid.uuid4().hex[:10]}"})


@dataclass
class AgentProcess:
    """One `replica-agent run` process; restartable on the same data directory."""

    broker: str
    dsn: str
    data_dir: Path
    schemas: list[LogicalSchema]
    topics: Topics = field(default_factory=Topics.unique)
    group_id: str = field(default_factory=lambda: f"agent-{uuid.uuid4().hex[:8]}")
    incomplete_timeout: float = 600.0
    extra_env: dict[str, str] = field(default_factory=dict)
    spark_master: str = "local[2]"
    #: Started in data_dir's parent with `PODD_DATA_DIR=<its name>`, as a user typing
    #: `replica-agent run --data-dir var` would.
    relative_data_dir: bool = False
    child: AgentChild | None = None
    metrics_port: int = 0
    starts: int = 0
    taken: list[str] = field(default_factory=list)

    def take(self) -> LogicalSchema:
        """A datamart no test has used yet: each test starts from an empty replica."""
        free = next(s for s in self.schemas if s.datamart not in self.taken)
        self.taken.append(free.datamart)
        return free

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"agent-{self.starts}.log"

    def start(self) -> AgentProcess:
        self.starts += 1
        env = {
            **self.topics.flags(),
            "PODD_INCOMPLETE_TIMEOUT_SECONDS": str(self.incomplete_timeout),
            **self.extra_env,
        }
        cwd = None
        if self.relative_data_dir:
            env["PODD_DATA_DIR"] = self.data_dir.name
            cwd = self.data_dir.parent
        spec = AgentSpec(
            self.schemas,
            self.broker,
            self.dsn,
            self.data_dir,
            self.group_id,
            self.spark_master,
            env,
        )
        self.child = start_agent(spec, self.log_path, append=False, cwd=cwd)
        self.metrics_port = self.child.metrics_port
        try:
            self.child.wait_ready(timeout=120)
        except AgentChildError as exc:
            raise AssertionError(f"{exc}:\n{self.log_tail()}") from None
        return self

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self.child is not None, "the agent was never started"
        return self.child.process

    def metrics(self) -> str:
        assert self.child is not None
        return self.child.metrics()

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self) -> str:
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.data_dir.glob("agent-*.log"))
        )

    def logged(self, event: str, request_id: str) -> bool:
        """Whether this run's log has a line of `event` about transfer `request_id`."""
        needles = (f'"event": "{event}"', f'"requestId": "{request_id}"')
        return any(
            all(n in line for n in needles)
            for line in self.log_path.read_text(errors="replace").splitlines()
        )

    def wait_for_log(self, event: str, request_id: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.logged(event, request_id):
                return
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"the agent exited waiting for {event!r}:\n{self.log_tail()}")
            time.sleep(0.05)
        raise AssertionError(f"no {event!r} in the agent's log:\n{self.log_tail()}")

    def kill(self) -> None:
        assert self.child is not None
        self.child.kill()

    def stop(self) -> int:
        assert self.child is not None
        return self.child.stop()


def agent_fixture(
    datamarts: int, incomplete_timeout: float, extra_env: dict[str, str] | None = None
) -> Any:
    """A module-scoped `agent` fixture: an agent process serving `datamarts` copies of the
    `marketing` schema (see `AgentProcess.take`), with `extra_env` settings; it must stop
    cleanly."""

    @pytest.fixture(scope="module")
    def agent(
        broker: str,
        replica_dsn: str,
        marketing: LogicalSchema,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[AgentProcess]:
        schemas = [renamed(marketing) for _ in range(datamarts)]
        process = AgentProcess(
            broker,
            replica_dsn,
            tmp_path_factory.mktemp("agent"),
            schemas,
            incomplete_timeout=incomplete_timeout,
            extra_env=dict(extra_env or {}),
        ).start()
        yield process
        assert process.stop() == 0, process.log_tail()

    return agent
