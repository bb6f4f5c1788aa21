"""Durable staging: what the agent knows survives `kill -9` here, and only here.

    <root>/transfers/<id>/transfer.json        the transfer's framing (first chunk's key)
    <root>/transfers/<id>/s000001.json         stream 1: its table, its last chunk once known
    <root>/transfers/<id>/s000001-c000000001.avro  a chunk body, exactly as it arrived
    <root>/transfers/<id>/manifest.json        written once complete (the loader's hand-over)
    <root>/outbox/<id>.owed.json               a `delta.in.rs` decided but not yet delivered
    <root>/outbox/<id>.sent.json               ... delivered: the transfer is finished

`<id>` is a digest of the requestId, so any requestId makes a safe file name. Every file is
written with `durable_write` (write, fsync, atomic rename, fsync of the directory), or with
the chunks that arrived with it by `write_group` (the same steps, the fsyncs side by side),
before the Kafka offset of the chunk that caused it can be committed. A body is written before its
stream file, so a stream file never names a chunk that is not on disk; a body without a
stream file (a crash in between) is ignored and rewritten when Kafka redelivers the chunk.

An answer is written once: a second, different answer for the same requestId is never
recorded (the first one is what is owed). The newest `keep_finished` sent answers are kept
(they remember which transfers are finished); older ones are pruned as new ones settle.
What a restart cannot read (a corrupt file, a transfer of a datamart no longer served) is
moved to `quarantine/` beside the staging root, with its reason, and the agent starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from podd_runtime.files import FileWrite, durable_write, durable_write_group, fsync_directory
from protocol.chunk_files import ChunkFile
from protocol.messages import DeltaInResult
from protocol.ocf import ContainerError, OcfLimits, decoded_size
from replica_agent.errors import StagingError
from replica_agent.transfers import StreamState, Transfer
from spark_loader.transfer import MANIFEST_NAME, StagedTransfer, StreamManifest, TransferManifest

TRANSFER_FILE = "transfer.json"
_STREAM_FILE = re.compile(r"s(\d{6,})\.json")
OWED = ".owed.json"
SENT = ".sent.json"


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


@dataclass
class Recovered:
    """What a restart finds on disk."""

    open: list[Transfer] = field(default_factory=list)
    owed: list[DeltaInResult] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # oldest first
    quarantined: list[tuple[Path, str]] = field(default_factory=list)  # (where now, why)


class TransferStaging:
    """The staging directory of one agent (all its datamarts)."""

    def __init__(
        self,
        root: Path,
        *,
        keep_finished: int = 10_000,
        quarantine: Path | None = None,
        body_limits: OcfLimits | None = None,
        parallel_fsyncs: int = 8,
    ) -> None:
        self.root = root
        self.transfers = root / "transfers"
        self.outbox = root / "outbox"
        self.quarantine_dir = quarantine or root.parent / "quarantine"
        self.keep_finished = keep_finished
        self.body_limits = body_limits or OcfLimits()
        self._sent: deque[Path] = deque()  # sent answers, oldest first
        #: Runs the fsyncs of `write_group` side by side (its threads start when first used).
        self._pool = ThreadPoolExecutor(parallel_fsyncs, thread_name_prefix="podd-fsync")
        self.transfers.mkdir(parents=True, exist_ok=True)
        self.outbox.mkdir(parents=True, exist_ok=True)

    def directory(self, request_id: str) -> Path:
        return self.transfers / transfer_id(request_id)

    # --- writes, in the order the agent makes them -----------------------------------------
    def open_transfer(self, transfer: Transfer) -> None:
        directory = self.directory(transfer.request_id)
        directory.mkdir(exist_ok=True)
        framing = {
            "request_id": transfer.request_id,
            "datamart": transfer.datamart,
            "delta_num": transfer.delta_num,
            "delta_date": transfer.delta_date.isoformat(),
            "subscription": transfer.subscription,
            "stream_total": transfer.stream_total,
        }
        durable_write(directory / TRANSFER_FILE, json.dumps(framing).encode())

    def chunk_path(self, request_id: str, stream: int, chunk: int) -> Path:
        return self.directory(request_id) / ChunkFile(stream, chunk).name

    def stream_file(self, request_id: str, number: int, stream: StreamState) -> FileWrite:
        """The stream's file as it must be written now (its table, its last chunk)."""
        state = {"table_name": stream.table_name, "last_chunk": stream.last}
        return self.directory(request_id) / stream_file_name(number), json.dumps(state).encode()

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

        Streams recovered from disk learn their decoded size here, from their files."""
        directory = self.directory(transfer.request_id)
        for number, stream in transfer.streams.items():
            if stream.decoded_bytes is None:
                stream.decoded_bytes = sum(
                    decoded_size(path.read_bytes(), self.body_limits)
                    for c in range(1, (stream.last or 0) + 1)
                    if (path := directory / ChunkFile(number, c).name).stat().st_size
                )
        manifest = TransferManifest(
            datamart=transfer.datamart,
            delta_num=transfer.delta_num,
            delta_date=transfer.delta_date,
            request_id=transfer.request_id,
            streams=tuple(
                StreamManifest(
                    stream_number=number,
                    table_name=s.table_name,
                    chunk_count=s.last or 0,
                    decoded_bytes=s.decoded_bytes,
                )
                for number, s in sorted(transfer.streams.items())
            ),
        )
        return StagedTransfer.write(self.directory(transfer.request_id), manifest)

    def owe(self, result: DeltaInResult) -> DeltaInResult:
        """Record an answer before sending it; a restart sends what is still owed.

        Returns the transfer's answer: `result`, or the one recorded before (never two)."""
        ident = transfer_id(result.request_id)
        for earlier in (self.outbox / f"{ident}{OWED}", self.outbox / f"{ident}{SENT}"):
            if earlier.exists():
                try:
                    return _read_result(earlier)
                except StagingError as exc:
                    self.quarantine(earlier, str(exc))
        durable_write(
            self.outbox / f"{ident}{OWED}", result.model_dump_json(by_alias=True).encode()
        )
        return result

    def settle(self, request_id: str) -> None:
        """The answer was delivered: mark it sent, then drop the transfer's files."""
        ident = transfer_id(request_id)
        owed = self.outbox / f"{ident}{OWED}"
        if owed.exists():
            sent = self.outbox / f"{ident}{SENT}"
            os.replace(owed, sent)
            fsync_directory(self.outbox)
            self._sent.append(sent)
            while len(self._sent) > self.keep_finished:
                self._sent.popleft().unlink(missing_ok=True)
        self.remove(request_id)

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move an unreadable file or transfer out of the way, with a note of why."""
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        target = (
            self.quarantine_dir
            / f"{path.name}.{os.getpid()}.{len(os.listdir(self.quarantine_dir))}"
        )
        os.replace(path, target)
        durable_write(target.with_name(target.name + ".why.txt"), reason.encode())
        return target

    def remove(self, request_id: str) -> None:
        shutil.rmtree(self.directory(request_id), ignore_errors=True)

    # --- reads -----------------------------------------------------------------------------
    def read_transfer(self, request_id: str) -> Transfer:
        """An open transfer as its files say (`StagingError` if they cannot be read)."""
        return _read_transfer(self.directory(request_id))

    def sealed(self, request_id: str) -> StagedTransfer | None:
        directory = self.directory(request_id)
        return StagedTransfer.open(directory) if (directory / MANIFEST_NAME).exists() else None

    def recover(self, *, cleanup: bool = True) -> Recovered:
        """Rebuild open transfers, owed answers and finished requestIds from the files.

        With `cleanup`, also finish what a crash interrupted (remove the files of answered
        transfers) and forget the oldest finished requestIds beyond `keep_finished`.
        """
        found = Recovered()
        sent = sorted(self.outbox.glob(f"*{SENT}"), key=lambda p: p.stat().st_mtime)
        if cleanup:
            for stale in sent[: max(0, len(sent) - self.keep_finished)]:
                stale.unlink(missing_ok=True)
            self._sent = deque(p for p in sent[-self.keep_finished :] if p.exists())
        owed = sorted(self.outbox.glob(f"*{OWED}"), key=lambda p: p.stat().st_mtime)
        for path in [*sent, *owed]:
            try:
                result = _read_result(path)
            except (StagingError, FileNotFoundError) as exc:
                if cleanup and path.exists():
                    found.quarantined.append((self.quarantine(path, str(exc)), str(exc)))
                continue
            found.finished.append(result.request_id)
            if path.name.endswith(OWED):
                found.owed.append(result)
        finished_ids = {transfer_id(r) for r in found.finished}
        for directory in sorted(self.transfers.iterdir()):
            if directory.name in finished_ids or not (directory / TRANSFER_FILE).exists():
                if cleanup:  # the removal a crash interrupted
                    shutil.rmtree(directory, ignore_errors=True)
                continue
            try:
                found.open.append(_read_transfer(directory))
            except StagingError as exc:
                if cleanup:
                    found.quarantined.append((self.quarantine(directory, str(exc)), str(exc)))
        return found


def _read_result(path: Path) -> DeltaInResult:
    try:
        return DeltaInResult.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise StagingError(f"{path} is not a readable answer: {exc}") from None


def _read_transfer(directory: Path) -> Transfer:
    try:
        framing = json.loads((directory / TRANSFER_FILE).read_bytes())
        transfer = Transfer(
            request_id=framing["request_id"],
            datamart=framing["datamart"],
            delta_num=int(framing["delta_num"]),
            delta_date=datetime.fromisoformat(framing["delta_date"]),
            subscription=framing["subscription"],
            stream_total=int(framing["stream_total"]),
        )
        chunks: dict[int, set[int]] = {}
        for body in directory.glob("*.avro"):
            transfer.staged_bytes += body.stat().st_size
            found = ChunkFile.parse(body.name)
            if found is not None:
                chunks.setdefault(found.stream, set()).add(found.chunk)
        for path in sorted(directory.glob("s*.json")):
            number = stream_of_file(path.name)
            if number is None:
                continue
            state = json.loads(path.read_bytes())
            stream = StreamState(state["table_name"], last=state["last_chunk"])
            stream.chunks = chunks.get(number, set())
            stream.decoded_bytes = None  # measured again when it is sealed
            transfer.streams[number] = stream
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StagingError(f"{directory} is not a readable staged transfer: {exc}") from None
    return transfer
