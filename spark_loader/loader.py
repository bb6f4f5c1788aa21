"""Apply a complete staged transfer to the replica: the loader's one job.

Steps of a load, each numbered in the logs, all under the datamart's advisory lock:
1. already applied? Return the stored result (same date) or refuse (`DELTA_CONFLICT`);
2. in order? The delta must be the one the registry expects, and later than the last;
3. empty its staging tables, then stage them, a few Spark jobs over consecutive tables:
   each decodes its slices' chunks, keeps the last row per key and COPYs into staging (a
   small delta: the driver runs the same slice function itself for every table, no job);
4. in ONE transaction: apply each table as soon as its job has staged it, while the next
   job stages (`staging_steps`, `run_ahead`), insert the registry row, commit.
Transient failures (lost connections, serialisation failures, executor errors) retry the
load with backoff and end as `LOAD_FAILED`; row errors end as `SCHEMA_MISMATCH`/`BAD_CHUNK`.
A connection lost during COMMIT is resolved by reading the registry before anything else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from datetime import UTC
from functools import partial
from typing import Any

import psycopg
import structlog
from pyspark.sql import SparkSession

from podd_runtime.dsn import with_passfile
from protocol.apply_model import TableCounts
from protocol.errors import ErrorCode, ProtocolError
from protocol.schema import LogicalSchema, Table
from protocol.sequence import AppliedDelta, check_sequence
from spark_loader.apply_sql import table_apply_sql
from spark_loader.connections import LoaderConnections, Session
from spark_loader.errors import (
    CommitStateUnknownError,
    LoaderError,
    LoadFailedError,
    TransientLoadError,
)
from spark_loader.executor_probe import probe_executors
from spark_loader.run_ahead import run_ahead
from spark_loader.settings import LoaderSettings
from spark_loader.staging_steps import staging_steps
from spark_loader.store import (
    Datamart,
    RegistryEntry,
    ReplicaStore,
    encode_counts,
    registry_entry,
)
from spark_loader.store_sql import META_SCHEMA, datamart_lock_key, q
from spark_loader.transfer import StagedTransfer

log = structlog.get_logger("spark_loader")

#: Called inside the apply transaction after each table: a seam for failure-injection tests.
BetweenTables = Callable[[psycopg.Connection, str], None]
#: Commits the apply transaction (a seam for tests of a connection lost during COMMIT).
Commit = Callable[[psycopg.Connection], None]


def _commit(conn: psycopg.Connection) -> None:
    conn.commit()


@dataclass(frozen=True)
class LoadResult(RegistryEntry):
    """The registry entry of the applied delta, and whether this load found it applied."""

    already_applied: bool = False

    @classmethod
    def from_registry(cls, entry: RegistryEntry, *, already_applied: bool) -> LoadResult:
        values = {f.name: getattr(entry, f.name) for f in fields(RegistryEntry)}
        return cls(**values, already_applied=already_applied)


#: Staging tables with fewer rows are not analysed (2 ms each). Without their statistics,
#: and with t_actual's lagging behind its growth (autovacuum analyses after 10% changed, at
#: most once a minute), the planner can hash-join a few staged keys against a sequential
#: scan of all of t_actual: in a catch-up, 20 ms per table after 150,000 rows, growing with
#: the table. So their apply may only look keys up in t_actual's primary-key index
#: (`KEYED_LOOKUP`): at most this many index probes, whatever the statistics say.
ANALYZE_MIN_ROWS = 10_000
#: For a small staging table: no hash or merge join, inside the apply transaction only.
KEYED_LOOKUP = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
#: Back to the session's own planner settings for a big (analysed) staging table.
PLANNER_DEFAULT = "SET LOCAL enable_hashjoin TO DEFAULT; SET LOCAL enable_mergejoin TO DEFAULT"
#: ANALYZE samples 300 rows per unit of target (PostgreSQL's default target, 100: 30,000
#: rows). The apply's plans need little more than the size and that keys are distinct.
ANALYZE_STATISTICS_TARGET = 10


class DeltaLoader:
    """Loads staged transfers of the registered datamarts into the replica."""

    def __init__(
        self,
        store: ReplicaStore,
        spark: SparkSession,
        settings: LoaderSettings | None = None,
        *,
        between_tables: BetweenTables | None = None,
        commit: Commit = _commit,
    ) -> None:
        self.store = store
        self.spark = spark
        self.settings = settings or LoaderSettings()
        self.between_tables = between_tables
        self.commit = commit
        self._executor_dsn_cache: str | None = None
        self.connections = LoaderConnections(store.dsn)
        self._datamarts: dict[str, Datamart] = {}
        self._apply_started = 0.0  # when the last load's apply transaction began

    def executor_dsn(self) -> str:
        """What the executors connect with: the DSN without its password, which they read
        from a 0600 passfile in the staging directory (Spark ships closures in the clear)."""
        if self._executor_dsn_cache is None:
            passfile = self.settings.executor_passfile
            self._executor_dsn_cache = with_passfile(self.store.dsn, passfile)
        return self._executor_dsn_cache

    def close(self) -> None:
        """Close the connections kept between loads."""
        self.connections.close()

    def probe_executors(self) -> None:
        """Before the first load: the executors read the staging directory and reach the
        replica, or `ExecutorProbeError` says which of them cannot."""
        probe_executors(
            self.spark,
            self.settings.staging_path,
            self.executor_dsn(),
            timeout=self.settings.executor_probe_timeout_seconds,
        )

    def datamart(self, name: str) -> Datamart | None:
        """The registered datamart of that name (None: not served)."""
        return self._datamarts.get(name)

    def register(self, schema: LogicalSchema) -> Datamart:
        """Create or check the datamart's store; loads of it are accepted from now on."""
        datamart = self.store.ensure(schema)
        self._datamarts[schema.datamart] = datamart
        return datamart

    def load(self, transfer: StagedTransfer) -> LoadResult:
        manifest = transfer.manifest
        datamart = self._datamarts.get(manifest.datamart)
        if datamart is None:
            raise ProtocolError(
                f"datamart {manifest.datamart} is not served", code=ErrorCode.UNKNOWN_DATAMART
            )
        bound = log.bind(
            datamart=manifest.datamart, deltaNum=manifest.delta_num, requestId=manifest.request_id
        )
        tables = [datamart.schema.table(s.table_name) for s in manifest.streams]
        last_error = ""
        for attempt in range(1, self.settings.load_attempts + 1):
            try:
                return self._attempt(datamart, transfer, tables, bound)
            except TransientLoadError as exc:
                last_error = str(exc)
                bound.warning("load attempt failed", attempt=attempt, error=last_error)
                if attempt < self.settings.load_attempts:
                    time.sleep(self.settings.retry_backoff_seconds * 2 ** (attempt - 1))
        raise LoadFailedError(
            f"delta {manifest.delta_num}: the replica store refused the load after "
            f"{self.settings.load_attempts} attempts: {last_error}"
        )

    # --- steps ---------------------------------------------------------------------------
    def verify_sequence(
        self, conn: psycopg.Connection, transfer: StagedTransfer
    ) -> RegistryEntry | None:
        """Steps 1-2: the stored entry of an applied delta, None for the expected one."""
        manifest = transfer.manifest
        name, number = manifest.datamart, manifest.delta_num
        stored = registry_entry(conn, name, number, exists=True)
        entry = None if stored is not None else registry_entry(conn, name, None, exists=True)
        last = None if entry is None else AppliedDelta(entry.delta_num, entry.delta_date)
        refusal = check_sequence(
            manifest.delta_num,
            manifest.delta_date,
            applied_date=None if stored is None else stored.delta_date,
            last=last,
        )
        if refusal is not None:
            raise refusal.error()
        return stored

    def _attempt(
        self,
        datamart: Datamart,
        transfer: StagedTransfer,
        tables: list[Table],
        bound: structlog.typing.FilteringBoundLogger,
    ) -> LoadResult:
        """One connection for the whole load, kept for the next (`LoaderConnections`): the
        datamart's lock (held by the session), the sequence checks, staging, the apply."""
        started = time.perf_counter()
        try:
            with self.connections.session() as session:
                conn = session.conn
                # Under the datamart's lock: another loader (or our own retry) may have
                # applied it meanwhile.
                conn.execute("SELECT pg_advisory_lock(%s)", (datamart_lock_key(datamart.name),))
                stored = self.verify_sequence(conn, transfer)  # steps 1-2
                if stored is not None:
                    bound.info("delta already applied", step=1)
                    return LoadResult.from_registry(stored, already_applied=True)
                steps = staging_steps(
                    conn, datamart, transfer, tables, self.settings, self.spark,
                    self.executor_dsn,
                )  # fmt: skip
                if steps:
                    steps[-1] = partial(_logged_when_done, steps[-1], bound, started)
                with run_ahead(steps, "podd-staging") as staged:
                    result = self._apply(session, datamart, transfer, tables, staged)
                bound.info(
                    "applied",
                    step=4,
                    seconds=round(time.perf_counter() - self._apply_started, 3),
                    rows=sum(c.rows_received for c in result.tables),
                )
                return result
        except (psycopg.OperationalError, psycopg.errors.SerializationFailure) as exc:
            raise TransientLoadError(f"{type(exc).__name__}: {exc}") from exc
        except psycopg.errors.DeadlockDetected as exc:
            raise TransientLoadError(f"deadlock: {exc}") from exc

    def _apply(
        self,
        session: Session,
        datamart: Datamart,
        transfer: StagedTransfer,
        tables: list[Table],
        received: Iterator[tuple[int, int]],
    ) -> LoadResult:
        """Step 4: every table and the registry row, in one transaction, each table as soon
        as `received` hands over its (staged, received) rows, in table order. A table with
        no staged row is left alone (its statement would change nothing); one with many is
        analysed first (`ANALYZE_MIN_ROWS`); one with few is applied by primary-key lookups
        (`KEYED_LOOKUP`)."""
        manifest = transfer.manifest
        params = {"delta": manifest.delta_num, "prev": manifest.delta_num - 1}
        counts: list[TableCounts] = []
        conn = session.conn
        conn.autocommit = False  # the session's advisory lock outlives the transaction
        keyed = False  # KEYED_LOOKUP set in this transaction
        self._apply_started = time.perf_counter()
        try:
            for index, table in enumerate(tables):
                staged, rows = next(received)
                if index == 0:
                    self._apply_started = time.perf_counter()
                upserted = deleted = 0
                if staged >= ANALYZE_MIN_ROWS:
                    conn.execute(
                        f"SET LOCAL default_statistics_target = {ANALYZE_STATISTICS_TARGET}"
                    )
                    conn.execute(f"ANALYZE {datamart.staging(table.name)}")
                if staged:
                    if keyed != (staged < ANALYZE_MIN_ROWS):
                        keyed = not keyed
                        conn.execute(KEYED_LOOKUP if keyed else PLANNER_DEFAULT)
                    sql = table_apply_sql(datamart.name, table, datamart.staging(table.name))
                    applied = conn.execute(sql, params).fetchone()
                    assert applied is not None
                    deleted, upserted, found = applied
                    if found != staged:  # rolled back: the retry stages the table again
                        raise TransientLoadError(
                            f"staging of {table.name} holds {found} rows, {staged} were "
                            "staged: another process changed it during the load"
                        )
                counts.append(TableCounts(table.name, rows, upserted, deleted))
                if self.between_tables is not None:
                    self.between_tables(conn, table.name)
            row = conn.execute(
                f"INSERT INTO {q(META_SCHEMA)}.delta_registry "
                "(datamart, delta_num, delta_date, request_id, table_counts) "
                "VALUES (%s, %s, %s, %s, %s) RETURNING applied_at",
                (
                    datamart.name,
                    manifest.delta_num,
                    manifest.delta_date.astimezone(UTC).replace(tzinfo=None),
                    manifest.request_id,
                    encode_counts(counts),
                ),
            ).fetchone()
            assert row is not None
            try:
                self.commit(conn)
            except psycopg.OperationalError as exc:
                conn.close()
                return self._after_lost_commit(transfer, exc, session.backend)
            conn.autocommit = True
        except BaseException:
            if not conn.closed:
                conn.rollback()
            raise
        return LoadResult(
            datamart.name,
            manifest.delta_num,
            manifest.delta_date,
            manifest.request_id,
            tuple(counts),
            row[0],
        )

    def _after_lost_commit(
        self, transfer: StagedTransfer, exc: Exception, backend: tuple[Any, ...] | None
    ) -> LoadResult:
        """The connection broke during COMMIT: the registry says whether it happened.

        The registry is read only once the old backend has ended (a COMMIT the server
        received lands even when the client is gone), with backoff while the server cannot
        be reached, for at most `commit_settle_seconds`: a late-landing commit is never
        taken for a failed one, so an applied delta is never answered LOAD_FAILED."""
        manifest = transfer.manifest
        deadline = time.monotonic() + self.settings.commit_settle_seconds
        delay = 0.1
        while True:
            try:
                stored = self._registry_after(backend, manifest.datamart, manifest.delta_num)
                if stored is not None:
                    # Ours only if it carries our requestId: another writer's row for this
                    # delta means our COMMIT did not land (the delta is applied all the same).
                    ours = stored.request_id == manifest.request_id
                    return LoadResult.from_registry(stored, already_applied=not ours)
                raise TransientLoadError(f"COMMIT failed and did not happen: {exc}") from exc
            except psycopg.OperationalError as again:
                if time.monotonic() + delay > deadline:
                    raise CommitStateUnknownError(
                        f"delta {manifest.delta_num}: the connection broke during COMMIT "
                        f"({exc}) and the registry could not be read for "
                        f"{self.settings.commit_settle_seconds:g} s ({again})"
                    ) from again
                log.warning("COMMIT state unknown: reading the registry again", error=str(again))
            except _PendingCommit:
                if time.monotonic() + delay > deadline:
                    raise CommitStateUnknownError(
                        f"delta {manifest.delta_num}: the backend that received the COMMIT is "
                        f"still running after {self.settings.commit_settle_seconds:g} s"
                    ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _registry_after(
        self, backend: tuple[Any, ...] | None, datamart: str, delta_num: int
    ) -> RegistryEntry | None:
        """The registry entry once `backend` has ended; `_PendingCommit` while it runs."""
        with self.store.connect(autocommit=True) as conn:
            if backend is not None:
                running = conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND backend_start = %s",
                    backend,
                ).fetchone()
                if running is not None:
                    raise _PendingCommit
        return self.store.applied(datamart, delta_num)


def _logged_when_done(
    step: Callable[[], tuple[int, int]],
    bound: structlog.typing.FilteringBoundLogger,
    started: float,
) -> tuple[int, int]:
    """The last staging step, logging step 3 (`staged`) as it ends."""
    result = step()
    bound.info("staged", step=3, seconds=round(time.perf_counter() - started, 3))
    return result


class _PendingCommit(Exception):
    """The backend that received a COMMIT has not ended yet."""


__all__ = ["BetweenTables", "DeltaLoader", "LoadResult", "LoaderError"]
