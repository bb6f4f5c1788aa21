"""The loader's compiled steps built into numba's cache before a first delta (`replica-agent
warm-up`): a chunk body decoded (`protocol.avro_kernel`), its keys and rows encoded as COPY
tuples (`replica_store.pg_copy`), its keys split into slices (`slice_encode`). Each is a
numba kernel compiled at its first call and cached (`podd_cdc.warm_up` says where); the
agent compiles them inside its first delta otherwise, about 4.5 CPU s (the warm-up takes
9-11, as it compiles the body writer too, to write its chunks).

It runs `encode_slice`, what a staging task runs, over chunk files of made-up rows of a
table of every Prostore type: one chunk without a NULL and one with NULLs in every column
that takes them (Arrow leaves out a validity buffer where nothing is NULL, and the kernels
meet either), whole and split in two slices.
"""

from __future__ import annotations

import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from protocol.body import BodyFormat
from protocol.body_writer import encode_body
from protocol.ddl import parse_schema
from protocol.kernel_cache import WarmedUp, warmed_up
from protocol.ocf import OcfLimits
from protocol.schema import Table
from spark_loader.slice_encode import TableSlice, encode_slice

EVERY_TYPE_DDL = """
CREATE TABLE warm_up.every_type (
  id bigint not null, b boolean, i32 int32, i int, f float, d double, c char(3),
  v varchar(10), vs varchar, u uuid, l link, dt date, tm time, ts timestamp, s string,
  lg long, PRIMARY KEY (id)
) DISTRIBUTED BY (id);
"""
ROWS = 200
#: The packages whose kernels this warm-up counts.
KERNEL_PACKAGES = ("protocol.", "replica_store.", "spark_loader.")


def _row(n: int, nulls: bool) -> tuple[Any, ...]:
    when = datetime(2026, 1, 1, 12, 0, 0, 125_000) + timedelta(minutes=n)
    values: tuple[Any, ...] = (
        n % 2 == 0,
        n,
        -n,
        n + 0.5,
        n * 1.25,
        "abc",
        f"v{n}"[:10],
        f"varchar {n}",
        f"00000000-0000-0000-0000-{n:012d}",
        f"https://example.org/{n}",
        date(2026, 1, 1) + timedelta(days=n),
        when.time(),
        when,
        f"строка {n}",
        n * 1_000_003,
    )
    if nulls and n % 3 == 0:
        values = (None,) * len(values)
    return (n, *values, n % 2 if n % 5 else 1)  # the key, the values, sys_op


def warm_up_loader() -> WarmedUp:
    """Stage made-up chunks of the every-type table once; what numba did meanwhile."""
    started = time.process_time()
    table = parse_schema(EVERY_TYPE_DDL).table("every_type")
    bodies = [
        encode_body(table, [_row(n, nulls) for n in range(ROWS)], codec="deflate")
        for nulls in (False, True)
    ]
    stage_bodies(table, bodies)
    return warmed_up(KERNEL_PACKAGES, started)


def stage_bodies(table: Table, bodies: list[bytes]) -> None:
    """`encode_slice` over chunk files of `bodies` (in chunk order), whole and in two
    slices."""
    with tempfile.TemporaryDirectory(prefix="podd-warm-up-") as folder:
        chunks = []
        for number, body in enumerate(bodies):
            path = Path(folder) / f"chunk-{number}.avro"
            path.write_bytes(body)
            chunks.append((number, str(path)))
        size = sum(len(body) for body in bodies)
        for slices in (1, 2):
            for share in range(slices):
                task = TableSlice(0, share, slices, tuple(chunks), size)
                encode_slice(task, [table], OcfLimits(), BodyFormat.DELTA_IN)
