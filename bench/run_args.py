"""`python -m bench.run`'s flags."""

from __future__ import annotations

import argparse
from pathlib import Path


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=description)
    parser.add_argument("--rows", type=int, default=1_000_000, help="the headline delta's rows")
    parser.add_argument("--preload", type=int, default=1_000_000)
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument(
        "--scale",
        default="100000,1000000,5000000",
        type=lambda s: [int(x) for x in s.split(",") if x],
    )
    parser.add_argument("--latency-deltas", type=int, default=30)
    parser.add_argument("--chunk-rows", type=int, default=1000)
    parser.add_argument("--broker", help="HOST:PORT of a Kafka broker (default: embedded Tansu)")
    parser.add_argument("--replica", help="PostgreSQL DSN (default: embedded PostgreSQL)")
    parser.add_argument(
        "--no-clickhouse",
        dest="clickhouse",
        action="store_false",
        help="skip the ClickHouse replica's run of the headline delta, latency and catch-up",
    )
    parser.add_argument(
        "--store",
        choices=["postgresql", "clickhouse"],
        default="postgresql",
        help="the agents' replica store (clickhouse: embedded, in each agent's data directory)",
    )
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument(
        "--no-cluster",
        dest="cluster",
        action="store_false",
        help="skip the headline delta on a standalone Spark cluster",
    )
    parser.add_argument("--cluster-cores", type=int, default=2, help="the cluster worker's cores")
    parser.add_argument(
        "--restore-rows",
        type=int,
        default=1_000_000,
        help="rows of the backup restored beside delta.in (0: skip)",
    )
    parser.add_argument("--restore-deltas", type=int, default=20)
    parser.add_argument(
        "--catch-up-deltas",
        type=int,
        default=1000,
        help="deltas the reference origin sends one at a time (0: skip)",
    )
    parser.add_argument("--catch-up-rows", type=int, default=1000, help="rows per catch-up delta")
    parser.add_argument(
        "--paced-seconds",
        type=float,
        default=10.0,
        help="also send two headline-size deltas spread over this many seconds, streams in "
        "table order and interleaved (0: not)",
    )
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("."), help="where BENCHMARKS.md goes")
    parser.add_argument("--work-dir", type=Path, help="scratch space (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch space")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run (a 20,000-row delta, 3 latency deltas) to check that it works",
    )
    return parser


def in_process_args(prog: str, description: str, argv: list[str] | None) -> argparse.Namespace:
    """The flags of an in-process bench that repeats a step on `bench.cdc_bench`'s messages:
    `--changes`, `--repeats` (alternating runs) and `--json`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--changes", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args(argv)
