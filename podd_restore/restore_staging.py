"""Durable staging of a backup's chunk bodies, and their hand-over to the loader.

While the topic is scanned, each data message's body is written as it arrived (write,
fsync, atomic rename) under `STAGING/restore/<datamart>/chunks/<run>-d<delta>/`. A delta
about to be applied is then assembled into the loader's staged-transfer format: one stream
per table, its chunks hard links to the staged bodies in (writer stream, chunk) order, the
manifest last, marked as backup-written bodies. The loader needs nothing else.

Names on disk never come from a message as they are: a run's `incrementId` is hashed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from podd_restore.plan import BackupChunk, Increment
from podd_runtime.files import durable_write
from protocol.backup import BackupKey
from protocol.body import BodyFormat
from protocol.chunk_files import ChunkFile
from protocol.schema import LogicalSchema
from replica_store.transfer import StagedTransfer, StreamManifest, TransferManifest


def run_tag(increment_id: str) -> str:
    return hashlib.sha256(increment_id.encode()).hexdigest()[:16]


def request_id(increment: Increment) -> str:
    """The registry's `request_id` of a restored delta: the run that wrote it."""
    return f"restore:{increment.increment_id[:200]}:{increment.delta_num}"


class RestoreStaging:
    def __init__(self, staging_root: Path, datamart: str) -> None:
        self.root = (
            staging_root.absolute() / "restore" / hashlib.sha256(datamart.encode()).hexdigest()[:16]
        )
        self.chunks = self.root / "chunks"
        self.transfers = self.root / "transfers"

    def _chunk_dir(self, increment_id: str, delta_num: int) -> Path:
        return self.chunks / f"{run_tag(increment_id)}-d{delta_num}"

    def _transfer_dir(self, increment: Increment) -> Path:
        return self.transfers / f"d{increment.delta_num}-{run_tag(increment.increment_id)}"

    def chunk_path(self, key: BackupKey) -> Path:
        directory = self._chunk_dir(key.increment_id, key.delta_num)
        return directory / f"s{key.stream_number:06d}-c{key.chunk_number:09d}.avro"

    def stage(self, key: BackupKey, body: bytes | None) -> str:
        path = self.chunk_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        durable_write(path, body or b"")
        return str(path)

    def assemble(
        self, increment: Increment, schema: LogicalSchema, tables: dict[str, list[BackupChunk]]
    ) -> StagedTransfer:
        """The increment as a staged transfer: tables in schema order, one stream each."""
        directory = self._transfer_dir(increment)
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        streams = []
        ordered = [t.name for t in schema.tables if t.name in tables]
        for number, name in enumerate(ordered, 1):
            chunks = tables[name]
            for position, chunk in enumerate(chunks, 1):
                assert chunk.path is not None, "a data chunk of an applied delta was not staged"
                os.link(chunk.path, directory / ChunkFile(number, position).name)
            sizes = [c.decoded for c in chunks]
            decoded = None if None in sizes else sum(s or 0 for s in sizes)
            streams.append(
                StreamManifest(
                    stream_number=number,
                    table_name=name,
                    chunk_count=len(chunks),
                    decoded_bytes=decoded,
                )
            )
        manifest = TransferManifest(
            datamart=schema.datamart,
            delta_num=increment.delta_num,
            delta_date=increment.delta_date,
            request_id=request_id(increment),
            streams=tuple(streams),
            body_format=BodyFormat.BACKUP,
        )
        return StagedTransfer.write(directory, manifest)

    def applied(self, increment: Increment) -> None:
        """A delta is in the replica: its staged files go."""
        chunks = self._chunk_dir(increment.increment_id, increment.delta_num)
        shutil.rmtree(chunks, ignore_errors=True)
        shutil.rmtree(self._transfer_dir(increment), ignore_errors=True)

    @property
    def owner_file(self) -> Path:
        """The lock file of this datamart's restore staging (beside it: `clear` keeps it)."""
        return self.root.parent / f"{self.root.name}.owner"

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
