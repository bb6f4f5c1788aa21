"""Where what a restart cannot read goes: moved aside with its reason, never a crash loop.

A corrupt staged file, an unreadable answer, a transfer of a datamart no longer served: each
is moved into the quarantine directory (beside the staging root) with a `.why.txt` note, for
a person to look at; the agent starts without it.
"""

from __future__ import annotations

import os
from pathlib import Path

from podd_runtime.files import durable_write


class Quarantine:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def move(self, path: Path, reason: str) -> Path:
        """Move `path` (a file or a directory) here, with a note of why; where it is now."""
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / f"{path.name}.{os.getpid()}.{len(os.listdir(self.directory))}"
        os.replace(path, target)
        durable_write(target.with_name(target.name + ".why.txt"), reason.encode())
        return target
