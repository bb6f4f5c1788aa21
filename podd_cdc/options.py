"""What a CDC run is told (`CdcOptions`) and what it reports (`CdcStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from podd_cdc.cutter import Bounds
from podd_cdc.membership import Format


@dataclass(frozen=True)
class CdcOptions:
    fmt: Format
    topics: list[str]
    state_dir: Path
    bounds: Bounds = field(default_factory=Bounds)
    settle: float = 2.0
    dead_letter_topic: str | None = None
    start_latest: bool = False
    start_offsets: dict[str, int] = field(default_factory=dict)
    until_idle: float | None = None
    metadata_wait: float = 30.0
    topic_tables: dict[str, str] = field(default_factory=dict)
    #: Hold and cut on arrays, fed from read batches (`podd_cdc.qlik_array_cutter`,
    #: `podd_cdc.dataworks_array_cutter`); False: a change at a time (`podd_cdc.cutter`).
    columnar: bool = True

    @property
    def on_arrays(self) -> bool:
        """Whether changes are held and cut on arrays (`columnar`, either format)."""
        return self.columnar


@dataclass
class CdcStats:
    """What a run did, and where its time went (busy seconds per phase; reading runs beside
    cutting and sending, so the phases overlap on the clock)."""

    messages: int = 0  # read from the source topics
    batched: int = 0  # ... of which held from read batches (`columnar`)
    deltas: int = 0
    changes: int = 0
    rows: int = 0
    dead_lettered: int = 0
    rebuilt: int = 0
    held_peak: int = 0  # the most changes the cutter held at once
    parse_seconds: float = 0.0  # decoding messages
    cut_seconds: float = 0.0  # feeding the cutter (on arrays: decoding too), cutting, recording
    frame_seconds: float = 0.0  # encoding chunks
    load_seconds: float = 0.0  # producing chunks and waiting for delta.in.rs
    first_read: float | None = None  # monotonic time of the first message read
    first_sent: float | None = None  # ... of the first delta's send begun
    last_sent: float | None = None  # ... of the last delta's send begun
    last_answer: float | None = None  # ... and of the last delta.in.rs
