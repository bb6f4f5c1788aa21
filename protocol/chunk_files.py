"""The file name of a staged chunk body: `s000001-c000000001.avro` is stream 1, chunk 1.

A staged transfer (the hand-over from whoever received a delta to the loader) keeps one file
per chunk body under this name. The name is built and read back here only.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: Widths that keep names sortable; numbers beyond them still round-trip (just wider).
_PATTERN = re.compile(r"s(\d{6,})-c(\d{9,})\.avro")


class ChunkFile(NamedTuple):
    stream: int
    chunk: int

    @property
    def name(self) -> str:
        return f"s{self.stream:06d}-c{self.chunk:09d}.avro"

    @classmethod
    def parse(cls, name: str) -> ChunkFile | None:
        """The chunk a file name stands for; None if it is not a chunk file's name."""
        match = _PATTERN.fullmatch(name)
        if match is None:
            return None
        found = cls(int(match.group(1)), int(match.group(2)))
        return found if found.name == name else None  # only the canonical spelling
