"""The outbox on disk: every `delta.in.rs` final answer, recorded before it is sent.

    <root>/outbox/<id>.owed.json   an answer decided but not yet delivered
    <root>/outbox/<id>.sent.json   ... delivered: its transfer is finished

`<id>` is the digest of the requestId that names the transfer's staging directory. A
transfer's answer is written once: a second, different answer for the same requestId is
never recorded (the first one is what is owed). The newest `keep_finished` sent answers are
kept: they are how a restart knows which requestIds are finished, so it is the tracker's
`max_finished` (one bound, in memory and on disk). Only `Outbox` uses this.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from podd_runtime.files import durable_write, fsync_directory
from protocol.messages import DeltaInResult
from replica_agent.chunk_spool import transfer_id
from replica_agent.errors import SpoolError
from replica_agent.quarantine import Quarantine

OWED = ".owed.json"
SENT = ".sent.json"


@dataclass
class RecordedAnswers:
    """What a restart finds in the outbox."""

    owed: list[DeltaInResult] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # requestIds, oldest first
    quarantined: list[tuple[Path, str]] = field(default_factory=list)  # (where now, why)


class AnswerRecords:
    def __init__(self, directory: Path, quarantine: Quarantine, *, keep_finished: int) -> None:
        self.directory = directory
        self.quarantine = quarantine
        self.keep_finished = keep_finished
        self._sent: deque[Path] = deque()  # sent answers, oldest first
        directory.mkdir(parents=True, exist_ok=True)

    def owe(self, result: DeltaInResult) -> DeltaInResult:
        """Record an answer before sending it; a restart sends what is still owed.

        Returns the transfer's answer: `result`, or the one recorded before (never two)."""
        ident = transfer_id(result.request_id)
        for earlier in (self.directory / f"{ident}{OWED}", self.directory / f"{ident}{SENT}"):
            if earlier.exists():
                try:
                    return _read_result(earlier)
                except SpoolError as exc:
                    self.quarantine.move(earlier, str(exc))
        data = result.model_dump_json(by_alias=True).encode()
        durable_write(self.directory / f"{ident}{OWED}", data)
        return result

    def sent(self, request_id: str) -> None:
        """The answer was delivered: mark it sent; the oldest beyond the bound are pruned."""
        ident = transfer_id(request_id)
        owed = self.directory / f"{ident}{OWED}"
        if not owed.exists():
            return
        sent = self.directory / f"{ident}{SENT}"
        try:
            os.replace(owed, sent)
        except FileNotFoundError:  # settled meanwhile: once is enough
            return
        fsync_directory(self.directory)
        self._sent.append(sent)
        while len(self._sent) > self.keep_finished:
            self._sent.popleft().unlink(missing_ok=True)

    def recover(self, *, cleanup: bool = True) -> RecordedAnswers:
        """Owed answers and finished requestIds, oldest first. With `cleanup`, the oldest sent
        answers beyond `keep_finished` are forgotten, unreadable ones quarantined."""
        found = RecordedAnswers()
        sent = sorted(self.directory.glob(f"*{SENT}"), key=_modified)
        if cleanup:
            for stale in sent[: max(0, len(sent) - self.keep_finished)]:
                stale.unlink(missing_ok=True)
            sent = [p for p in sent[-self.keep_finished :] if p.exists()]
            self._sent = deque(sent)
        owed = sorted(self.directory.glob(f"*{OWED}"), key=_modified)
        for path in [*sent, *owed]:
            try:
                result = _read_result(path)
            except (SpoolError, FileNotFoundError) as exc:
                if cleanup and path.exists():
                    found.quarantined.append((self.quarantine.move(path, str(exc)), str(exc)))
                continue
            found.finished.append(result.request_id)
            if path.name.endswith(OWED):
                found.owed.append(result)
        return found


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _read_result(path: Path) -> DeltaInResult:
    try:
        return DeltaInResult.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise SpoolError(f"{path} is not a readable answer: {exc}") from None
