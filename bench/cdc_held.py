"""Holding Qlik changes and cutting them: the cutter's objects against the arrays of step 2.

    python -m bench.cdc_held [--changes 100000] [--batch 500] [--max-rows 20000] [--pairs 3]

The same changes (transactions of 1 to 4 changes over 4 partitions, sequences in order,
fed a batch of one partition at a time) go to `Cutter.feed` (a `Change` each, made before
the clock starts) and to `QlikHeld.feed` (arrays), each cut whenever it holds `--max-rows`
and at the end, in alternating runs. Timed: feeding, looking and taking (the cutter's
`cut`: the changes carry no rows, so that its rows and digest, step 3's, cost nothing).
CPU seconds of this process.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.qlik_held import NO_TIME, HeldChanges, QlikHeld
from podd_cdc.records import Change, Position
from protocol.ddl import parse_schema

PARTITIONS = 4
SCHEMA = parse_schema("CREATE TABLE dm.t (k BIGINT NOT NULL, PRIMARY KEY (k));")
WALL = datetime(2026, 1, 1, tzinfo=UTC)


def _changes(count: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 5, count)
    transaction = np.repeat(np.arange(count), sizes)[:count]
    first = np.concatenate([[True], transaction[1:] != transaction[:-1]])
    starts = np.maximum.accumulate(np.where(first, np.arange(count), 0))
    counter = np.arange(count) - starts + 1
    last = np.append(transaction[1:] != transaction[:-1], True)
    sequence = np.arange(count, dtype=np.int64) + 20260101000000000
    return {
        "partition": transaction % PARTITIONS,
        "transaction": transaction,
        "counter": counter,
        "last": last,
        "high": sequence,
        "low": np.zeros(count, np.int64),
    }


def _batches(made: dict[str, Any], batch: int) -> list[Any]:
    """Each partition's changes in order, cut into batches, the partitions taken in turn."""
    lines = [np.nonzero(made["partition"] == p)[0] for p in range(PARTITIONS)]
    cut = [np.array_split(line, max(1, len(line) // batch)) for line in lines]
    return [part[k] for k in range(max(map(len, cut))) for part in cut if k < len(part)]


def run_cutter(made: dict[str, Any], batches: list[Any], max_rows: int) -> tuple[float, int]:
    keys = [partition_key("q", p) for p in range(PARTITIONS)]
    cutter = Cutter("qlik", SCHEMA, dict.fromkeys(keys, 0), None, Bounds(max_rows, max_age=1e9))
    texts = [f"{h:017d}{0:018d}".rjust(40, "0") for h in made["high"].tolist()]
    changes = [
        Change((), t, (t,), (t,), None, f"t{x}", c, bool(la))
        for t, x, c, la in zip(
            texts, made["transaction"].tolist(), made["counter"].tolist(), made["last"], strict=True
        )
    ]
    taken = deltas = 0
    started = time.process_time()
    for lines in batches:
        partition = int(made["partition"][lines[0]])
        key = keys[partition]
        for line in lines.tolist():
            cutter.feed(Position("q", partition, line), changes[line], 0.0, 1, key)
        if cutter.pending >= max_rows:
            taken += _cutter_take(cutter, set(), deltas)
            deltas += 1
    while cutter.pending:  # the end: every partition read, a delta at a time
        cut = _cutter_take(cutter, set(keys), deltas)
        if not cut:
            break  # (an open transaction: the caller's count tells)
        taken, deltas = taken + cut, deltas + 1
    return time.process_time() - started, taken


def _cutter_take(cutter: Cutter, quiet: set[str], delta: int) -> int:
    made = cutter.cut(delta, quiet, 0.0, WALL, force=True)
    return made[0].changes if made is not None else 0


def run_held(made: dict[str, Any], batches: list[Any], max_rows: int) -> tuple[float, int]:
    held = QlikHeld([0] * PARTITIONS)
    taken = 0
    started = time.process_time()
    for lines in batches:
        held.feed(
            HeldChanges(
                made["partition"][lines],
                lines,
                (made["high"][lines], made["low"][lines]),
                made["transaction"][lines],
                made["counter"][lines],
                made["last"][lines],
                np.zeros(len(lines)),
                np.ones(len(lines), np.int64),
                np.zeros(len(lines), np.bool_),
                np.full(len(lines), NO_TIME, np.int64),
                np.zeros(len(lines), np.int64),
                lines,
                np.zeros(len(lines), np.int64),
            )
        )
        if held.pending >= max_rows:
            taken += len(held.take(held.look(set(), max_rows)).changes)
    while held.pending:
        look = held.look(set(range(PARTITIONS)), max_rows)
        if not look.count:
            break
        taken += len(held.take(look).changes)
    return time.process_time() - started, taken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_held", description=__doc__)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--max-rows", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    made = _changes(args.changes)
    batches = _batches(made, args.batch)
    for _ in range(args.pairs):
        for name, run in (("cutter", run_cutter), ("arrays", run_held)):
            seconds, taken = run(made, batches, args.max_rows)
            assert taken == args.changes, (name, taken)
            print(f"{name}: {seconds / args.changes * 1e6:.2f} CPU us a change", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
