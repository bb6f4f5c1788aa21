"""The staged transfer: the hand-over from the agent to the loader.

A transfer is a directory holding one file per chunk body, exactly as it arrived on
`delta.in` (`s000001-c000000001.avro`: stream 1, chunk 1), and `manifest.json`, written last,
once the transfer is complete:

    {"format_version": 1, "datamart": "marketing", "delta_num": 7,
     "delta_date": "2026-01-01T07:00:00Z", "request_id": "...",
     "streams": [{"stream_number": 1, "table_name": "sales", "chunk_count": 3}, ...]}

Every file is written durably (write, fsync, atomic rename, fsync of the directory), so after
a crash a file is either whole or absent, and a manifest means every chunk it names is there.
The loader needs only this directory: it knows nothing of Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from podd_runtime.files import durable_write
from protocol.body import BodyFormat
from protocol.chunk_files import ChunkFile
from protocol.chunk_range import ChunkRange
from protocol.messages import Long, UtcTimestamp
from replica_store.errors import StagedTransferError

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1


class StreamManifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    stream_number: int = Field(ge=1)
    table_name: str
    chunk_count: int = Field(ge=1)
    #: What the stream's chunk bodies decompress to (None: not measured; files sizes then).
    decoded_bytes: int | None = Field(default=None, ge=0)
    #: A piece of a stream (never in a sealed transfer's manifest): its chunks
    #: `first_chunk`..`chunk_count`, and whether later chunks follow (`partial`: the
    #: stream's last chunk is not among them). `replica_store.pieces` applies such pieces.
    #: `chunks` reads the three fields as one `ChunkRange`; the file keeps them for its format.
    first_chunk: int = Field(default=1, ge=1)
    partial: bool = False

    @model_validator(mode="after")
    def _first_within(self) -> StreamManifest:
        if self.first_chunk > self.chunk_count:
            raise ValueError("first_chunk is past chunk_count")
        return self

    @classmethod
    def of(
        cls, stream_number: int, table_name: str, chunks: ChunkRange, decoded_bytes: int | None
    ) -> StreamManifest:
        return cls(
            stream_number=stream_number,
            table_name=table_name,
            first_chunk=chunks.first,
            chunk_count=chunks.last,
            partial=not chunks.ends_stream,
            decoded_bytes=decoded_bytes,
        )

    @property
    def chunks(self) -> ChunkRange:
        """The chunks it hands over (the on-disk fields' reading of them)."""
        return ChunkRange(self.first_chunk, self.chunk_count, not self.partial)

    @property
    def whole(self) -> bool:
        """Every chunk of the stream, from its first to its last."""
        return self.chunks.is_whole


class TransferManifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = FORMAT_VERSION
    datamart: str
    delta_num: Long
    delta_date: UtcTimestamp
    request_id: str
    streams: tuple[StreamManifest, ...]
    #: Who wrote the chunk bodies: `delta.in` senders, or a Prostore backup (a restore).
    body_format: BodyFormat = BodyFormat.DELTA_IN


@dataclass(frozen=True)
class StagedTransfer:
    """A complete transfer on disk."""

    directory: Path
    manifest: TransferManifest

    def chunk_path(self, stream_number: int, chunk_number: int) -> Path:
        return self.directory / ChunkFile(stream_number, chunk_number).name

    def chunks_of(self, table_name: str) -> list[tuple[int, Path]]:
        """(chunk number, file) of the table's stream, in chunk order."""
        for stream in self.manifest.streams:
            if stream.table_name == table_name:
                return [
                    (n, self.chunk_path(stream.stream_number, n)) for n in stream.chunks.numbers
                ]
        return []

    def sized_chunks(self, table_name: str) -> list[tuple[int, Path, int]]:
        """(chunk number, file, size) of a table's stream; sizes share what the stream's
        bodies decompress to (recorded by the agent), else they are file sizes."""
        files = [(n, p, p.stat().st_size) for n, p in self.chunks_of(table_name)]
        decoded = next(
            (s.decoded_bytes for s in self.manifest.streams if s.table_name == table_name), None
        )
        raw = sum(size for _, _, size in files)
        if decoded is None or raw == 0:
            return files
        return [(n, p, size * decoded // raw) for n, p, size in files]

    def rebased(self, first: Mapping[int, int]) -> StagedTransfer:
        """The transfer with these streams (by number) starting at these chunks, as pieces
        (their decoded size cut to the share of their files kept). A stream left with no
        chunk is dropped."""
        streams = []
        for stream in self.manifest.streams:
            had = stream.chunks
            chunks = had.from_chunk(first.get(stream.stream_number, had.first))
            if chunks is None:
                continue
            if chunks == had:
                streams.append(stream)
                continue
            decoded = stream.decoded_bytes
            if decoded is not None:  # in proportion to the files' sizes
                sizes = {
                    n: self.chunk_path(stream.stream_number, n).stat().st_size
                    for n in range(min(chunks.first, had.first), had.last + 1)
                }
                kept = sum(size for n, size in sizes.items() if n >= chunks.first)
                before = sum(size for n, size in sizes.items() if n >= had.first)
                decoded = decoded * kept // max(1, before)
            streams.append(
                StreamManifest.of(stream.stream_number, stream.table_name, chunks, decoded)
            )
        manifest = self.manifest.model_copy(update={"streams": tuple(streams)})
        return StagedTransfer(self.directory, manifest)

    @classmethod
    def write(cls, directory: Path, manifest: TransferManifest) -> StagedTransfer:
        """Seal a transfer whose chunk files are already written: the manifest goes last."""
        transfer = cls(directory, manifest)
        transfer.check_files()
        if not all(s.whole for s in manifest.streams):
            raise StagedTransferError(f"{directory}: a sealed transfer holds whole streams")
        piece_fields = {"__all__": {"first_chunk", "partial"}}
        text = manifest.model_dump_json(indent=1, exclude={"streams": piece_fields})
        durable_write(directory / MANIFEST_NAME, text.encode())
        return transfer

    @classmethod
    def open(cls, directory: Path) -> StagedTransfer:
        """Read a sealed transfer; `StagedTransferError` if it is not complete and sound."""
        path = directory / MANIFEST_NAME
        try:
            manifest = TransferManifest.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise StagedTransferError(f"{directory} has no {MANIFEST_NAME}") from None
        except ValidationError as exc:
            raise StagedTransferError(f"{path} is not a transfer manifest: {exc}") from None
        if manifest.format_version != FORMAT_VERSION:
            raise StagedTransferError(
                f"{path}: format_version {manifest.format_version}, expected {FORMAT_VERSION}"
            )
        transfer = cls(directory, manifest)
        transfer.check_files()
        if not all(s.whole for s in manifest.streams):
            raise StagedTransferError(f"{path}: a sealed transfer holds whole streams")
        return transfer

    def check_files(self) -> None:
        numbers = [s.stream_number for s in self.manifest.streams]
        tables = [s.table_name for s in self.manifest.streams]
        if sorted(numbers) != list(range(1, len(numbers) + 1)) or len(set(tables)) != len(tables):
            raise StagedTransferError(
                f"{self.directory}: streams must be numbered 1..N with one table each"
            )
        for stream in self.manifest.streams:
            for chunk_number, path in self.chunks_of(stream.table_name):
                if not path.is_file():
                    raise StagedTransferError(
                        f"{self.directory}: stream {stream.stream_number} chunk {chunk_number} "
                        f"({path.name}) is missing"
                    )
