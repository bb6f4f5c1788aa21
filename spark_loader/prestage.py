"""Stage the complete streams of a transfer that still arrives ("prestage").

The load of a delta used to start at its last chunk: receive, then stage, then apply, one
after another. A stream is often complete long before its transfer (an origin sends its
tables one after another), and staging (decoding the Avro bodies, keeping the last row per
key, COPY into the staging table) is most of a load's work. `Prestager.prestage` does that
work for the streams complete so far, while later chunks still arrive, and applies them in
the delta's transaction opened at its first prestage (`replica_store.open_apply`); the load
then finishes that transaction, or, if it was rolled back, applies those tables without
staging them again (`replica_store.staged_streams`).

It changes nothing a load promises:
* it takes the datamart's lock without waiting (a load runs: nothing is prestaged) and
  stages only the delta the registry expects next;
* staging is never the replica, and what it applies stays inside the delta's one open
  transaction (`replica_store.open_apply`): a transfer later refused (`BAD_CHUNK`,
  `SCHEMA_MISMATCH`, `INCOMPLETE_DELTA`) is rolled back and leaves the replica as it was;
* a failure of any kind is logged and dropped: the load stages the table itself and meets
  the same row error, answered as before.
"""

from __future__ import annotations

import time

import psycopg
import structlog

from protocol.chunk_range import ChunkRange
from protocol.errors import PoddError
from protocol.schema import Table
from replica_store.errors import TransientLoadError
from replica_store.layout import Datamart
from replica_store.open_apply import OpenApply
from replica_store.staged_streams import record_staged_stream
from replica_store.transfer import StagedTransfer
from spark_loader.loader import DeltaLoader
from spark_loader.staging_steps import staging_steps

log = structlog.get_logger("spark_loader")


class Prestager:
    """Prestages with a loader's connections, settings and Spark session."""

    def __init__(self, loader: DeltaLoader, *, idle_seconds: float | None = None) -> None:
        self.loader = loader
        #: An open apply's transaction idle this long is ended by the server (`OpenApply`).
        self.idle_seconds = idle_seconds

    @property
    def merge_max_bytes(self) -> int:
        """What the agent merges into one prestage at most: what this stages in the driver
        (`prestage_in_driver_max_mib`), so a merged prestage never becomes a Spark job."""
        return int(self.loader.settings.prestage_in_driver_max_mib * 2**20)

    def prestage(
        self, transfer: StagedTransfer, opened: OpenApply | None = None
    ) -> tuple[list[str], OpenApply | None]:
        """Stage the streams `transfer`'s manifest names (complete ones), and apply them in
        `opened` (or in an apply opened now). The tables staged (none when the datamart is
        locked by a load, the delta is not the one expected next, or staging failed), and
        the open apply to hand to the next prestage and to the load (None: none is open;
        a failed one is rolled back)."""
        manifest = transfer.manifest
        datamart = self.loader.datamart(manifest.datamart)
        if datamart is None or not manifest.streams:
            return [], opened
        ids = {
            "datamart": manifest.datamart,
            "deltaNum": manifest.delta_num,
            "requestId": manifest.request_id,
        }
        started = time.perf_counter()
        try:
            if opened is None or not opened.alive:
                opened = OpenApply(
                    self.loader.store, datamart, manifest, idle_seconds=self.idle_seconds
                )
                if not opened.open():
                    return [], None  # a load holds the datamart
            transfer, pieces = self._pieces(transfer, opened)
            tables = [datamart.schema.table(s.table_name) for s in transfer.manifest.streams]
            if not tables:
                return [], opened
            if opened.busy() & {t.name for t in tables}:  # its staging is being applied
                opened.settle()
                if not opened.alive:
                    raise TransientLoadError("the open apply was rolled back")
            counts = self._stage(transfer, datamart, tables, opened.touched())
            # by the open apply's owner: the next prestage stages while this applies
            opened.apply_later(tables, counts, pieces)
        except Exception as exc:  # the load stages these tables itself, and says what failed
            if opened is not None:
                opened.abort()
            level = log.info if isinstance(exc, PoddError | psycopg.Error) else log.warning
            level(
                "prestage dropped: the load stages these tables",
                **ids,
                reason=f"{type(exc).__name__}: {str(exc)[:300]}",
            )
            return [], None
        names = [t.name for t in tables]
        log.info(
            "prestaged",
            **ids,
            tables=names,
            pieces={name: str(chunks) for name, chunks in pieces.items()},
            seconds=round(time.perf_counter() - started, 3),
        )
        return names, opened

    def _pieces(
        self, transfer: StagedTransfer, opened: OpenApply
    ) -> tuple[StagedTransfer, dict[str, ChunkRange]]:
        """What to stage of the hand-over: its streams less those `opened` applied whole,
        each starting after the chunks `opened` applied of it; and, for those staged as
        pieces (a stream not complete, or one applied in part), the chunk each ends at and
        whether that is its stream's last (`replica_store.pieces`)."""
        applied, through = opened.claimed(), opened.through()
        kept = [s for s in transfer.manifest.streams if s.table_name not in applied]
        manifest = transfer.manifest.model_copy(update={"streams": tuple(kept)})
        rebased = StagedTransfer(transfer.directory, manifest).rebased(
            {s.stream_number: through.get(s.table_name, 0) + 1 for s in kept}
        )
        pieces = {s.table_name: s.chunks for s in rebased.manifest.streams if not s.whole}
        return rebased, pieces

    def _stage(
        self,
        transfer: StagedTransfer,
        datamart: Datamart,
        tables: list[Table],
        read_by_open_apply: set[str],
    ) -> dict[str, tuple[int, int]]:
        """Stage the tables on a connection of their own (autocommit; the open apply holds
        the lock), recording each whole stream as it is done: (staged, received) rows per
        table."""
        counts: dict[str, tuple[int, int]] = {}
        settings = self.loader.settings
        settings = settings.model_copy(
            update={"in_driver_max_mib": settings.prestage_in_driver_max_mib}
        )
        with self.loader.connections.session() as session:
            conn = session.conn
            staging = staging_steps(
                conn,
                datamart,
                transfer,
                tables,
                settings,
                self.loader.spark,
                self.loader.executor_dsn,
                read_by_open_apply=read_by_open_apply,
            )
            whole = {s.table_name for s in transfer.manifest.streams if s.whole}
            for table, step in zip(tables, staging.steps, strict=True):
                counts[table.name] = step()
                if table.name in whole:
                    record_staged_stream(conn, transfer.manifest, table.name, *counts[table.name])
        return counts
