"""`python -m tools.cdc_write`: fill a topic as Qlik Replicate or DataWorks would, from the
seeded source database, to try `podd-cdc run` (the docs, the tests, a benchmark by hand). A
tool run from a checkout, not shipped: a real deployment reads the vendor's own topics.

    python -m tools.cdc_write --format qlik|dataworks --topic T --broker kafka://HOST:PORT
                          [--transactions 1000] [--max-transaction-changes 10]
                          [--full-load 100] [--partitions 4] [--encoding json|avro]
                          [--compression gzip|snappy|lz4|zstd] [--seed 0]

Tables: the demo datamart's (`sales`, `stores`, `agreements`) in the vendor's own types, and
for Qlik one column of every type (`all_types`), for DataWorks a table without a key.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence

from podd_kafka.settings import KafkaSettings
from tools.cdc_write.dataworks_writer import DataWorksWriter
from tools.cdc_write.produce import produce
from tools.cdc_write.qlik_writer import QlikWriter, Written
from tools.cdc_write.source import SourceDatabase
from tools.cdc_write.tables import dataworks_marketing, qlik_every_type, qlik_marketing


def build_parser() -> argparse.ArgumentParser:
    write = argparse.ArgumentParser(
        prog="python -m tools.cdc_write", description="write a demo CDC topic (Qlik or DataWorks)"
    )
    write.add_argument("--format", dest="cdc_format", choices=("qlik", "dataworks"), required=True)
    write.add_argument("--topic", required=True)
    write.add_argument("--broker", required=True, help="Kafka bootstrap, kafka://HOST:PORT")
    write.add_argument("--transactions", type=int, default=1000)
    write.add_argument("--max-transaction-changes", type=int, default=10)
    write.add_argument("--full-load", type=int, default=100, help="Qlik REFRESH rows per table")
    write.add_argument("--partitions", type=int, default=4)
    write.add_argument("--encoding", choices=("json", "avro"), default="json")
    write.add_argument("--compression", choices=("gzip", "snappy", "lz4", "zstd"))
    write.add_argument("--seed", type=int, default=0)
    return write


def messages(args: argparse.Namespace) -> tuple[list[Written], int]:
    """The topic's messages, and how many changes they carry."""
    qlik = args.cdc_format == "qlik"
    tables = (*qlik_marketing(), qlik_every_type()) if qlik else dataworks_marketing()
    db = SourceDatabase(tables, seed=args.seed, start_ms=int(time.time() * 1000))
    transactions = [
        db.transaction(db.rng.randint(1, args.max_transaction_changes))
        for _ in range(args.transactions)
    ]
    changes = sum(len(t.changes) for t in transactions)
    if qlik:
        writer = QlikWriter(
            tables, encoding=args.encoding, partitions=args.partitions, seed=args.seed
        )
        full = db.full_load(args.full_load)
        found = [*writer.metadata(), *writer.refresh(full), *writer.transactions(transactions)]
        return found, changes + len(full)
    dataworks = DataWorksWriter(tables, partitions=args.partitions, seed=args.seed)
    return list(dataworks.transactions(transactions)), changes


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = KafkaSettings(broker=args.broker)
    found, changes = messages(args)
    landed = asyncio.run(
        produce(
            settings,
            settings.bootstrap_servers(),
            args.topic,
            args.partitions,
            found,
            compression=args.compression,
        )
    )
    print(
        f"{len(landed):,} message(s) written to {args.topic}: {args.transactions:,} "
        f"transactions, {changes:,} changes ({args.cdc_format})"
    )
    return 0
