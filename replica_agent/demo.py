"""`podd-demo`: the README's main command.

Until the agent, the loader and the broker exist (issues 3-5), it runs what exists: a seeded
workload over the `marketing` datamart, framed into `delta.in` messages exactly as an origin
sends them, every key and body decoded back through `protocol`, checked against what was
sent, and applied to the reference model of the replica.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path

from protocol.apply_model import DeltaRow, ReplicaModel, apply_delta, rows_as_of
from protocol.body import decode_body
from protocol.codec import decode_delta_in_key, encode_delta_in_key
from protocol.ddl import parse_schema
from protocol.framing import frame_delta
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec

_DEFAULT_SCHEMA = Path(str(resources.files("replica_agent"))).parent / "examples" / "marketing.sql"


def _receive(schema: LogicalSchema, key_bytes: bytes, body: bytes) -> tuple[str, list[DeltaRow]]:
    """What a replica does with one message: decode its key, then its body."""
    key = decode_delta_in_key(key_bytes)
    table = schema.table(key.table_name)
    rows = [
        DeltaRow(tuple(values[:-1]), values[-1])
        for batch in decode_body(table, body)
        for values in zip(*(column.to_pylist() for column in batch.columns), strict=True)
    ]
    return table.name, rows


def run(schema: LogicalSchema, deltas: int, spec: WorkloadSpec, chunk_rows: int) -> int:
    workload = Workload(schema, spec)
    replica = ReplicaModel(schema)
    start_date = datetime(2026, 1, 1, tzinfo=UTC)
    messages = wire_bytes = rows_total = 0
    decode_seconds = 0.0
    started = time.perf_counter()
    print(f"datamart {schema.datamart}: tables {', '.join(t.name for t in schema)}")
    for delta_num in range(deltas):
        sent = workload.next_delta()
        received: dict[str, list[DeltaRow]] = {t.name: [] for t in schema}
        chunks = list(
            frame_delta(
                schema,
                request_id=str(uuid.uuid4()),
                delta_num=delta_num,
                delta_date=start_date + timedelta(hours=delta_num),
                rows_by_table=sent,
                chunk_rows=chunk_rows,
            )
        )
        for chunk in chunks:
            key_bytes = encode_delta_in_key(chunk.key)
            wire_bytes += len(key_bytes) + len(chunk.body)
            t0 = time.perf_counter()
            table_name, rows = _receive(schema, key_bytes, chunk.body)
            decode_seconds += time.perf_counter() - t0
            received[table_name].extend(rows)
        if received != sent:
            print(f"delta {delta_num}: the rows decoded differ from the rows sent")
            return 1
        replica, counts = apply_delta(replica, delta_num, start_date, received)
        messages += len(chunks)
        rows_total += sum(c.rows_received for c in counts)
        figures = "  ".join(f"{c.table_name} +{c.rows_upserted}/-{c.rows_deleted}" for c in counts)
        bar = "#" * (delta_num + 1) + "." * (deltas - delta_num - 1)
        print(f"[{bar}] delta {delta_num:>3}: {len(chunks):>3} chunks  {figures}")
    elapsed = time.perf_counter() - started
    print()
    print(f"deltas {deltas}, rows {rows_total}, delta.in messages {messages}, {wire_bytes:,} bytes")
    if decode_seconds > 0:
        rate = rows_total / decode_seconds
        print(f"received (decoded into Python rows) at {rate:,.0f} rows/s; run {elapsed:.1f}s")
    for table in schema:
        state = replica.tables[table.name]
        first = len(rows_as_of(state, 0))
        print(
            f"  {table.name:<12} live rows {len(state.actual):>6}  closed versions "
            f"{len(state.history):>6}  (as of delta 0: {first})"
        )
    print()
    print("Only the protocol layer and the reference model ran: the agent, the Spark loader")
    print("and the broker come with the next issues, and this command will then drive them.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="podd-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--schema", type=Path, default=_DEFAULT_SCHEMA, help="Prostore DDL file")
    parser.add_argument("--deltas", type=int, default=20)
    parser.add_argument("--rows-per-delta", type=int, default=3000)
    parser.add_argument("--chunk-rows", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    schema = parse_schema(args.schema.read_text())
    spec = WorkloadSpec(rows_per_delta=args.rows_per_delta, seed=args.seed)
    return run(schema, args.deltas, spec, args.chunk_rows)


if __name__ == "__main__":
    raise SystemExit(main())
