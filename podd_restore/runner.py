"""`check` and `run`: one scan of the topic, then a report, or the deltas applied in order.

A run applies, from the replica's next expected delta, each delta's chosen increment as
one delta with its original number and date, through the same staged-transfer seam and
loader as `delta.in`: the registry row and every table in one transaction. It stops at the
first delta it cannot apply, saying why; the replica then holds the delta before it. Run
again after any interruption (kill -9 included), it scans the topic again and applies only
what the registry lacks: the registry, never this process, is the truth.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from podd_restore.errors import RestoreError, RestoreStopped
from podd_restore.pipeline import DeltaFetcher
from podd_restore.plan import BackupChunk, BackupIndex, DeltaPlan, Increment
from podd_restore.report import CheckReport, build_report
from podd_restore.restore_staging import RestoreStaging
from podd_restore.scan import scan_topic
from podd_restore.settings import RestoreSettings
from podd_restore.topic_index import TopicIndex
from protocol.changelog import SchemaHistory
from protocol.errors import ProtocolError
from protocol.schema import LogicalSchema
from protocol.sequence import expected_next
from spark_loader.replica_choice import Loader, hold_for, loader_for, open_store

if TYPE_CHECKING:
    from replica_store.transfer import StagedTransfer
    from spark_loader.slice_encode import EncodedSlice, TableSlice

#: No slice of the delta decoded ahead of its load.
_NOTHING_AHEAD: Mapping[TableSlice, EncodedSlice] = {}

log = structlog.get_logger("podd_restore")


def _bootstrap(settings: RestoreSettings) -> list[str]:
    """The broker that holds the backup topic. Unlike the agent's, it has no embedded
    default: a broker started here would be empty."""
    if settings.broker is None:
        raise RestoreError(
            "give --broker kafka://HOST:PORT: the broker that holds the backup topic "
            "(`podd-broker` runs the embedded one in the foreground for trying things)"
        )
    return settings.bootstrap_servers()


def _scan(settings: RestoreSettings, bootstrap: list[str], topic_index: TopicIndex) -> None:
    if not settings.topic or not settings.datamart:
        raise RestoreError("give --topic TOPIC and --datamart NAME")
    read = asyncio.run(
        scan_topic(
            settings,
            bootstrap,
            settings.topic,
            topic_index.on_message,
            stall_timeout=settings.stall_timeout_seconds,
        )
    )
    log.info("topic scanned", topic=settings.topic, messages=read, datamart=settings.datamart)


def history_before(topic_index: TopicIndex, first: int) -> SchemaHistory:
    """The schema history up to (not including) delta `first`, from the increments the
    topic holds for earlier deltas (the replica's own tables are checked against what it
    becomes by the store)."""
    history = SchemaHistory(topic_index.datamart)
    for number in topic_index.index.deltas():
        if number >= first:
            break
        chosen = topic_index.index.delta(number).chosen
        if chosen is not None:
            history = history.replay(topic_index.changes(chosen))
    return history


def check(settings: RestoreSettings) -> CheckReport:
    """Read the topic, change nothing, and say what a run would do."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    bootstrap = _bootstrap(settings)
    with open_store(settings) as (store, _):
        last = store.last_applied(settings.datamart)
        first = expected_next(None if last is None else last.delta_num)
        index = BackupIndex(settings.datamart, max_messages=settings.max_messages)
        topic_index = TopicIndex(
            settings.datamart, index, max_changelog_records=settings.max_changelog_records
        )
        _scan(settings, bootstrap, topic_index)
    return build_report(topic_index, first, settings.to_delta, settings.increment_id)


@dataclass
class RunOutcome:
    applied: list[int]
    rows: int
    seconds: float
    stop: DeltaPlan | None
    next_expected: int
    #: From the first message read to the last delta's commit.
    read_to_commit_seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        return {
            "applied": self.applied,
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "read_to_commit_seconds": round(self.read_to_commit_seconds, 3),
            "next_expected": self.next_expected,
            "stopped_before": None if self.stop is None else self.stop.delta_num,
            "stop_reason": None if self.stop is None else self.stop.refusal,
        }


Progress = Callable[[int, int, int, float], None]  # deltas done, total, rows, seconds


