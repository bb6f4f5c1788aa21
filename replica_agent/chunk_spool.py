"""The chunk spool: what the agent knows survives `kill -9` here, and only here.

"Spool" names the agent's files (its directory is still the `staging_dir` setting, and
its metrics keep their `podd_staging_*` names); "staging" in the store and the loader
means staging *tables*, where a table's rows wait inside the replica before an apply.

    <root>/transfers/<id>/transfer.json        the transfer's framing (first chunk's key)
    <root>/transfers/<id>/s000001.json         stream 1: its table, its last chunk once known
    <root>/transfers/<id>/s000001-c000000001.avro  a chunk body, exactly as it arrived
    <root>/transfers/<id>/manifest.json        written once complete (the loader's hand-over)
    <root>/outbox/                             the answers (`replica_agent.answer_records`)

`<id>` is a digest of the requestId, so any requestId makes a safe file name. Every file is
written with `durable_write` (write, fsync, atomic rename, fsync of the directory), or with
the chunks that arrived with it by `write_group` (the same steps, the fsyncs side by side),
before the Kafka offset of the chunk that caused it can be committed. A body is written before its
stream file, so a stream file never names a chunk that is not on disk; a body without a
stream file (a crash in between) is ignored and rewritten when Kafka redelivers the chunk.

The spool persists what the tracker decided; it changes no `Transfer`. What a restart
cannot read (a corrupt file) is moved to the quarantine (`replica_agent.quarantine`), with
its reason, and the agent starts.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from podd_runtime.files import FileWrite, durable_write, durable_write_group, fsync_directory
from protocol.chunk_files import ChunkFile
from protocol.ocf import ContainerError, OcfLimits, decoded_size
from replica_agent.errors import SpoolError
from replica_agent.quarantine import Quarantine
from replica_agent.transfers import CHUNK_COST, Offer, StreamState, Transfer, TransferFraming
from replica_store.transfer import StagedTransfer, StreamManifest, TransferManifest

TRANSFER_FILE = "transfer.json"
_STREAM_FILE = re.compile(r"s(\d{6,})\.json")


def transfer_id(request_id: str) -> str:
    return hashlib.sha256(request_id.encode()).hexdigest()[:40]


def stream_file_name(stream_number: int) -> str:
    return f"s{stream_number:06d}.json"


def stream_of_file(name: str) -> int | None:
    """The stream a stream file's name stands for (None: not a stream file's name)."""
    match = _STREAM_FILE.fullmatch(name)
    if match is None or stream_file_name(int(match.group(1))) != name:
        return None
    return int(match.group(1))


@dataclass
class GroupWrite:
    """What `write_group` did: per body, what it decompresses to, or why it was refused
    (not written); and the files that could not be written."""

    sizes: dict[Path, int] = field(default_factory=dict)
    refused: dict[Path, ContainerError] = field(default_factory=dict)
    failed: dict[Path, OSError] = field(default_factory=dict)


class _StreamFile(BaseModel):
    """A stream's file: its table, and its last chunk once known."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    table_name: str
    last_chunk: int | None


@dataclass
class Recovered:
    """What a restart finds in the transfers' directory."""

    open: list[Transfer] = field(default_factory=list)
    quarantined: list[tuple[Path, str]] = field(default_factory=list)  # (where now, why)


#: What `room` keeps free on the staging file system for everything but chunk bodies.
DISK_RESERVE_BYTES = 16 * 2**20
DISK_RESERVE_INODES = 1_000


