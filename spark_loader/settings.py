"""Loader settings: flags and `PODD_*` environment variables (pydantic-settings)."""

from __future__ import annotations

from pathlib import Path

import structlog
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from podd_runtime.dsn import CLIENT_CHECK_SINCE, server_version, with_session_bounds
from protocol.ocf import OcfLimits
from replica_store.dialect import Dialect
from replica_store.kind import CLICKHOUSE_SCHEMES, StoreKind, embedded_clickhouse_url

log = structlog.get_logger(__name__)


class LoaderSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PODD_", extra="ignore", hide_input_in_errors=True)

    #: The replica database; None starts the embedded PostgreSQL in `data_dir/postgres`.
    replica_dsn: SecretStr | None = None
    #: The statements sent to the replica (`PODD_STORE_DIALECT`): `postgresql`, or `adb`
    #: for an ADB (Greenplum 6/7) cluster; both give the same tables (docs/contracts/REPLICA.md).
    store_dialect: Dialect = Dialect.POSTGRESQL
    #: Which store the replica is (`PODD_STORE`): `postgresql` (ADB too, by `store_dialect`)
    #: or `clickhouse`, in Prostore's ADQM layout (docs/contracts/REPLICA.md, "The ADQM store").
    store: StoreKind = StoreKind.POSTGRESQL
    #: A ClickHouse replica: `chdb:///path` (the embedded engine, one process per
    #: directory) or `clickhouse://user:password@host:8123` (`clickhouses://` for TLS);
    #: None with `store` clickhouse: the embedded engine in `data_dir/clickhouse`.
    clickhouse_url: SecretStr | None = None
    #: Put before every datamart's database name in ClickHouse (such as `env__`).
    clickhouse_database_prefix: str = ""
    #: A ClickHouse cluster's name: the store's DDL runs `ON CLUSTER` it, with shard tables
    #: and `Distributed` ones (docs/contracts/REPLICA.md). Loading a cluster is not built yet: a
    #: load is refused (`LoaderError`), so the DDL can be made and checked.
    clickhouse_cluster: str | None = None
    #: A delta for a ClickHouse replica whose chunk files take at most this many MiB is
    #: decoded in this process, a slice at a time (its rows go through this process to the
    #: store either way); a bigger one by Spark tasks, in waves (`adqm_slices`).
    clickhouse_in_driver_max_mib: float = Field(default=512, ge=0)
    #: After a load, a ClickHouse table with more active parts than this is merged at once
    #: (`OPTIMIZE … FINAL`; 0: never, ClickHouse's background merges only). Reads with
    #: `FINAL` cost more with more parts; correctness never depends on it.
    clickhouse_optimize_parts: int = Field(default=200, ge=0)
    #: Where the process keeps its own files: the embedded databases, staging (unless
    #: `staging_dir`), status.
    data_dir: Path = Path("var")
    #: Staged chunk bodies (and owed answers); default: `data_dir/staging`. The driver and
    #: every executor read it at the same absolute path: on a cluster, a shared mount.
    staging_dir: Path | None = None
    #: Spark's master: `local[N]`, `local[*]`, or `spark://HOST:7077` for a standalone cluster.
    spark_master: str = "local[*]"
    #: Extra Spark configuration, e.g. {"spark.executor.memory": "4g"}.
    spark_conf: dict[str, str] = Field(default_factory=dict)
    #: Serve Spark's web UI (off: nothing listens for it).
    spark_ui: bool = False
    #: A table whose chunk files exceed this many MiB is staged in several key slices, so
    #: the rows a Spark task holds at once stay bounded as deltas grow.
    max_slice_mib: float = Field(default=16, gt=0)
    #: A delta whose chunks decode to at most this many MiB (file sizes where the agent did
    #: not measure) is decoded and staged by the driver itself, with the very function the
    #: executors run: no Spark job (0: always Spark). 8, as `podd-restore`: the CDC origin's
    #: deltas of 100,000 changes (10 tables) fall within it, and staged here a run of
    #: 500,000 Qlik changes cost the agent, its JVM and its Python workers 4.3 CPU s against
    #: 11.9-13.3 s by Spark jobs (issue 46). A prestage has its own bound
    #: (`prestage_in_driver_max_mib`); the 1M-row `delta.in` delta of the bench (about 50
    #: MiB) is staged by Spark.
    in_driver_max_mib: float = Field(default=8.0, ge=0)
    #: The same bound for a prestage (streams, or pieces of streams, staged while their
    #: delta arrives: `spark_loader.prestage`), and what the agent merges hand-overs
    #: waiting together into one prestage up to (`Prestager.merge_max_bytes`). A piece's
    #: Spark job cost about as much as its rows (three 21,000-row pieces: 0.46-0.62 s in a
    #: job, 0.29-0.47 s in the driver), and an interleaved delta's pieces come faster than
    #: jobs could stage them. Not more: the load after the last chunk first waits for the
    #: prestage in flight, and unbounded merges (an unpaced 1M-row delta, a 5 MiB stream
    #: completing every 0.3 s) made it wait 2.5-6.0 s.
    prestage_in_driver_max_mib: float = Field(default=4.0, ge=0)
    #: Whether a load's COMMIT waits for its WAL to reach the disk. Off, a crash of
    #: PostgreSQL itself (not of this process) can lose the last deltas committed, each
    #: whole (tables and registry row together): right only for a caller that told nobody
    #: of them and reads the registry after a crash. `podd-restore` turns it off and makes
    #: its run's end durable (`DeltaLoader.flush_commits`); the agent answers OK after
    #: the commit, so it keeps it on.
    synchronous_commit: bool = True
    #: A bigger delta is staged by this many Spark jobs, each over consecutive tables; the
    #: apply transaction takes a job's tables while the next job stages (1: no overlap).
    staging_jobs: int = Field(default=3, ge=1, le=64)
    #: Most bytes one block / one chunk body may decompress to (more is BAD_CHUNK).
    max_block_decoded_mib: float = Field(default=64, gt=0)
    #: (see `max_block_decoded_mib`)
    max_chunk_decoded_mib: float = Field(default=256, gt=0)
    #: How often a load is tried on transient database or executor errors (a restarted
    #: PostgreSQL is waited for about 15 s with the defaults).
    load_attempts: int = Field(default=6, ge=1)
    #: The first wait between two attempts; each next one doubles.
    retry_backoff_seconds: float = Field(default=0.5, ge=0)
    #: Bounds on every replica connection (seconds).
    db_connect_timeout_seconds: int = Field(default=10, ge=1)
    #: (see `db_connect_timeout_seconds`)
    db_statement_timeout_seconds: float = Field(default=3600, gt=0)
    #: (see `db_connect_timeout_seconds`)
    db_lock_timeout_seconds: float = Field(default=300, gt=0)
    #: (see `db_connect_timeout_seconds`)
    db_keepalives_idle_seconds: int = Field(default=30, ge=1)
    #: While a statement runs, the server checks this often that the client is still
    #: connected, and ends the statement of one that is gone (PostgreSQL 14+; 0: never).
    db_client_check_seconds: float = Field(default=10, ge=0)
    #: After a connection broke during COMMIT: how long to keep reading the registry (with
    #: backoff) to learn whether the delta was applied, before the agent restarts instead.
    commit_settle_seconds: float = Field(default=600, gt=0)
    #: Testing only: every staging task's first attempt fails after its COPY (Spark retries
    #: it; needs spark.task.maxFailures > 1, `local[N,F]` in local mode).
    fault_fail_first_task_attempt: bool = False
    #: At start-up a tiny Spark job checks that executors read the staging directory and
    #: reach the replica; how long it may wait for executors (seconds).
    executor_probe_timeout_seconds: float = Field(default=120, gt=0)
    #: A staging job running longer is cancelled (a hung task, a lock it waits on): the
    #: load is tried again, then answered LOAD_FAILED, instead of stalling for ever.
    spark_job_timeout_seconds: float = Field(default=3600, gt=0)

    @property
    def staging_path(self) -> Path:
        """Absolute: no relative path crosses the driver/executor boundary (an executor's
        working directory is its own)."""
        return (self.staging_dir or self.data_dir / "staging").absolute()

    @property
    def executor_passfile(self) -> Path:
        """The replica's password for the executors (0600), beside the staged chunks they
        already read: the DSN they get carries no password."""
        return self.staging_path / "secrets" / "replica.pgpass"

    @model_validator(mode="after")
    def _clickhouse_by_url(self) -> LoaderSettings:
        """`--replica chdb:///path` or `--replica clickhouse://…` chooses a ClickHouse store."""
        given = self.replica_dsn.get_secret_value() if self.replica_dsn else ""
        if given.split("://", 1)[0] in CLICKHOUSE_SCHEMES:
            self.clickhouse_url, self.replica_dsn = self.replica_dsn, None
            self.store = StoreKind.CLICKHOUSE
        return self

    def clickhouse_replica_url(self) -> str:
        """The ClickHouse replica these settings select (a secret: never log it whole)."""
        if self.clickhouse_url is not None:
            return self.clickhouse_url.get_secret_value()
        return embedded_clickhouse_url(self.data_dir)

    def body_limits(self) -> OcfLimits:
        return OcfLimits(
            max_block_bytes=int(self.max_block_decoded_mib * 2**20),
            max_total_bytes=int(self.max_chunk_decoded_mib * 2**20),
        )

    def session_dsn(self, dsn: str) -> str:
        """`dsn` with this replica's connection bounds (timeouts, keepalives, the client
        check when the server has it: asked once here; a server not reachable now goes
        without the check rather than risk refusing every connection later)."""
        check_ms = int(self.db_client_check_seconds * 1000)
        if check_ms:
            version = server_version(dsn, connect_timeout=self.db_connect_timeout_seconds)
            if version is None or version < CLIENT_CHECK_SINCE:
                log.warning(
                    "the replica's server does not check for gone clients",
                    server_version=version,
                    needs=CLIENT_CHECK_SINCE,
                )
                check_ms = 0
        return with_session_bounds(
            dsn,
            connect_timeout=self.db_connect_timeout_seconds,
            statement_timeout_ms=int(self.db_statement_timeout_seconds * 1000),
            lock_timeout_ms=int(self.db_lock_timeout_seconds * 1000),
            keepalives_idle=self.db_keepalives_idle_seconds,
            client_check_ms=check_ms or None,
        )
