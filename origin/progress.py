"""A terminal progress bar for deltas: redrawn in place on a terminal, a line per delta
otherwise (so logs and CI output stay readable)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from origin.session import DeltaOutcome


class DeltaProgress:
    def __init__(self, total: int | None, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = total
        self.stream = stream or sys.stdout
        self.width = width
        self.done = 0
        self.rows = 0
        self.started = time.perf_counter()
        self.tty = self.stream.isatty()

    def __call__(self, outcome: DeltaOutcome) -> None:
        self.done += 1
        self.rows += outcome.rows
        elapsed = time.perf_counter() - self.started
        rate = self.rows / elapsed if elapsed > 0 else 0.0
        counts = ""
        if outcome.result is not None:
            counts = "  ".join(
                f"{t.table_name} +{t.rows_upserted}/-{t.rows_deleted}"
                for t in outcome.result.tables
            )
        extra = f", {outcome.resends} resend(s)" if outcome.resends else ""
        line = (
            f"delta {outcome.delta_num:>4}: {outcome.rows:>7,} rows in {outcome.seconds:5.2f} s"
            f"{extra}  {counts}"
        )
        if self.total:
            filled = self.width * self.done // self.total
            bar = "#" * filled + "." * (self.width - filled)
            head = (
                f"[{bar}] {self.done}/{self.total} deltas, {self.rows:,} rows, {rate:,.0f} rows/s"
            )
        else:
            head = f"{self.done} deltas, {self.rows:,} rows, {rate:,.0f} rows/s"
        if self.tty:
            self.stream.write(f"\r\x1b[K{line}\n\x1b[K{head}")
            if self.total and self.done >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"{head} | {line}\n")
        self.stream.flush()