def run(settings: RestoreSettings, progress: Progress | None = None) -> RunOutcome:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bootstrap = _bootstrap(settings)
    with open_store(settings) as (store, dsn), ExitStack() as held:
        staging = RestoreStaging(settings.staging_path, settings.datamart)
        # Refused while an agent, a loader or another restore writes the datamart (or this
        # staging directory): before anything is cleared, read or applied.
        held.enter_context(
            hold_for(store, dsn, [settings.datamart], staging.owner_file, "podd-restore run")
        )
        last = store.last_applied(settings.datamart)
        first = expected_next(None if last is None else last.delta_num)
        staging.clear()  # a scan stages everything it needs again
        index = BackupIndex(settings.datamart, max_messages=settings.max_messages)
        # The topic indexed first, no data body kept: each delta's bodies are read again
        # when its turn comes, one delta ahead of the apply (`podd_restore.pipeline`).
        topic_index = TopicIndex(settings.datamart, index, settings.max_changelog_records)
        _scan(settings, bootstrap, topic_index)
        plans, stop = index.restorable(
            first, to_delta=settings.to_delta, increment_id=settings.increment_id
        )
        if not plans:
            staging.clear()
            return RunOutcome([], 0, time.perf_counter() - started, stop, first)
        # Spark and the loader are imported here: `check` stays light.
        from spark_loader.session import LazySession  # noqa: PLC0415

        chosen = [plan.chosen for plan in plans if plan.chosen is not None]
        spark = LazySession(settings)
        in_driver = (
            settings.in_driver_max_mib if dsn is not None else settings.clickhouse_in_driver_max_mib
        )
        if needs_spark(chosen, in_driver):
            spark.start()  # while the first delta is fetched
        loader = loader_for(store, dsn, spark, settings)
        try:
            applier = _Applier(
                topic_index,
                store,
                loader,
                staging,
                history=history_before(topic_index, first),
                last_data=_last_data(plans),
            )
            applied: list[int] = []
            # Left in this order, the fetcher stops first: a decode ahead waiting for its
            # next delta then ends, and the thread pool with it.
            with (
                ThreadPoolExecutor(1, "podd-restore-ahead") as pool,
                DeltaFetcher(
                    settings,
                    bootstrap,
                    chosen,
                    staging,
                    body_limits=settings.body_limits(),
                    max_delta_bytes=int(settings.restore_max_staged_mib * 2**20),
                    stall_timeout=settings.stall_timeout_seconds,
                ) as fetcher,
            ):
                increment, assembled, ahead = fetcher.next(), None, _NOTHING_AHEAD
                for taken in range(1, len(chosen) + 1):
                    transfer = applier.prepare(increment, assembled)
                    # Delta k + 1 read and decoded while k applies (its schema: k's).
                    upcoming = (
                        pool.submit(applier.fetch_ahead, fetcher) if taken < len(chosen) else None
                    )
                    applier.rows += applier.load(increment, transfer, ahead)
                    fetcher.applied(increment)
                    applied.append(increment.delta_num)
                    if progress is not None:
                        progress(
                            len(applied), len(plans), applier.rows, time.perf_counter() - started
                        )
                    if upcoming is not None:
                        increment, assembled, ahead = upcoming.result()
            loader.flush_commits()
            committed = time.perf_counter()
            log.info("staging held at most", mib=round(fetcher.peak_staged_bytes / 2**20, 1))
        finally:
            loader.close()
            spark.stop()
        staging.clear()
    first_read = topic_index.first_message_at or started
    return RunOutcome(
        applied,
        applier.rows,
        time.perf_counter() - started,
        stop,
        applied[-1] + 1,
        committed - first_read,
    )


def needs_spark(increments: list[Increment], in_driver_max_mib: float) -> bool:
    """Whether any of them is bigger than what the loader stages in the driver (by the
    bodies' sizes on the topic: before they are fetched, what they decode to is unknown)."""
    limit = in_driver_max_mib * 2**20
    return any(sum(c.size for c in i.chunks.values()) > limit for i in increments)


