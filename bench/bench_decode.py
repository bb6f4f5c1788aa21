"""Benchmark: decode a `sales` chunk into Arrow batches, rows per second on one core.

    python -m bench.bench_decode [--rows 10000] [--repeat 30] [--json]

Measures `protocol.body.decode_body` (schema check, decoding, row checks, Arrow arrays) on a
body written in Prostore's upload style, for both codecs, beside fastavro's own reader
(dicts, no Arrow) as the baseline. The process is pinned to one core.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

import fastavro

from protocol.body import decode_body
from protocol.body_writer import encode_body
from protocol.ddl import parse_schema
from protocol.schema import Table

TARGET_ROWS_PER_SECOND = 300_000
MARKETING_SQL = resources.files("bench").joinpath("..", "examples", "marketing.sql")


def sales_table() -> Table:
    text = MARKETING_SQL.read_text() if MARKETING_SQL.is_file() else _FALLBACK_SALES
    return parse_schema(text).table("sales")


_FALLBACK_SALES = """CREATE TABLE marketing.sales (
  id bigint not null, transaction_date timestamp not null, product_code varchar(256) not null,
  product_units bigint not null, store_id bigint not null, description varchar(256),
  PRIMARY KEY (id)) DISTRIBUTED BY (id) DATASOURCE_TYPE ('adb');"""


def sales_rows(count: int, seed: int = 7) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    start = datetime(2024, 1, 1)
    return [
        (
            i,
            start + timedelta(microseconds=rng.randrange(10**13)),
            f"PRD-{rng.randrange(100_000):06d}",
            rng.randrange(1, 1000),
            rng.randrange(1, 500),
            None if rng.random() < 0.1 else f"sold via channel {rng.randrange(50)} — заказ {i}",
            1 if rng.random() < 0.1 else 0,
        )
        for i in range(count)
    ]


def _time(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    run()  # warm up: compile or load the kernel, fill caches
    samples = []
    rows = 0
    for _ in range(repeat):
        started = time.perf_counter()
        rows = run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), rows


def measure(rows: int, repeat: int) -> list[dict[str, Any]]:
    table = sales_table()
    data = sales_rows(rows)
    results = []
    for codec in ("null", "deflate"):
        body = encode_body(table, data, codec=codec)

        def ours(body: bytes = body) -> int:
            return sum(batch.num_rows for batch in decode_body(table, body))

        def baseline(body: bytes = body) -> int:
            return sum(1 for _ in fastavro.reader(io.BytesIO(body)))

        for name, run in (
            ("protocol.decode_body -> Arrow", ours),
            ("fastavro.reader -> dicts", baseline),
        ):
            seconds, decoded = _time(run, repeat)
            assert decoded == rows, f"{name} decoded {decoded} rows, expected {rows}"
            results.append(
                {
                    "decoder": name,
                    "codec": codec,
                    "rows": rows,
                    "body_bytes": len(body),
                    "median_seconds": seconds,
                    "rows_per_second": rows / seconds,
                }
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    results = measure(args.rows, args.repeat)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"sales chunk of {args.rows} rows, one core, median of {args.repeat} runs")
    print(f"{'decoder':32} {'codec':8} {'bytes':>9} {'ms':>8} {'rows/s':>12}")
    for r in results:
        print(
            f"{r['decoder']:32} {r['codec']:8} {r['body_bytes']:>9} "
            f"{r['median_seconds'] * 1000:>8.2f} {r['rows_per_second']:>12,.0f}"
        )
    ours = min(r["rows_per_second"] for r in results if r["decoder"].startswith("protocol"))
    verdict = "meets" if ours >= TARGET_ROWS_PER_SECOND else "MISSES"
    print(f"slowest codec: {ours:,.0f} rows/s, {verdict} the target of {TARGET_ROWS_PER_SECOND:,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
