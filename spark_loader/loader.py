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
from collections.abc import Callable, Iterator, Mapping

import psycopg
import structlog
from pyspark.sql import SparkSession

from podd_runtime.dsn import with_passfile
from protocol.schema import LogicalSchema, Table
from replica_store.delta_transaction import Commit, DeltaTransaction, plain_commit
from replica_store.errors import (
    LoaderError,
    TransientLoadError,
)
from replica_store.layout import Datamart
from replica_store.lost_commit import LoadResult
from replica_store.open_apply import OpenApply
from replica_store.store import ReplicaStore
from replica_store.transfer import StagedTransfer
from spark_loader.executor_probe import probe_executors
from spark_loader.load_rules import served_datamart, with_retries
from spark_loader.run_ahead import run_ahead
from spark_loader.session import LazySession
from spark_loader.settings import LoaderSettings
from spark_loader.slice_encode import EncodedSlice, TableSlice
from spark_loader.staging_steps import Staging, logged_when_done, staging_steps
from spark_loader.temp_staging import decode_ahead

log = structlog.get_logger("spark_loader")

#: Failures of the database worth another attempt of the load: a lost connection, and a
#: serialisation failure or deadlock (psycopg's `TransactionRollback`s are among them).
TRANSIENT = psycopg.OperationalError
#: Called inside the apply transaction after each table: a seam for failure-injection tests.
BetweenTables = Callable[[psycopg.Connection, str], None]


