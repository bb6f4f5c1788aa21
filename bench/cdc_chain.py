"""`python -m bench.cdc_chain`: steps 1 to 4 of the columnar origin together, against the
origin's path today, on the same Qlik messages.

    python -m bench.cdc_chain [--changes 30000] [--repeats 3] [--batch 500]
    python -m bench.cdc_chain --instructions [--changes 30000]

The messages are read in fetches (up to `--batch` of each partition, as a fetch hands
every partition's run over at once). Step 1 reads a fetch as one batch and makes each
table's changes on arrays (`podd_cdc.qlik_batch_changes`). The transaction ids get codes
(`transaction_codes`), and the order check on arrays says where the exact one would have
to begin (`qlik_order`; here nowhere, as the messages are in order). Step 2 holds the
changes in the Qlik cutter on arrays (`qlik_array_cutter`, on `qlik_held.QlikHeld`) and
cuts a delta whenever `MAX_ROWS` are held (today's side looks for one every `LOOK_EVERY`
messages), and the rest at the end. Step 3 cuts each delta (`qlik_cut.cut_delta`: the cut
log's record, with its spans and the records digest, and the rows, from the blocks of
columns its changes point into); step 4 its chunks from
the same records (`record_bodies`, `CHUNK_ROWS` rows each). A change step 1 is not sure
of stops the bench: none should be here.

The rows of one delta of everything are checked against today's cutter's, and its digest
against the records digest of today's rows.
Today's side is `bench.cdc_instructions.origin_path`: decode, check, feed, cut, frame.
"""

from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from bench.cdc_columnar import alternating, body_rows, table_changes, tables_of, today_cut
from bench.cdc_instructions import _WALL, MAX_ROWS, PARTITIONS, instructions, prepared
from podd_cdc.cutlog import partition_key
from podd_cdc.cutter import Bounds
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_array_cutter import QlikArrayCutter
from podd_cdc.qlik_batch import read_batch
from podd_cdc.qlik_batch_changes import TableChanges
from podd_cdc.qlik_delta_rows import TableBlock
from podd_cdc.qlik_feed import ReadAt, batch_lines, message_codes
from podd_cdc.qlik_held import HeldChanges, QlikHeld
from podd_cdc.transaction_codes import TransactionCodes
from protocol.body_writer import record_bodies
from protocol.framing import CHUNK_CODEC
from protocol.schema import LogicalSchema

KEYS = [partition_key("t", p) for p in range(PARTITIONS)]
#: A fetch's tables: each one's changes, and the block the cutter keeps them in.
Tables = list[tuple[TableChanges, int]]  # the bench's topic's partitions
#: Rows a chunk, as the origin frames them (`OriginOptions.chunk_rows`' default).
CHUNK_ROWS = 1000
#: Messages a partition a fetch in the counted child (`--instructions`): the origin reads
#: up to `topic_reader.MOST_RECORDS` (8,000) a partition; the bench's topics are smaller.
COUNTED_BATCH = 2000


class Chain:
    def __init__(self, schema: LogicalSchema, decoder: QlikDecoder, max_rows: int) -> None:
        self.schema = schema
        self.decoder = decoder
        self.max_rows = max_rows
        bounds = Bounds(max_rows=max_rows)
        starts = dict.fromkeys(KEYS, 0)
        self.cutter = QlikArrayCutter(schema, decoder.by_name.__getitem__, starts, None, bounds)
        self.bodies: list[dict[str, list[bytes]]] = []
        self.digests: list[str] = []
        self.changes = 0

    @property
    def held(self) -> QlikHeld:
        return self.cutter.held

    @property
    def codes(self) -> TransactionCodes:
        return self.cutter.codes

    def feed(self, runs: list[tuple[int, int, list[bytes]]]) -> None:
        """One fetch: each partition's run of messages (partition, first offset, values),
        read as one batch and held by the cutter, each partition's changes in offset order
        after the order check on arrays."""
        values = [v for _, _, run in runs for v in run]
        partition = np.concatenate([np.full(len(run), p, np.int64) for p, _, run in runs])
        offset = np.concatenate([np.arange(f, f + len(run), dtype=np.int64) for _, f, run in runs])
        batch = read_batch(values)
        tables = [
            (made, self.cutter.new_block(TableBlock(table, batch.out, made)))
            for table, made in table_changes(batch, self.decoder)
        ]
        if not tables:
            return

        def lines(codes: TransactionCodes) -> HeldChanges:
            every = [np.arange(len(made.messages), dtype=np.int64) for made, _ in tables]
            coded = message_codes(batch, np.concatenate([m.messages for m, _ in tables]), codes)
            return HeldChanges.joined(
                [
                    batch_lines(batch, made, these, _read(made, partition, offset), block, coded)
                    for (made, block), these in zip(tables, every, strict=True)
                ]
            )

        rest = self.cutter.feed_lines(lines, _WALL)
        if len(rest):
            raise ValueError("a change the exact order check would have to judge")
        self.changes += sum(len(made.messages) for made, _ in tables)
        if self.held.pending >= self.max_rows:
            self.cut(set())

    def cut(self, quiet: set[str]) -> bool:
        made = self.cutter.cut(len(self.digests), quiet, 0.0, _WALL, force=True)
        if made is None:
            return False
        self.digests.append(made.cut.digest)
        self.bodies.append(
            {
                name: [
                    body
                    for body, _ in record_bodies(
                        made.tables[name].table, *found, chunk_rows=CHUNK_ROWS, codec=CHUNK_CODEC
                    )
                ]
                for name, found in made.records.items()
            }
        )
        return True


