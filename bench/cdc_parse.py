"""Benchmark: what parsing a Qlik JSON message costs, by the project's path and by Arrow's.

    python -m bench.cdc_parse [--changes 200000] [--json]

Issue 46 proposes decoding a batch of CDC messages into Arrow columns. This measures the
parse alone, in CPU µs a message, on the messages `bench.cdc_bench` writes: msgspec's typed
envelope (the row kept raw), the origin's whole decode of a message into its change (the
fast path: envelope, row, checks, records), msgspec's envelopes of a whole batch in one call,
and pyarrow's JSON reader on the batch as newline-delimited JSON: the schema inferred, per
table (a batch of one table's messages each), and given.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pyarrow.json as arrow_json

from bench.cdc_bench import source
from podd_cdc.qlik import QlikDecoder
from podd_cdc.qlik_fast import ENVELOPE_READER, Envelope
from podd_cdc.records import Change


def _cpu_us(values: list[bytes], parse: Callable[[], Any]) -> float:
    started = time.process_time()
    parse()
    return round((time.process_time() - started) / len(values) * 1e6, 2)


def _each(values: list[bytes], decode: Callable[[bytes], Any]) -> Callable[[], None]:
    """Every message decoded in turn, each result dropped, as a stream reader would."""

    def parse() -> None:
        for value in values:
            decode(value)

    return parse


def measure(changes: int) -> dict[str, Any]:
    messages, _ = source("qlik", changes, 7)
    decoder = QlikDecoder()  # learns the tables from the topic's metadata messages
    values = [m.value for m in messages if isinstance(decoder.decode("t", m.value), Change)]
    lines = b"\n".join(values)
    read = arrow_json.ReadOptions(block_size=64 << 20, use_threads=False)
    inferred = arrow_json.read_json(io.BytesIO(lines), read_options=read)
    given = arrow_json.ParseOptions(explicit_schema=inferred.schema)
    batch = msgspec.json.Decoder(list[Envelope])
    by_table: dict[Any, list[bytes]] = {}
    for value in values:
        by_table.setdefault(ENVELOPE_READER.decode(value).messageSchemaId, []).append(value)
    tables = [b"\n".join(group) for group in by_table.values()]
    return {
        "messages": len(values),
        "mean_bytes": sum(map(len, values)) // len(values),
        "us_per_message": {
            "msgspec_envelope": _cpu_us(values, _each(values, ENVELOPE_READER.decode)),
            "origin_decode": _cpu_us(values, _each(values, lambda v: decoder.decode("t", v))),
            "msgspec_batch_one_call": _cpu_us(
                values, lambda: batch.decode(b"[" + b",".join(values) + b"]")
            ),
            "arrow_json_inferred": _cpu_us(
                values, lambda: arrow_json.read_json(io.BytesIO(lines), read_options=read)
            ),
            "arrow_json_per_table": _cpu_us(
                values,
                lambda: [
                    arrow_json.read_json(io.BytesIO(table), read_options=read) for table in tables
                ],
            ),
            "arrow_json_schema_given": _cpu_us(
                values,
                lambda: arrow_json.read_json(
                    io.BytesIO(lines), read_options=read, parse_options=given
                ),
            ),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_parse", description=__doc__)
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    found = measure(args.changes)
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        print(f"{found['messages']:,} Qlik data messages of {found['mean_bytes']} bytes on average")
        for name, us in found["us_per_message"].items():
            print(f"  {name:26} {us:6.2f} µs of CPU a message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
