"""Benchmark: what packing a CDC delta's Avro blocks in `deflate` costs, by zlib, by cramjam
(the body writer's), and by ISA-L (`isal`, not a dependency: measured where installed).

    python -m bench.cdc_deflate [--changes 30000] [--repeats 3] [--json]

The blocks are the ones the columnar origin writes for `bench.cdc_bench`'s Qlik messages
(`bench.cdc_columnar`'s chain: a body per table of the last change per key), caught as the
body writer packs them. Each packer runs on all of them in turn, alternating (this machine's
speed drifts), at the writer's level (`protocol.avro_encoder.DEFLATE_LEVEL`); every block
it makes must inflate back with zlib (Avro's `deflate` is raw RFC 1951). Figures: CPU µs a
source change, and the packed bytes over the raw ones.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable
from typing import Any

from bench.cdc_columnar import table_bodies, tables_of
from bench.cdc_instructions import prepared
from bench.run_args import in_process_args
from podd_cdc.qlik_batch import read_batch
from protocol import avro_encoder
from protocol.avro_encoder import DEFLATE_LEVEL

#: Messages read a batch, as the origin's intake reads them at most.
BATCH = 2000


def _zlib(block: bytes) -> bytes:
    packer = zlib.compressobj(DEFLATE_LEVEL, zlib.DEFLATED, -15)
    return packer.compress(block) + packer.flush()


#: zlib as the writer packed before; cramjam is the body writer's own packer, taken from it.
PACKERS: dict[str, Callable[[bytes], bytes]] = {
    "zlib": _zlib,
    "cramjam": avro_encoder.BLOCK_PACKERS["deflate"],
}

try:
    from isal import isal_zlib  # type: ignore[import-not-found,unused-ignore]

    def _isal(block: bytes) -> bytes:
        packer = isal_zlib.compressobj(DEFLATE_LEVEL, isal_zlib.DEFLATED, -15)
        return bytes(packer.compress(block) + packer.flush())

    PACKERS["isal"] = _isal
except ImportError:
    pass


def delta_blocks(changes: int) -> tuple[list[bytes], int]:
    """The raw blocks the body writer packs for `changes` Qlik source changes."""
    data = prepared("qlik", changes)
    messages = [value for _, value in data["messages"]]
    tables = tables_of(data)
    caught: list[bytes] = []
    packers = avro_encoder.BLOCK_PACKERS
    writer_packs = packers["deflate"]

    def catch(block: bytes) -> bytes:
        caught.append(block)
        return writer_packs(block)

    packers["deflate"] = catch
    try:
        for first in range(0, len(messages), BATCH):
            table_bodies(read_batch(messages[first : first + BATCH]), tables)
    finally:
        packers["deflate"] = writer_packs
    return caught, data["source_changes"]


def measure(changes: int, repeats: int) -> dict[str, Any]:
    blocks, source_changes = delta_blocks(changes)
    raw = sum(map(len, blocks))
    cpu: dict[str, list[float]] = {name: [] for name in PACKERS}
    ratio: dict[str, float] = {}
    for _ in range(repeats):
        for name, pack in PACKERS.items():
            started = time.process_time()
            packed = [pack(block) for block in blocks]
            cpu[name].append(round((time.process_time() - started) / source_changes * 1e6, 2))
            if any(zlib.decompress(p, -15) != b for p, b in zip(packed, blocks, strict=True)):
                raise AssertionError(f"{name} made a block zlib does not inflate back")
            ratio[name] = round(sum(map(len, packed)) / raw, 3)
    return {
        "source_changes": source_changes,
        "blocks": len(blocks),
        "mean_block_bytes": round(raw / len(blocks)),
        "level": DEFLATE_LEVEL,
        "us_per_change": cpu,
        "packed_over_raw": ratio,
    }


def main(argv: list[str] | None = None) -> int:
    args = in_process_args("python -m bench.cdc_deflate", __doc__ or "", argv)
    found = measure(args.changes, args.repeats)
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    print(
        f"{found['blocks']:,} blocks of {found['mean_block_bytes']:,} bytes on average, "
        f"{found['source_changes']:,} source changes, level {found['level']}"
    )
    for name, runs in found["us_per_change"].items():
        ratio = found["packed_over_raw"][name]
        print(f"  {name:8} {runs} CPU µs a change; packed/raw {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
