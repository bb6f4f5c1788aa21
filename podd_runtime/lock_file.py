"""One process at a time owns a directory (the agent's staging root, a restore's).

`LockFile` holds an exclusive `flock` on a file (`<staging root>/.owner` for the agent) for
as long as it is open, and writes who holds it into that file (role, host, pid, since
when), so a second process is refused at once with a message naming the first. The kernel
releases the lock when the holder's process ends, however it ends (kill -9 included):
nothing stale remains.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from podd_runtime.dsn import process_name
from podd_runtime.errors import DirectoryInUseError


def holder_text(role: str) -> str:
    """Who this process is, as a holder's file and a database session name it."""
    return process_name(role)


class Hold:
    """Something held from `acquire` to `release`, also as `with hold: ...`."""

    def acquire(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


#: What a lock file says of its holder's token (see `LockFile.token`).
_TOKEN = re.compile(r" token ([0-9a-f]{16,64})\b")


class LockFile(Hold):
    """`token`, when given, is written beside the holder's name; once acquired,
    `previous_token` is the one the last holder wrote (None: none), a holder that is gone:
    the flock is free only when its process ended."""

    def __init__(self, path: Path, role: str, token: str | None = None) -> None:
        self.path = path
        self.role = role
        self.token = token
        self.previous_token: str | None = None
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise DirectoryInUseError(
                f"{self.path.parent} is in use by {holder} (it holds {self.path.name}); two "
                "processes must not share it (each would take the other's files for its own)"
            ) from None
        except OSError:
            os.close(fd)
            raise
        found = _TOKEN.search(os.pread(fd, 512, 0).decode("utf-8", "replace"))
        self.previous_token = found[1] if found else None
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        token = "" if self.token is None else f" token {self.token}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder_text(self.role)} since {since}{token}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
