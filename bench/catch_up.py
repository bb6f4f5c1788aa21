"""Catch-up: a replica behind by many small deltas, fed by the reference origin.

The protocol sends one delta at a time and waits for its `delta.in.rs`, so a replica that
catches up after an outage runs at 1 / (per-delta round trip). The reference origin
(`origin.reference.ReferenceOrigin`) asks the replica's state, then frames, sends and waits for
each delta in turn, as it does in production. The deltas are generated before the clock
starts (the generator is the test workload's, not the origin's job); framing them (Avro
encoding) is the origin's job and is timed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.agent_run import AgentConfig, running_agent
from bench.datagen import bench_schema
from origin.client import OriginClient
from origin.reference import ReferenceOrigin
from origin.session import DeltaOutcome, SessionOptions
from origin.sources import SourceDelta, WorkloadSource
from podd_kafka.settings import KafkaSettings
from protocol.schema import LogicalSchema
from protocol.workload import WorkloadSpec


@dataclass
class PreparedSource:
    """Deltas 0..n-1, generated beforehand (a `DeltaSource`)."""

    schema: LogicalSchema
    deltas: list[SourceDelta]
    first_read: float | None = None  # perf_counter of the first delta read

    def delta(self, num: int) -> SourceDelta | None:
        if self.first_read is None:
            self.first_read = time.perf_counter()
        return self.deltas[num] if 0 <= num < len(self.deltas) else None


def prepare(datamart: str, tables: int, deltas: int, rows: int) -> PreparedSource:
    schema = bench_schema(datamart, tables)
    source = WorkloadSource(schema, WorkloadSpec(rows_per_delta=rows, seed=7), last=deltas - 1)
    generated = []
    for n in range(deltas):
        delta = source.delta(n)
        assert delta is not None
        generated.append(delta)
    return PreparedSource(schema, generated)


async def catch_up(
    kafka: KafkaSettings,
    agent: AgentConfig,
    work_dir: Path,
    *,
    datamart: str,
    deltas: int,
    rows: int,
    tables: int,
) -> dict[str, Any]:
    """A fresh agent and replica datamart; `deltas` deltas sent by the reference origin,
    timed from reading the first (after the `delta.rq` handshake) to the last answer."""
    print(f"catch-up: generating {deltas:,} deltas of {rows:,} rows over {tables} tables")
    source = prepare(datamart, tables, deltas, rows)
    done: list[DeltaOutcome] = []
    answered: list[float] = []

    def on_delta(outcome: DeltaOutcome) -> None:
        answered.append(time.perf_counter())
        done.append(outcome)

    with running_agent(
        agent, [source.schema], work_dir / "agent-catch-up", kafka.topic_environment()
    ):
        async with OriginClient(kafka, kafka.bootstrap_servers()) as client:
            driver = ReferenceOrigin(client, source, SessionOptions(chunk_rows=1000), on_delta)
            print(f"catch-up: sending {deltas:,} deltas, one at a time", flush=True)
            started = time.perf_counter()
            await driver.run(deltas)
    if len(done) != deltas or source.first_read is None:
        raise RuntimeError(f"catch-up: {len(done)} of {deltas} deltas applied")
    seconds = answered[-1] - source.first_read
    cycles = sorted(b - a for a, b in zip([source.first_read, *answered], answered, strict=False))
    total_rows = sum(o.rows for o in done)
    return {
        "deltas": deltas,
        "rows_per_delta": rows,
        "tables": tables,
        "seconds": round(seconds, 2),
        "handshake_seconds": round(source.first_read - started, 2),
        "deltas_per_second": round(deltas / seconds, 2),
        "rows_per_second": round(total_rows / seconds),
        "cycle_median_seconds": round(statistics.median(cycles), 4),
        "cycle_p95_seconds": round(cycles[min(len(cycles) - 1, round(0.95 * len(cycles)) - 1)], 4),
        "resends": sum(o.resends for o in done),
    }
