"""Durable files: after a crash, a file written here is either whole or absent."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from concurrent.futures import Executor
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_write(path: Path, data: bytes) -> None:
    """Write `path`: to a temporary name, fsync, rename into place, fsync the directory."""
    tmp = _write_temporary((path, data))
    if isinstance(tmp, OSError):
        raise tmp
    os.replace(tmp, path)
    fsync_directory(path.parent)


#: One file of a group write: where it goes, and what it holds.
FileWrite = tuple[Path, bytes]


def durable_write_group(
    phases: Sequence[Sequence[FileWrite]], pool: Executor
) -> dict[Path, OSError]:
    """Write many files durably at once; each phase is durable before the next begins.

    Per phase:
      1. every file is written to its temporary name and fsynced, in parallel on `pool`
         (the file system commits fsyncs that wait together in one journal commit);
      2. each written file is renamed into place;
      3. each directory that gained a file is fsynced once.

    The same guarantee as `durable_write` for each file, at a fraction of the cost per file.
    A file that fails is left absent or as it was; the failures are returned, by path. A
    directory with a failed file gets nothing more from later phases (a later phase may
    name what an earlier one wrote). Paths must be unique within a phase.
    """
    failed: dict[Path, OSError] = {}
    broken: dict[Path, OSError] = {}  # directory -> the failure that broke it
    for phase in phases:
        todo = []
        for path, data in phase:
            if path.parent in broken:
                failed[path] = broken[path.parent]
            else:
                todo.append((path, data))
        written = list(pool.map(_write_temporary, todo))  # step 1
        directories: dict[Path, list[Path]] = {}
        for (path, _), outcome in zip(todo, written, strict=True):
            try:
                if isinstance(outcome, OSError):
                    raise outcome
                os.replace(outcome, path)  # step 2
                directories.setdefault(path.parent, []).append(path)
            except OSError as exc:
                failed[path] = broken[path.parent] = exc
        for directory, paths in directories.items():  # step 3
            try:
                fsync_directory(directory)
            except OSError as exc:
                broken[directory] = exc
                failed.update(dict.fromkeys(paths, exc))
    return failed


def temporary_path(path: Path) -> Path:
    """Where `path` is written before it is renamed into place."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _write_temporary(item: FileWrite) -> Path | OSError:
    path, data = item
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return exc
    return tmp
