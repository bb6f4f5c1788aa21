"""What every load path asks of a replica store, whatever the database behind it.

`ReplicaStore` (PostgreSQL, and ADB by its `adb` dialect) is the first implementation; a
test holds it to these protocols (`tests/loader/test_store_interface.py`). A store keeps the
logical content REPLICA.md describes: the state as of every applied delta is the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from podd_runtime.lock_file import Hold
from protocol.apply_model import TableCounts
from protocol.chunk_range import ChunkRange
from protocol.schema import LogicalSchema, Table
from replica_store.delta_transaction import Commit
from replica_store.layout import Datamart
from replica_store.lost_commit import LoadResult
from replica_store.registry import RegistryEntry
from replica_store.transfer import StagedTransfer, TransferManifest


class DeltaWrite(Protocol):
    """Delta N's one transaction (`DeltaTransaction`): lock, check, stage, apply, commit."""

    done: dict[str, TableCounts]

    @property
    def alive(self) -> bool: ...

    def lock(self, *, wait: bool) -> bool: ...

    def registered(self) -> RegistryEntry | None: ...

    def begin(self, *, idle_seconds: float | None = None) -> None: ...

    def stage(self, table: Table, rows: Iterable[pa.RecordBatch]) -> tuple[str, int]: ...

    def apply(
        self,
        table: Table,
        staged: int,
        received: int,
        *,
        staging: str | None = None,
        piece: ChunkRange | None = None,
    ) -> None: ...

    def commit(
        self,
        transfer: StagedTransfer,
        tables: list[Table],
        *,
        synchronous: bool = ...,
        settle_seconds: float,
        commit: Commit = ...,
    ) -> LoadResult: ...

    def roll_back(self, *, failed: bool = False) -> None: ...


class Store(Protocol):
    """A replica: its layout, its registry, its transactions, its reads, its one writer."""

    def ensure(self, schema: LogicalSchema) -> Datamart: ...

    def stored_schema(self, datamart: str) -> LogicalSchema | None: ...

    def begin_delta(self, datamart: Datamart, manifest: TransferManifest) -> DeltaWrite: ...

    def registry(self, datamart: str) -> list[RegistryEntry]: ...

    def applied(self, datamart: str, delta_num: int) -> RegistryEntry | None: ...

    def last_applied(self, datamart: str) -> RegistryEntry | None: ...

    def read_as_of(self, datamart: str, table: Table, delta_num: int) -> list[tuple[Any, ...]]: ...

    def hold(self, datamarts: Sequence[str], role: str, lock_file: Path | None = None) -> Hold: ...

    def close(self) -> None: ...