class ChunkSpool:
    """The staging directory of one agent (all its datamarts)."""

    def __init__(
        self,
        root: Path,
        *,
        quarantine: Path | None = None,
        body_limits: OcfLimits | None = None,
        parallel_fsyncs: int = 8,
    ) -> None:
        self.root = root
        self.transfers = root / "transfers"
        #: Where the outbox keeps its answers (`replica_agent.answer_records`).
        self.outbox = root / "outbox"
        self.quarantine = Quarantine(quarantine or root.parent / "quarantine")
        self.body_limits = body_limits or OcfLimits()
        #: Runs the fsyncs of `write_group` side by side (its threads start when first used).
        self._pool = ThreadPoolExecutor(parallel_fsyncs, thread_name_prefix="podd-fsync")
        self.transfers.mkdir(parents=True, exist_ok=True)

    def directory(self, request_id: str) -> Path:
        return self.transfers / transfer_id(request_id)

    def room(self) -> int:
        """What more chunk bodies may take of the staging file system now, in bytes: its
        free bytes and its free inodes (each chunk is a file: `CHUNK_COST` bytes at least),
        less a reserve for manifests, stream files and answers."""
        found = os.statvfs(self.transfers)
        free_bytes = found.f_bavail * found.f_frsize - DISK_RESERVE_BYTES
        free_files = (found.f_favail - DISK_RESERVE_INODES) * CHUNK_COST
        if found.f_files == 0:  # a file system without an inode count (btrfs, tmpfs quirks)
            free_files = free_bytes
        return max(0, min(free_bytes, free_files))

    # --- writes, in the order the agent makes them -----------------------------------------
    def open_transfer(self, framing: TransferFraming) -> None:
        directory = self.directory(framing.request_id)
        directory.mkdir(exist_ok=True)
        fsync_directory(self.transfers)  # the new directory's entry, before anything in it
        durable_write(directory / TRANSFER_FILE, framing.model_dump_json().encode())

    def chunk_path(self, request_id: str, stream: int, chunk: int) -> Path:
        return self.directory(request_id) / ChunkFile(stream, chunk).name

    def stream_file(self, request_id: str, number: int, stream: StreamState) -> FileWrite:
        """The stream's file as it must be written now (its table, its last chunk)."""
        state = _StreamFile(table_name=stream.table_name, last_chunk=stream.last)
        path = self.directory(request_id) / stream_file_name(number)
        return path, state.model_dump_json().encode()

    def write_group(self, bodies: Sequence[FileWrite], streams: Sequence[FileWrite]) -> GroupWrite:
        """Many chunk bodies, then their stream files, each as durable as `durable_write`
        makes it. First every body is measured (what it decompresses to, within the body
        limits), side by side; a body beyond them is refused and not written. Then the
        rest is written, the fsyncs side by side (`durable_write_group`)."""
        measured = list(self._pool.map(self._measure, [data for _, data in bodies]))
        done = GroupWrite()
        for (path, _), outcome in zip(bodies, measured, strict=True):
            if isinstance(outcome, ContainerError):
                done.refused[path] = outcome
            else:
                done.sizes[path] = outcome
        kept = [body for body in bodies if body[0] not in done.refused]
        done.failed = durable_write_group([kept, streams], self._pool)
        return done

    def _measure(self, body: bytes) -> int | ContainerError:
        try:
            return decoded_size(body, self.body_limits) if body else 0
        except ContainerError as exc:
            return exc

    def seal(self, transfer: Transfer) -> StagedTransfer:
        """Write the manifest of a complete transfer: from now on the loader may take it.

        Streams recovered from disk (size not measured) are measured here, from their files;
        the manifest records every stream's decoded size, and the tracker learns them from
        it (`TransferTracker.sealed`)."""
        manifest = self._manifest(transfer, sorted(transfer.streams))
        return StagedTransfer.write(self.directory(transfer.request_id), manifest)

    def complete_streams(self, transfer: Transfer, offers: Mapping[int, Offer]) -> StagedTransfer:
        """Streams of a transfer still receiving, whole or in pieces (`offers`), as the
        loader reads a transfer (for prestaging); no manifest is written."""
        whole = [n for n, o in offers.items() if o.chunks.is_whole]
        streams = {s.stream_number: s for s in self._manifest(transfer, sorted(whole)).streams}
        for number, offer in offers.items():
            if number not in streams:
                table_name = transfer.streams[number].table_name
                streams[number] = StreamManifest.of(number, table_name, offer.chunks, offer.decoded)
        return StagedTransfer(
            self.directory(transfer.request_id),
            self._framed(transfer, tuple(streams[n] for n in sorted(streams))),
        )

    def _manifest(self, transfer: Transfer, numbers: list[int]) -> TransferManifest:
        directory = self.directory(transfer.request_id)
        streams = []
        for number in numbers:
            stream = transfer.streams[number]
            decoded = stream.decoded_bytes
            if decoded is None:
                decoded = sum(
                    decoded_size(path.read_bytes(), self.body_limits)
                    for c in range(1, (stream.last or 0) + 1)
                    if (path := directory / ChunkFile(number, c).name).stat().st_size
                )
            streams.append(
                StreamManifest(
                    stream_number=number,
                    table_name=stream.table_name,
                    chunk_count=stream.last or 0,
                    decoded_bytes=decoded,
                )
            )
        return self._framed(transfer, tuple(streams))

    @staticmethod
    def _framed(transfer: Transfer, streams: tuple[StreamManifest, ...]) -> TransferManifest:
        return TransferManifest(
            datamart=transfer.datamart,
            delta_num=transfer.delta_num,
            delta_date=transfer.delta_date,
            request_id=transfer.request_id,
            streams=streams,
        )

    def remove(self, request_id: str) -> None:
        shutil.rmtree(self.directory(request_id), ignore_errors=True)

    # --- reads -----------------------------------------------------------------------------
    def read_transfer(self, request_id: str) -> Transfer:
        """An open transfer as its files say (`SpoolError` if they cannot be read)."""
        return _read_transfer(self.directory(request_id))

    def recover(self, finished: Iterable[str] = (), *, cleanup: bool = True) -> Recovered:
        """The open transfers as their files say, but for those of `finished` requestIds.

        With `cleanup`, also finish what a crash interrupted (remove the files of answered
        transfers, and directories a crash left before their framing) and quarantine what
        cannot be read.
        """
        found = Recovered()
        finished_ids = {transfer_id(r) for r in finished}
        for directory in sorted(self.transfers.iterdir()):
            if directory.name in finished_ids or not (directory / TRANSFER_FILE).exists():
                if cleanup:  # the removal a crash interrupted
                    shutil.rmtree(directory, ignore_errors=True)
                continue
            try:
                found.open.append(_read_transfer(directory))
            except SpoolError as exc:
                if cleanup:
                    where = self.quarantine.move(directory, str(exc))
                    found.quarantined.append((where, str(exc)))
        return found


def _read_transfer(directory: Path) -> Transfer:
    try:
        transfer = Transfer(
            TransferFraming.model_validate_json((directory / TRANSFER_FILE).read_bytes())
        )
        chunks: dict[int, set[int]] = {}
        for body in directory.glob("*.avro"):
            transfer.staged_bytes += max(body.stat().st_size, CHUNK_COST)
            found = ChunkFile.parse(body.name)
            if found is not None:
                chunks.setdefault(found.stream, set()).add(found.chunk)
        for path in sorted(directory.glob("s*.json")):
            number = stream_of_file(path.name)
            if number is None:
                continue
            state = _StreamFile.model_validate_json(path.read_bytes())
            stream = StreamState(state.table_name, last=state.last_chunk)
            stream.chunks = chunks.get(number, set())
            stream.decoded_bytes = None  # measured again when it is sealed
            transfer.streams[number] = stream
    except (OSError, ValueError, ValidationError) as exc:
        raise SpoolError(f"{directory} is not a readable staged transfer: {exc}") from None
    return transfer
