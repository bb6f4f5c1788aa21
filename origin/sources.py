"""Where the origin's deltas come from: a seeded workload, or a directory of saved deltas.

A source gives delta `n` on request (`delta(n)`), None past its end. Both are deterministic:
asking twice gives the same rows and date, so a resend after a restart carries the same data.

A saved delta is a directory `delta-NNNNNN/` holding `delta.json` (datamart, deltaNum,
deltaDate) and one Avro container per table with changes, `<table>.avro`, in the protocol's
row layout (the table's columns in logical order, then `sys_op`), as a Prostore upload
writes them. `podd-origin record` writes such directories from the workload.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from pydantic import TypeAdapter

from origin.errors import OriginError
from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta
from protocol.body import decode_body
from protocol.body_writer import encode_body
from protocol.errors import PoddError
from protocol.messages import UtcTimestamp
from protocol.schema import LogicalSchema, Table
from protocol.workload import Workload, WorkloadSpec

DELTA_FILE = "delta.json"
START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
_timestamp = TypeAdapter(UtcTimestamp)


@dataclass(frozen=True)
class SourceDelta:
    num: int
    date: datetime
    rows_by_table: Mapping[str, Sequence[DeltaRow]]
    #: Or its chunks' bodies, written already (a columnar cut's records): per table, in
    #: chunk order, each with its row count. Every framing of the delta (a resend that starts
    #: over, too) frames them (`OriginSession.frame`), not `rows_by_table`.
    bodies: Callable[[Table], Sequence[tuple[bytes, int]]] | None = None
    #: ... and how many rows they hold.
    written_rows: int = 0

    @property
    def rows(self) -> int:
        return sum(len(r) for r in self.rows_by_table.values()) + self.written_rows


class DeltaSource(Protocol):
    schema: LogicalSchema

    def delta(self, num: int) -> SourceDelta | None: ...


class WorkloadSource:
    """Deltas 0, 1, ... from the seeded generator; delta n is dated `start + n * interval`."""

    def __init__(
        self,
        schema: LogicalSchema,
        spec: WorkloadSpec,
        *,
        start: datetime = START_DATE,
        interval: timedelta = timedelta(hours=1),
        last: int | None = None,
    ) -> None:
        self.schema = schema
        self.spec = spec
        self.start = start
        self.interval = interval
        self.last = last
        self._workload = Workload(schema, spec)
        self._recent: dict[int, SourceDelta] = {}

    def delta(self, num: int) -> SourceDelta | None:
        if num < 0 or (self.last is not None and num > self.last):
            return None
        if num in self._recent:
            return self._recent[num]
        if num < self._workload.delta_num:  # asked for an older delta: generate again
            self._workload = Workload(self.schema, self.spec)
        while self._workload.delta_num <= num:
            n = self._workload.delta_num
            rows = self._workload.next_delta()
            if n >= num - 1:  # keep the delta and the one before (a resend)
                self._recent[n] = SourceDelta(n, self.start + n * self.interval, rows)
        self._recent = {k: v for k, v in self._recent.items() if k >= num - 1}
        return self._recent[num]


def replica_model(source: DeltaSource, last: int) -> ReplicaModel:
    """The reference model of the replica after the source's deltas 0..last."""
    model = ReplicaModel(source.schema)
    for n in range(last + 1):
        delta = source.delta(n)
        if delta is None:
            raise OriginError(f"the source has no delta {n}")
        model, _ = apply_delta(model, n, delta.date, delta.rows_by_table)
    return model


def rows_of(table: Table, body: bytes) -> list[DeltaRow]:
    """A body's rows as the origin holds them (column values, then sys_op)."""
    rows: list[DeltaRow] = []
    for batch in decode_body(table, body):
        columns = [column.to_pylist() for column in batch.columns]
        rows.extend(DeltaRow(tuple(v[:-1]), v[-1]) for v in zip(*columns, strict=True))
    return rows


class DirectorySource:
    """Deltas saved as files (see the module's docstring); read when asked for."""

    def __init__(self, schema: LogicalSchema, root: Path) -> None:
        self.schema = schema
        self.root = root
        self._dirs: dict[int, tuple[Path, datetime]] = {}
        if not root.is_dir():
            raise OriginError(f"{root} is not a directory of saved deltas")
        for path in sorted(root.glob(f"*/{DELTA_FILE}")):
            try:
                meta = json.loads(path.read_text())
                num, date = int(meta["deltaNum"]), _timestamp.validate_python(meta["deltaDate"])
            except (OSError, ValueError, KeyError) as exc:
                raise OriginError(f"{path}: not a delta description: {exc}") from None
            if meta.get("datamart", schema.datamart) != schema.datamart:
                raise OriginError(f"{path} is a delta of {meta['datamart']}, not {schema.datamart}")
            if num in self._dirs:
                raise OriginError(f"{path}: delta {num} is saved twice")
            self._dirs[num] = (path.parent, date)
        if not self._dirs:
            raise OriginError(f"{root} holds no saved delta (no */{DELTA_FILE})")

    @property
    def numbers(self) -> list[int]:
        return sorted(self._dirs)

    def delta(self, num: int) -> SourceDelta | None:
        if num not in self._dirs:
            return None
        directory, date = self._dirs[num]
        rows: dict[str, list[DeltaRow]] = {}
        for table in self.schema:
            path = directory / f"{table.name}.avro"
            if not path.exists():
                continue
            try:
                rows[table.name] = rows_of(table, path.read_bytes())
            except PoddError as exc:
                raise OriginError(f"{path}: {exc}") from None
        unknown = {p.stem for p in directory.glob("*.avro")} - set(rows)
        if unknown:
            raise OriginError(
                f"{directory}: tables not in {self.schema.datamart}: {sorted(unknown)}"
            )
        return SourceDelta(num, date, rows)


def _write(path: Path, data: bytes) -> None:
    """Complete or absent: written beside, then renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def save_delta(root: Path, schema: LogicalSchema, delta: SourceDelta) -> Path:
    """Write one delta as a directory under `root`; `delta.json` last, so a delta is whole."""
    directory = root / f"delta-{delta.num:06d}"
    directory.mkdir(parents=True, exist_ok=True)
    for table in schema:
        rows = delta.rows_by_table.get(table.name, ())
        if rows:
            body = encode_body(table, [(*r.values, r.sys_op) for r in rows], codec="deflate")
            _write(directory / f"{table.name}.avro", body)
    meta = {"datamart": schema.datamart, "deltaNum": delta.num, "deltaDate": delta.date.isoformat()}
    _write(directory / DELTA_FILE, json.dumps(meta, indent=1).encode())
    return directory


def save_deltas(root: Path, schema: LogicalSchema, deltas: Iterable[SourceDelta]) -> int:
    count = 0
    for delta in deltas:
        save_delta(root, schema, delta)
        count += 1
    return count