def _read(made: TableChanges, partition: Any, offset: Any) -> ReadAt:
    """Where each of a table's changes was read (arrived at 0, a byte each)."""
    return ReadAt(partition[made.messages], offset[made.messages], 0.0, 1)


def chain_path(data: dict[str, Any], decoder: QlikDecoder, batch: int, max_rows: int) -> Chain:
    """Every message through the chain, in fetches of up to `batch` messages a partition."""
    runs: list[list[tuple[int, bytes]]] = [[] for _ in range(PARTITIONS)]
    offsets = [0] * PARTITIONS
    for partition, value in data["messages"]:
        runs[partition].append((offsets[partition], value))
        offsets[partition] += 1
    chain = Chain(data["schema"], decoder, max_rows)
    for k in range(0, max(map(len, runs)), batch):
        fetch = [
            (p, run[k][0], [v for _, v in run[k : k + batch]])
            for p, run in enumerate(runs)
            if k < len(run)
        ]
        chain.feed(fetch)
    while chain.held.pending and chain.cut(set(KEYS)):
        pass
    return chain


def measure(changes: int, repeats: int, batch: int) -> dict[str, Any]:
    data = prepared("qlik", changes)
    decoder = tables_of(data)
    whole = chain_path(data, decoder, batch, 10**9)
    (bodies,) = whole.bodies
    (digest,) = whole.digests
    same = (digest, body_rows(bodies)) == today_cut(data)
    chained, today = alternating(repeats, data, lambda: chain_path(data, decoder, batch, MAX_ROWS))
    return {
        "source_changes": data["source_changes"],
        "same_rows_as_today": same,
        "chain_us_per_change": chained,
        "today_us_per_change": today,
    }


def _child(path: Path, messages: int, warm: int) -> int:
    """`bench.cdc_instructions`' counted child, on the chain: the first `warm` messages,
    then the first `messages`, in fetches of `COUNTED_BATCH` a partition. How many changes
    the last run held."""
    data = pickle.loads(path.read_bytes())  # our own file, written by the parent
    decoder = tables_of(data)
    held = 0
    for count in (warm, messages):
        if count:
            first = dict(data, messages=data["messages"][:count])
            held = chain_path(first, decoder, COUNTED_BATCH, MAX_ROWS).changes
    return held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_chain", description=__doc__)
    parser.add_argument("--changes", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count the chain's instructions a change under cachegrind (bench.cdc_instructions)",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(Path(args.child[0]), int(args.child[1]), int(args.child[2]))
        return 0
    if args.instructions:
        counted = instructions(prepared("qlik", args.changes), "bench.cdc_chain")
        print(json.dumps(counted, indent=1))
        return 0
    found = measure(args.changes, args.repeats, args.batch)
    print(
        f"{found['source_changes']:,} Qlik changes; the same rows as today's path: "
        f"{found['same_rows_as_today']}"
    )
    print(f"  steps 1 to 4:  {found['chain_us_per_change']} CPU µs a change")
    print(f"  today's path:  {found['today_us_per_change']} CPU µs a change")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
