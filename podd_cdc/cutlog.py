"""The durable cut log (docs/contracts/CDC.md "Exactly once across crashes").

Before the first `delta.in` of delta N is produced, N's cut is written here (fsync, rename,
directory fsync): for every source partition the offsets it covers, the bound it was cut at,
and its date. A restarted origin rebuilds N from exactly that record, or resumes after it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from podd_cdc.errors import CdcError
from podd_runtime.files import durable_write

_FILE = re.compile(r"cut-(\d{10})\.json\Z")
_MICRO = timedelta(microseconds=1)


@dataclass(frozen=True)
class Span:
    """What one partition gives a delta.

    Changes are taken from offsets `lo` to `end` (exclusive; `end` is where reading stood at
    the cut); the previous cut's `end` was `prev_end`. Full-load rows (no sequence) are taken
    from `refresh_from` to `refresh_upto`. `next_lo` is where the next delta starts reading.
    """

    lo: int
    prev_end: int
    end: int
    refresh_from: int
    refresh_upto: int
    next_lo: int


@dataclass(frozen=True)
class Cut:
    delta: int
    date: datetime
    bound: Any  # Qlik: changeSequence key (str); DataWorks: watermark ms (int); or None
    prev_bound: Any
    spans: dict[str, Span]  # "topic:partition" → span
    changes: int
    rows: int
    digest: str

    def to_json(self) -> bytes:
        record = asdict(self)
        record["date"] = self.date.isoformat()
        return json.dumps(record, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Cut:
        record: dict[str, Any] = json.loads(data)
        spans = {k: Span(**v) for k, v in record.pop("spans").items()}
        date = datetime.fromisoformat(record.pop("date"))
        return cls(date=date, spans=spans, **record)


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def after_last(date: datetime, last: Cut | None) -> datetime:
    """A delta's date: `date`, or a microsecond after the last delta's where it is not later
    (the replica takes dates strictly increasing)."""
    if last is not None and date <= last.date:
        return last.date + _MICRO
    return date


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


class CutLog:
    """One directory of cut records, `cut-NNNNNNNNNN.json`, one per delta."""

    def __init__(self, directory: Path, datamart: str) -> None:
        self.directory = directory
        self.datamart = datamart
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CdcError(f"cannot use the state directory {directory}: {exc}") from None
        self._check_owner()
        self.cuts: dict[int, Cut] = {}
        for path in sorted(directory.iterdir()):
            match = _FILE.match(path.name)
            if match is None:
                continue
            try:
                cut = Cut.from_json(path.read_bytes())
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise CdcError(f"{path}: not a cut record: {exc}") from None
            if cut.delta != int(match.group(1)):
                raise CdcError(f"{path} records delta {cut.delta}")
            self.cuts[cut.delta] = cut

    def _check_owner(self) -> None:
        owner = self.directory / "datamart"
        if owner.exists():
            recorded = owner.read_text().strip()
            if recorded != self.datamart:
                raise CdcError(
                    f"the state directory {self.directory} holds the cuts of datamart "
                    f"{recorded}, not {self.datamart}"
                )
        else:
            durable_write(owner, self.datamart.encode())

    @property
    def last(self) -> Cut | None:
        return self.cuts[max(self.cuts)] if self.cuts else None

    def get(self, delta: int) -> Cut | None:
        return self.cuts.get(delta)

    def record(self, cut: Cut) -> None:
        """Make `cut` durable; it must follow the last one."""
        last = self.last
        if last is not None and cut.delta != last.delta + 1:
            raise CdcError(f"cut of delta {cut.delta} does not follow delta {last.delta}")
        durable_write(self.directory / f"cut-{cut.delta:010d}.json", cut.to_json())
        self.cuts[cut.delta] = cut
