"""The Qlik metadata messages a run has read, kept durably in its state directory, so that a
restarted run knows tables described before its starting offsets.

One JSON line per distinct message, appended and fsynced as it is read: a new table version
costs one line, not a rewrite of every message read so far (which made a run that read n
descriptions write O(n²) bytes). A last line cut short by a crash is ignored; the catalog of
earlier versions (`qlik-catalog.json`, one JSON list) is still read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from podd_runtime.files import fsync_directory

#: The catalog's file in a state directory, and the one earlier versions wrote.
CATALOG = "qlik-catalog.jsonl"
LEGACY_CATALOG = "qlik-catalog.json"


class QlikCatalog:
    """The metadata messages kept in `state_dir`, and appending new ones."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / CATALOG
        self.messages: list[dict[str, Any]] = []
        self._digests: set[str] = set()
        legacy = state_dir / LEGACY_CATALOG
        if legacy.exists():
            for message in json.loads(legacy.read_text()):
                self._keep(message)
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    self._keep(json.loads(line))
                except json.JSONDecodeError:
                    continue  # the last line, cut short by a crash: read again from Kafka

    def add(self, message: dict[str, Any]) -> None:
        """Keep `message` durably (once: a message seen before is not written again)."""
        line = _canonical(message)
        digest = hashlib.sha256(line.encode()).hexdigest()
        if digest in self._digests:
            return
        created = not self.path.exists()
        with self.path.open("ab") as out:
            out.write(line.encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
        if created:
            fsync_directory(self.path.parent)
        self._digests.add(digest)
        self.messages.append(message)

    def _keep(self, message: dict[str, Any]) -> None:
        digest = hashlib.sha256(_canonical(message).encode()).hexdigest()
        if digest not in self._digests:
            self._digests.add(digest)
            self.messages.append(message)


def _canonical(message: dict[str, Any]) -> str:
    return json.dumps(message, default=str, sort_keys=True, separators=(",", ":"))