class DeltaLoader:
    """Loads staged transfers of the registered datamarts into the replica."""

    def __init__(
        self,
        store: ReplicaStore,
        spark: SparkSession | LazySession,
        settings: LoaderSettings | None = None,
        *,
        between_tables: BetweenTables | None = None,
        commit: Commit = plain_commit,
    ) -> None:
        self.store = store
        self._spark = spark
        self.settings = settings or LoaderSettings()
        self.between_tables = between_tables
        self.commit = commit
        self._executor_dsn_cache: str | None = None
        self.connections = store.sessions
        self._datamarts: dict[str, Datamart] = {}
        self._apply_started = 0.0  # when the last load's apply transaction began

    def spark(self) -> SparkSession:
        """The Spark session (a lazy one is built now)."""
        return self._spark.get() if isinstance(self._spark, LazySession) else self._spark

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
            self.spark(),
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

    def decode_ahead(self, transfer: StagedTransfer) -> Mapping[TableSlice, EncodedSlice]:
        """A small transfer's slices decoded before its load, for `load(ahead=)`: nothing
        is read from or written to the replica (`temp_staging.decode_ahead`). Safe in any
        thread, beside a load; empty when there is nothing to gain or it failed."""
        datamart = self._datamarts.get(transfer.manifest.datamart)
        if datamart is None:
            return {}
        try:
            return decode_ahead(datamart, transfer, self.settings)
        except Exception as exc:  # the load decodes it again, and says what is wrong
            log.info("decoding ahead skipped", error=str(exc)[:300])
            return {}

    def load(
        self,
        transfer: StagedTransfer,
        opened: OpenApply | None = None,
        *,
        ahead: Mapping[TableSlice, EncodedSlice] | None = None,
    ) -> LoadResult:
        """Apply the transfer (steps 1-4, retried); with `opened`, the apply transaction
        opened for it while it arrived (`open_apply`) is finished instead: only the tables
        it has not applied are staged and applied. If that fails, it is rolled back and
        the delta is loaded anew from staging. `ahead`: its slices `decode_ahead` encoded."""
        manifest = transfer.manifest
        datamart = served_datamart(self._datamarts, manifest)
        bound = log.bind(
            datamart=manifest.datamart, deltaNum=manifest.delta_num, requestId=manifest.request_id
        )
        tables = [datamart.schema.table(s.table_name) for s in manifest.streams]
        if opened is not None and opened.alive and opened.request_id == manifest.request_id:
            try:
                return self._finish(datamart, transfer, tables, bound, opened)
            except TransientLoadError as exc:
                bound.warning("the open apply failed: loading anew", error=str(exc))
        if opened is not None:
            opened.abort()
        return with_retries(
            lambda: self._attempt(datamart, transfer, tables, bound, ahead),
            self.settings,
            bound,
            manifest.delta_num,
        )

    def flush_commits(self) -> None:
        """Return once every delta committed before is on disk (`synchronous_commit` off: a
        load's COMMIT does not wait). A transaction that writes a commit record of its own,
        committed synchronously, waits for the WAL to be flushed up to it."""
        with self.connections.session() as session, session.conn.transaction():
            session.conn.execute("SET LOCAL synchronous_commit = on")
            session.conn.execute("SELECT pg_current_xact_id()")

    # --- steps ---------------------------------------------------------------------------
    def _attempt(
        self,
        datamart: Datamart,
        transfer: StagedTransfer,
        tables: list[Table],
        bound: structlog.typing.FilteringBoundLogger,
        ahead: Mapping[TableSlice, EncodedSlice] | None = None,
    ) -> LoadResult:
        """One delta transaction, on one session for the whole load (kept for the next):
        the datamart's lock, the sequence checks, staging, the apply, the commit."""
        started = time.perf_counter()
        transaction = self.store.begin_delta(datamart, transfer.manifest)
        try:
            transaction.lock(wait=True)
            # Under the datamart's lock: another loader (or our own retry) may have applied
            # it meanwhile.
            stored = transaction.registered()  # steps 1-2
            if stored is not None:
                bound.info("delta already applied", step=1)
                transaction.roll_back()
                return LoadResult.from_registry(stored, already_applied=True)
            staging = staging_steps(
                transaction.conn,
                datamart,
                transfer,
                tables,
                self.settings,
                self.spark,
                self.executor_dsn,
                in_apply_transaction=True,
                ahead=ahead,
            )
            result = self._stage_and_apply(
                staging, transfer, tables, bound, started, take=lambda: _begun(transaction)
            )
        except BaseException as exc:
            transaction.roll_back(failed=True)
            _raise_transient(exc)
            raise
        self._log_applied(bound, result)
        return result

    def _finish(
        self,
        datamart: Datamart,
        transfer: StagedTransfer,
        tables: list[Table],
        bound: structlog.typing.FilteringBoundLogger,
        opened: OpenApply,
    ) -> LoadResult:
        """Step 3-4 in the transaction `opened` holds (it holds the lock and checked the
        sequence): the tables it has not applied are staged (on another connection: the
        transaction holds staging locks), while the last prestage's apply may still run in
        it; then the load takes the transaction over, applies them, inserts the registry
        row and commits."""
        started = time.perf_counter()
        claimed, through = opened.claimed(), opened.through()
        left = [t for t in tables if t.name not in claimed]
        if busy := opened.busy() & set(through):  # their staging is being applied
            opened.settle()
        # The streams applied in part: only the chunks after those (`replica_store.pieces`).
        numbers = {s.table_name: s.stream_number for s in transfer.manifest.streams}
        rest = transfer.rebased({numbers[name]: last + 1 for name, last in through.items()})
        taken: list[DeltaTransaction] = []

        def take() -> DeltaTransaction:
            opened.settle()
            if set(opened.applied) != claimed or opened.through() != through:
                raise TransientLoadError("the open apply was rolled back")
            taken.append(opened.hand_over())
            return taken[0]

        try:
            with self.connections.session() as staging_session:
                if busy and not opened.alive:
                    raise TransientLoadError("the open apply was rolled back")
                staging = staging_steps(
                    staging_session.conn,
                    datamart,
                    rest,
                    left,
                    self.settings,
                    self.spark,
                    self.executor_dsn,
                    read_by_open_apply=opened.touched(),
                )
                result = self._stage_and_apply(staging, transfer, tables, bound, started, take)
        except BaseException as exc:
            opened.abort()  # (nothing left to roll back once it was handed over)
            for transaction in taken:
                transaction.roll_back(failed=True)
            _raise_transient(exc)
            raise
        self._log_applied(bound, result, opened_before=sorted(claimed))
        return result

    def _stage_and_apply(
        self,
        staging: Staging,
        transfer: StagedTransfer,
        tables: list[Table],
        bound: structlog.typing.FilteringBoundLogger,
        started: float,
        take: Callable[[], DeltaTransaction],
    ) -> LoadResult:
        """Stage ahead (`run_ahead`) while the transaction `take` gives applies each table
        as soon as it is staged; the registry row; COMMIT."""
        steps = staging.steps
        if steps:
            steps[-1] = logged_when_done(steps[-1], bound, started)
        with run_ahead(steps, "podd-staging") as staged:
            return self._apply(take(), transfer, tables, staged, staging.relations)

    def _log_applied(
        self, bound: structlog.typing.FilteringBoundLogger, result: LoadResult, **extra: object
    ) -> None:
        seconds = round(time.perf_counter() - self._apply_started, 3)
        rows = sum(c.rows_received for c in result.tables)
        bound.info("applied", step=4, **extra, seconds=seconds, rows=rows)

    def _apply(
        self,
        transaction: DeltaTransaction,
        transfer: StagedTransfer,
        tables: list[Table],
        received: Iterator[tuple[int, int]],
        relations: Mapping[str, str],
    ) -> LoadResult:
        """Step 4: every table the transaction has not applied, each as soon as `received`
        hands over its (staged, received) rows, in table order; then the registry row and
        COMMIT (`DeltaTransaction.commit`)."""
        self._apply_started = time.perf_counter()
        for index, table in enumerate(tables):
            if table.name in transaction.done:  # applied while the delta arrived
                continue
            staged, rows = next(received)
            if index == 0:
                self._apply_started = time.perf_counter()
            transaction.apply(table, staged, rows, staging=relations[table.name])
            if self.between_tables is not None:
                self.between_tables(transaction.conn, table.name)
        return transaction.commit(
            transfer,
            tables,
            synchronous=self.settings.synchronous_commit,
            settle_seconds=self.settings.commit_settle_seconds,
            commit=self.commit,
        )


def _begun(transaction: DeltaTransaction) -> DeltaTransaction:
    transaction.begin()
    return transaction


def _raise_transient(exc: BaseException) -> None:
    """A failure of the database worth another attempt of the load, as one."""
    if isinstance(exc, TRANSIENT):
        raise TransientLoadError(f"{type(exc).__name__}: {exc}") from exc


__all__ = ["BetweenTables", "DeltaLoader", "LoadResult", "LoaderError"]
