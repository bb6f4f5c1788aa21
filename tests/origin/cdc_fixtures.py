"""Real parts for the CDC origin's tests: an agent serving datamarts of the CDC schemas, topics
written by the writers, and `podd-cdc` run as a user runs it (a process)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from podd_cdc.cutlog import Cut, CutLog
from protocol.ddl import parse_schema
from protocol.schema import LogicalSchema
from tests.agent.conftest import AgentProcess
from tools.cdc_write.produce import Compression, Landed, produce
from tools.cdc_write.qlik_writer import Written
from tools.cdc_write.source import SourceTable
from tools.cdc_write.tables import dataworks_marketing, qlik_every_type, qlik_marketing

#: The replica's schema for `qlik_marketing()` + `qlik_every_type()`, written out by hand
#: from docs/contracts/CDC.md's type table (the derived DDL must equal it).
QLIK_DDL = """
CREATE TABLE dm.sales (id BIGINT NOT NULL, transaction_date TIMESTAMP, product_code VARCHAR(256),
  product_units BIGINT, store_id BIGINT, description VARCHAR(256), PRIMARY KEY (id))
  DISTRIBUTED BY (id);
CREATE TABLE dm.stores (id BIGINT NOT NULL, category VARCHAR(64), region VARCHAR(64),
  address VARCHAR, opened DATE, PRIMARY KEY (id)) DISTRIBUTED BY (id);
CREATE TABLE dm.agreements (id BIGINT NOT NULL, client_id BIGINT, number VARCHAR(64),
  signature_date DATE, effective_date DATE, closing_date DATE, description VARCHAR,
  PRIMARY KEY (id)) DISTRIBUTED BY (id);
CREATE TABLE dm.all_types (k1 INT32 NOT NULL, k2 VARCHAR(20) NOT NULL, i1 INT32, i2 INT32,
  u1 INT32, u2 INT32, u4 BIGINT, u8 BIGINT, r4 FLOAT, r8 DOUBLE, n10 BIGINT, n30 VARCHAR,
  b BOOLEAN, d DATE, t TIME, ts TIMESTAMP, by VARCHAR, bl VARCHAR, PRIMARY KEY (k1, k2))
  DISTRIBUTED BY (k1, k2);
"""
#: The replica's schema for `dataworks_marketing()`.
DATAWORKS_DDL = """
CREATE TABLE dm.sales (id BIGINT NOT NULL, transaction_date TIMESTAMP, product_code VARCHAR,
  product_units BIGINT, store_id BIGINT, description VARCHAR, paid BOOLEAN, amount DOUBLE,
  PRIMARY KEY (id)) DISTRIBUTED BY (id);
CREATE TABLE dm.stores (id BIGINT NOT NULL, category VARCHAR, region VARCHAR, logo VARCHAR,
  PRIMARY KEY (id)) DISTRIBUTED BY (id);
CREATE TABLE dm.audit_log (alibaba_rds_row_id BIGINT NOT NULL, event VARCHAR, at TIMESTAMP,
  PRIMARY KEY (alibaba_rds_row_id)) DISTRIBUTED BY (alibaba_rds_row_id);
"""


def cdc_schema(fmt: str, datamart: str) -> LogicalSchema:
    return parse_schema(
        (QLIK_DDL if fmt == "qlik" else DATAWORKS_DDL).replace("dm.", f"{datamart}.")
    )


@dataclass
class CdcReplica:
    """One datamart of the agent, fed by a CDC origin with its own state directory."""

    agent: AgentProcess
    schema: LogicalSchema
    fmt: str
    state_dir: Path
    topic: str
    tables: tuple[SourceTable, ...] = ()
    columnar: bool = True  # `--columnar`, the default (Qlik: the cutter on arrays), or not

    @property
    def datamart(self) -> str:
        return self.schema.datamart

    def write(
        self,
        messages: Iterable[Written],
        *,
        compression: Compression = None,
        partitions: int = 4,
        topic: str | None = None,
    ) -> list[Landed]:
        settings = self.agent.topics.settings(self.agent.broker)
        return asyncio.run(
            produce(
                settings,
                [self.agent.broker],
                topic or self.topic,
                partitions,
                messages,
                compression=compression,
            )
        )

    def command(self, *extra: str, topics: Iterable[str] | None = None) -> list[str]:
        schema_file = self.agent.data_dir / f"{self.datamart}.sql"
        flags = [
            sys.executable,
            "-m",
            "podd_cdc.cli",
            "run",
            "--format",
            self.fmt,
            "--datamart",
            self.datamart,
            "--schema",
            str(schema_file),
            "--broker",
            f"kafka://{self.agent.broker}",
            "--state-dir",
            str(self.state_dir),
            "--settle-seconds",
            "0.5",
            "--answer-timeout-seconds",
            "30",
            *self.agent.topics.options(),
        ]
        for topic in topics or [self.topic]:
            flags += ["--topic", topic]
        flags.append("--columnar" if self.columnar else "--no-columnar")
        return [*flags, *extra]

    def run(
        self, *extra: str, topics: Iterable[str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*extra, topics=topics),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cuts(self) -> list[Cut]:
        log = CutLog(self.state_dir, self.datamart)
        return [log.cuts[n] for n in sorted(log.cuts)]


def cdc_agent_fixture(qlik: int, dataworks: int) -> object:
    """A module-scoped agent serving `qlik` datamarts of the Qlik schema and `dataworks` of
    the DataWorks one."""

    @pytest.fixture(scope="module")
    def cdc_agent(
        broker: str, replica_dsn: str, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[AgentProcess]:
        schemas = [cdc_schema("qlik", f"q_{uuid.uuid4().hex[:8]}") for _ in range(qlik)]
        schemas += [cdc_schema("dataworks", f"d_{uuid.uuid4().hex[:8]}") for _ in range(dataworks)]
        process = AgentProcess(
            broker,
            replica_dsn,
            tmp_path_factory.mktemp("cdc-agent"),
            schemas,
            incomplete_timeout=30,
        ).start()
        yield process
        assert process.stop() == 0, process.log_tail()

    return cdc_agent


def replica_for(
    agent: AgentProcess, fmt: str, tmp_path: Path, *, columnar: bool = True
) -> CdcReplica:
    prefix = "q_" if fmt == "qlik" else "d_"
    schema = next(
        s for s in agent.schemas if s.datamart.startswith(prefix) and s.datamart not in agent.taken
    )
    agent.taken.append(schema.datamart)
    tables = (*qlik_marketing(), qlik_every_type()) if fmt == "qlik" else dataworks_marketing()
    topic = f"cdc-{uuid.uuid4().hex[:8]}"
    return CdcReplica(agent, schema, fmt, tmp_path / "state", topic, tables, columnar)
