"""`bench.cdc_deflate` stays runnable: it catches the body writer's blocks, and every packer
it measures makes blocks that inflate back (it raises otherwise)."""

from __future__ import annotations

from bench.cdc_deflate import delta_blocks, measure
from protocol import avro_encoder


def test_it_measures_each_packer_on_the_writers_blocks() -> None:
    found = measure(2000, 1)
    assert found["blocks"] > 0
    assert {"zlib", "cramjam"} <= set(found["us_per_change"])
    for ratio in found["packed_over_raw"].values():
        assert 0 < ratio < 1  # the bench's rows compress


def test_catching_the_blocks_leaves_the_writers_packer_in_place() -> None:
    packer = avro_encoder.BLOCK_PACKERS["deflate"]
    blocks, changes = delta_blocks(1000)
    assert blocks
    assert changes == 1000
    assert avro_encoder.BLOCK_PACKERS["deflate"] is packer
