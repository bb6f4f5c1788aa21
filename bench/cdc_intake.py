"""`python -m bench.cdc_intake`: the origin's own intake and cutter on arrays, in process,
over the bench's messages of either format: the CPU a message, or its instructions.

    python -m bench.cdc_intake [--format dataworks] [--changes 30000] [--repeats 5]
    python -m bench.cdc_intake --instructions [--format dataworks] [--changes 30000]

`bench.cdc_chain` drives steps 1 to 4 of Qlik's path by hand; this drives what `podd-cdc
run` drives, for DataWorks as for Qlik: each fetch (up to `--batch` messages a partition)
through `Intake._read_fetch`, which holds it from read batches in the record path's order
and hands the exact decoder what they are not sure of; a delta cut whenever `MAX_ROWS`
changes are held, and the rest at the end, each framed into chunks (`record_bodies`). No
broker, no replica, no clock: what is left is the origin's own work, which the full bench's
figure (`bench.cdc_bench`) holds beside reading from Kafka and sending. Under cachegrind
(`--instructions`, `bench.cdc_instructions`) the count is the same from run to run, where
this machine's speed drifts by a third within minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cdc_instructions import MAX_ROWS, PARTITIONS, instructions, prepared
from podd_cdc.cutter import Bounds
from podd_cdc.cutters import AnyCutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.dataworks_array_cutter import DataWorksArrayCutter
from podd_cdc.intake import Intake
from podd_cdc.options import CdcOptions, CdcStats
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_cut import ColumnarDelta
from podd_kafka.record_runs import RecordRun, run_of_values
from protocol.body_writer import record_bodies
from protocol.framing import CHUNK_CODEC
from protocol.schema import LogicalSchema

#: Messages a partition a fetch (the origin reads up to `topic_reader.MOST_RECORDS`).
BATCH = 8_000
#: Rows a chunk, as the origin frames them.
CHUNK_ROWS = 1_000
_WALL = datetime(2026, 1, 1, tzinfo=UTC)


class _Reader:
    """What the intake asks of the topic reader while it reads a fetch: nothing is paused."""

    def is_paused(self, key: str) -> bool:
        return False

    def pause(self, key: str, offset: int) -> None:
        raise RuntimeError(f"the bench's messages are all good: {key} paused at {offset}")

    def resume(self, key: str) -> None:
        pass


def _cutter(fmt: str, schema: LogicalSchema, intake: Intake) -> AnyCutter:
    starts = {f"t:{p}": 0 for p in range(PARTITIONS)}
    bounds = Bounds(max_rows=MAX_ROWS)
    decoder = intake.decoder
    if fmt == "qlik":
        assert isinstance(decoder, QlikDecoder)
        return QlikArrayCutter(schema, decoder.by_name.__getitem__, starts, None, bounds)
    assert isinstance(decoder, DataWorksDecoder)
    return DataWorksArrayCutter(schema, decoder.by_name.__getitem__, starts, None, bounds)


Fetch = list[tuple[str, RecordRun]]


def fetches(messages: list[tuple[int, bytes]], batch: int = BATCH) -> list[Fetch]:
    """The messages as the reader hands them over: fetches of up to `batch` a partition,
    each partition's run a `RecordRun`."""
    runs: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
    for partition, value in messages:
        runs[partition].append(value)
    return [
        [
            (f"t:{p}", run_of_values("t", p, run, start))
            for p, whole in enumerate(runs)
            if (run := whole[start : start + batch])
        ]
        for start in range(0, max(map(len, runs), default=0), batch)
    ]


def intake_path(fmt: str, schema: LogicalSchema, fetched: list[Fetch]) -> dict[str, int]:
    """Every fetch through the intake, deltas cut and framed as they fill; what was made."""
    with tempfile.TemporaryDirectory(prefix="podd-cdc-intake-") as state:  # Qlik's catalog
        return _intake_path(fmt, schema, fetched, Path(state))


def _intake_path(
    fmt: str, schema: LogicalSchema, fetched: list[Fetch], state: Path
) -> dict[str, int]:
    options = CdcOptions(fmt, ["t"], state, columnar=True)  # type: ignore[arg-type]
    intake = Intake(options, schema, None, CdcStats())  # type: ignore[arg-type]
    cutter, reader = _cutter(fmt, schema, intake), _Reader()
    made = {"deltas": 0, "changes": 0, "chunks": 0}

    def cut(quiet: set[str]) -> bool:
        found = cutter.cut(made["deltas"], quiet, 0.0, _WALL, force=True, by_age=False)
        if not isinstance(found, ColumnarDelta):
            return False
        made["deltas"] += 1
        made["changes"] += found.cut.changes
        for name, records in found.records.items():
            table = found.tables[name].table
            bodies = record_bodies(table, *records, chunk_rows=CHUNK_ROWS, codec=CHUNK_CODEC)
            made["chunks"] += sum(1 for _ in bodies)
        return True

    for fetch in fetched:
        asyncio.run(intake._read_fetch(reader, cutter, fetch, _WALL))  # type: ignore[arg-type]
        if intake.blocked:
            raise RuntimeError(f"the bench's messages stopped a partition: {intake.blocked}")
        if cutter.pending >= MAX_ROWS:
            cut(set())
    while cutter.pending and cut(set(cutter.parts)):
        pass
    made["batched"] = intake.stats.batched
    return made


def cpu_us(data: dict[str, Any], repeats: int) -> list[float]:
    """CPU µs a message of each of `repeats` runs over every message (after one to warm)."""
    messages = data["messages"]
    fetched = fetches(messages)  # what the reader would make: not counted
    intake_path(data["fmt"], data["schema"], fetched)
    found = []
    for _ in range(repeats):
        started = time.process_time()
        intake_path(data["fmt"], data["schema"], fetched)
        found.append(round((time.process_time() - started) / len(messages) * 1e6, 2))
    return found


def _child(path: Path, messages: int, warm: int) -> None:
    """`bench.cdc_instructions`' counted child, on the intake."""
    data = pickle.loads(path.read_bytes())  # our own file, written by the parent
    for count in (warm, messages):
        if count:  # the fetches' records counted too: a small share of each message's
            intake_path(data["fmt"], data["schema"], fetches(data["messages"][:count]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_intake", description=__doc__)
    parser.add_argument("--format", choices=["qlik", "dataworks"], default="dataworks")
    parser.add_argument("--changes", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count the intake's instructions a message under cachegrind",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(Path(args.child[0]), int(args.child[1]), int(args.child[2]))
        return 0
    data = prepared(args.format, args.changes)
    if args.instructions:
        print(json.dumps(instructions(data, "bench.cdc_intake"), indent=1))
        return 0
    found = cpu_us(data, args.repeats)
    print(
        f"{data['source_changes']:,} {args.format} changes, {len(data['messages']):,} "
        f"messages: {found} CPU µs a message"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