class _Applier:
    """Applies chosen increments one after the other, evolving the schema as it goes."""

    def __init__(
        self,
        topic_index: TopicIndex,
        store: Any,
        loader: Loader,
        staging: RestoreStaging,
        *,
        history: SchemaHistory,
        last_data: dict[str, int],
    ) -> None:
        self.topic_index = topic_index
        self.store = store
        self.loader = loader
        self.staging = staging
        #: The schema history up to the delta before the next one applied.
        self.history = history
        #: The last delta of the run whose increment carries data of each table.
        self.last_data = last_data
        self.schema: LogicalSchema | None = None
        self.views: list[tuple[str, bool, str, int]] | None = None
        self.retired: set[tuple[str, int]] = set()
        self.rows = 0

    def prepare(
        self, increment: Increment, assembled: tuple[LogicalSchema, StagedTransfer] | None = None
    ) -> StagedTransfer:
        """The delta's schema (the changelog up to it applied to the replica's tables), and
        the delta as a staged transfer of it (`assembled` by `fetch_ahead`, if that was
        for the same schema)."""
        self.history = self.history.replay(self.topic_index.changes(increment))
        schema = self._evolve(increment)
        tables = increment.tables()
        self._check_tables(increment, schema, tables)
        if assembled is not None and assembled[0] == schema:
            return assembled[1]
        return self.staging.assemble(increment, schema, tables)

    def load(
        self,
        increment: Increment,
        transfer: StagedTransfer,
        ahead: Mapping[TableSlice, EncodedSlice] = _NOTHING_AHEAD,
    ) -> int:
        """Apply one delta (`prepare`d); the rows it carried."""
        tables = increment.tables()
        try:
            result = self.loader.load(transfer, ahead=ahead)
        except ProtocolError as exc:
            raise RestoreError(_located(exc, increment, tables)) from None
        rows = sum(t.rows_received for t in result.tables)
        log.info(
            "delta restored" if not result.already_applied else "delta already applied",
            deltaNum=increment.delta_num,
            run=increment.increment_id,
            rows=rows,
        )
        return rows

    def fetch_ahead(
        self, fetcher: DeltaFetcher
    ) -> tuple[
        Increment, tuple[LogicalSchema, StagedTransfer] | None, Mapping[TableSlice, EncodedSlice]
    ]:
        """The next delta, fetched, assembled and its slices decoded as the schema is now (in
        a thread, while the delta before it applies): `prepare` keeps that transfer if the
        delta leaves the schema as it is, and the loader checks each slice it takes was
        decoded from the same files as the same table (`DeltaLoader.decode_ahead`)."""
        increment = fetcher.next()
        schema, tables = self.schema, increment.tables()
        if schema is None or not all(schema.has_table(name) for name in tables):
            return increment, None, _NOTHING_AHEAD
        try:
            transfer = self.staging.assemble(increment, schema, tables)
        except OSError as exc:  # `prepare` assembles it again, and says what is wrong
            log.info("decoding ahead skipped", deltaNum=increment.delta_num, error=str(exc))
            return increment, None, _NOTHING_AHEAD
        return increment, (schema, transfer), self.loader.decode_ahead(transfer)

    def _evolve(self, increment: Increment) -> LogicalSchema:
        datamart = self.topic_index.datamart
        postponed = []
        for dropped in self.history.dropped:
            mark = (dropped.table.name, dropped.change_num)
            if mark in self.retired:
                continue
            if self.last_data.get(dropped.table.name, -1) >= increment.delta_num:
                # A later increment still carries its data: the writer put the whole history
                # into every increment; the table lives until its data ends.
                if self.history.table(dropped.table.name) is None:
                    postponed.append(dropped.table)
                continue
            renamed = self.store.retire_table(datamart, dropped.table.name, increment.delta_num)
            self.retired.add(mark)
            log.warning(
                "table dropped by the changelog: no longer applied, its replica tables kept",
                table=dropped.table.name,
                changeNum=dropped.change_num,
                renamedTo=renamed,
            )
        schema = self.history.logical_schema()
        if postponed:
            tables = (*(schema.tables if schema else ()), *postponed)
            schema = LogicalSchema(datamart=datamart, tables=tables)
        if schema is None:
            raise RestoreError(
                f"delta {increment.delta_num} (run {increment.increment_id}): the changelog up "
                "to it creates no table"
            )
        if schema != self.schema:
            self.loader.register(schema)
            self.schema = schema
        views = [(v.name, v.materialized, v.query, v.change_num) for v in self.history.views]
        if views != self.views:
            self.store.record_views(datamart, views)
            self.views = views
        return schema

    def _check_tables(
        self, increment: Increment, schema: LogicalSchema, tables: dict[str, list[BackupChunk]]
    ) -> None:
        """Before any work: every data message names a table of the schema at this delta.
        (A body that does not fit its table is found while decoding, and named by its
        chunk: `_located`.)"""
        for name, chunks in tables.items():
            if not schema.has_table(name):
                raise RestoreError(
                    f"delta {increment.delta_num} (run {increment.increment_id}), "
                    f"{chunks[0].place}: UNKNOWN_TABLE: table {name!r} is not in the "
                    "datamart's schema at this delta"
                )


def _last_data(plans: list[DeltaPlan]) -> dict[str, int]:
    last: dict[str, int] = {}
    for plan in plans:
        assert plan.chosen is not None
        for table in plan.chosen.tables():
            last[table] = plan.delta_num
    return last


def _located(exc: ProtocolError, increment: Increment, tables: dict[str, list[BackupChunk]]) -> str:
    where = f"delta {increment.delta_num} (run {increment.increment_id})"
    if exc.chunk is not None:
        table, number = exc.chunk
        chunks = tables.get(table, [])
        if 1 <= number <= len(chunks):
            where += f", {chunks[number - 1].place}"
    return f"{where}: {exc}; nothing of this delta was applied"


def stopped(outcome: RunOutcome) -> RestoreStopped | None:
    if outcome.stop is None or outcome.stop.refusal is None:
        return None
    return RestoreStopped(
        f"stopped before delta {outcome.stop.delta_num}: {outcome.stop.refusal}; the replica "
        f"holds every delta before it (next expected {outcome.next_expected})"
    )
