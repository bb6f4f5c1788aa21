"""Malformed and hostile messages for the agent's fuzz test, made from a seed.

Each maker returns (kind, topic, key, value): `topic` is "delta.in" or "delta.rq". Kinds:
random bytes, bit flips and truncations of valid keys and bodies, absurd numbers, huge
strings, foreign codecs, compression bombs, and keys naming datamarts that are not served.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from conformance.forges.ocf import SYNC, header, zigzag
from protocol.avro_schemas import schema_json
from protocol.body_writer import body_schema, encode_body
from protocol.codec import encode_delta_in_key, encode_message
from protocol.messages import DeltaInKey, DeltaRequest
from protocol.schema import LogicalSchema

Message = tuple[str, str, bytes | None, bytes | None]
MiB = 2**20


def _bomb(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"".join(packer.compress(bytes(MiB)) for _ in range(size // MiB)) + packer.flush()


class HostileMessages:
    """A seeded source of malformed messages aimed at one served datamart."""

    def __init__(self, schema: LogicalSchema, seed: int) -> None:
        self.schema = schema
        self.rng = random.Random(seed)
        sales = schema.table("sales")
        self.body = encode_body(sales, [(i, 0, "P", 1, 1, None, 0) for i in range(40)])
        self.body_bomb = header(body_schema(sales), "deflate") + _raw_block(_bomb(512 * MiB))
        self.key_bomb = header(schema_json("DeltaInKey"), "deflate") + _raw_block(_bomb(32 * MiB))
        self.makers: list[Callable[[], Message]] = [
            self.random_bytes,
            self.flipped_key,
            self.flipped_body,
            self.truncated,
            self.absurd_numbers,
            self.huge_strings,
            self.foreign_codec,
            self.bombs,
            self.unknown_datamart,
            self.bad_delta_rq,
        ]

    def key(self, **changes: object) -> DeltaInKey:
        base = DeltaInKey(
            request_id=f"fuzz-{self.rng.randrange(10**9)}",
            datamart=self.schema.datamart,
            delta_num=0,
            delta_date=datetime(2026, 1, 1, tzinfo=UTC),
            subscription="SELECT * FROM fuzz",
            table_name="sales",
            stream_number=1,
            stream_total=3,
            chunk_number=1,
            is_last_chunk=False,
        )
        return base.model_copy(update=changes)

    def __iter__(self) -> Iterator[Message]:
        while True:
            yield self.rng.choice(self.makers)()

    def _flip(self, data: bytes) -> bytes:
        out = bytearray(data)
        for _ in range(self.rng.randint(1, 4)):
            out[self.rng.randrange(len(out))] ^= 1 << self.rng.randrange(8)
        return bytes(out)

    # --- the makers --------------------------------------------------------------------
    def random_bytes(self) -> Message:
        size = self.rng.choice([0, 1, 4, 20, 300, 5000])
        blob = self.rng.randbytes(size)
        if self.rng.random() < 0.5:
            blob = b"Obj\x01" + blob
        topic = self.rng.choice(["delta.in", "delta.rq"])
        return "random bytes", topic, self.rng.randbytes(size // 2), blob

    def flipped_key(self) -> Message:
        return "bit-flipped key", "delta.in", self._flip(encode_delta_in_key(self.key())), self.body

    def flipped_body(self) -> Message:
        return (
            "bit-flipped body",
            "delta.in",
            encode_delta_in_key(self.key()),
            self._flip(self.body),
        )

    def truncated(self) -> Message:
        key, body = encode_delta_in_key(self.key()), self.body
        if self.rng.random() < 0.5:
            return "truncated key", "delta.in", key[: self.rng.randrange(len(key))], body
        return "truncated body", "delta.in", key, body[: self.rng.randrange(len(body))]

    def absurd_numbers(self) -> Message:
        big = self.rng.choice([2**62, 2**63 - 1, -(2**63), -1, 0, 10**12])
        field = self.rng.choice(["stream_total", "stream_number", "chunk_number", "delta_num"])
        return "absurd numbers", "delta.in", encode_delta_in_key(self.key(**{field: big})), None

    def huge_strings(self) -> Message:
        field = self.rng.choice(["datamart", "request_id", "table_name", "subscription"])
        text = "x" * self.rng.choice([300, 70_000, 400_000])
        key = encode_delta_in_key(self.key(**{field: text}), codec="deflate")
        return "huge strings", "delta.in", key, self.body

    def foreign_codec(self) -> Message:
        codec = self.rng.choice(["bzip2", "xz", "brotli", "lz4"])
        body = header(body_schema(self.schema.table("sales")), codec) + _raw_block(b"\x00" * 9)
        key = encode_delta_in_key(self.key())
        if self.rng.random() < 0.5:
            return "foreign codec", "delta.in", key, body
        return "foreign codec", "delta.in", header(schema_json("DeltaInKey"), codec), None

    def bombs(self) -> Message:
        if self.rng.random() < 0.5:
            return "compression bomb", "delta.in", self.key_bomb, None
        return "compression bomb", "delta.in", encode_delta_in_key(self.key()), self.body_bomb

    def unknown_datamart(self) -> Message:
        name = f"nope_{self.rng.randrange(10**6)}"
        return "unknown datamart", "delta.in", encode_delta_in_key(self.key(datamart=name)), None

    def bad_delta_rq(self) -> Message:
        request = DeltaRequest(
            request_id="r" * self.rng.choice([10, 300, 60_000]),
            datamart=self.rng.choice([self.schema.datamart, "nope", "d" * 1000]),
            sent_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        value = encode_message(request, codec="deflate")
        if self.rng.random() < 0.3:
            value = self._flip(value)
        return "malformed delta.rq", "delta.rq", self.schema.datamart.encode(), value


def _raw_block(raw: bytes, count: int = 1) -> bytes:
    return zigzag(count) + zigzag(len(raw)) + raw + SYNC
