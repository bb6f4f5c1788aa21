"""numba's disk cache, kept in step with every source a compiled entry point is made of.

numba (0.68) keys a cached function by its own file's time and size only. A function it
inlines from another module, or a constant it reads from one, is baked into the cached
machine code, so after that other module changes (an upgrade in place, a checkout), the old
code would still be loaded. `drop_if_sources_changed` records a fingerprint of all of an
entry point's sources beside its cache, and empties the cache's index when it differs.
Call it at import, before the entry point's first call, which is when numba loads a cache.
`warmed_up` counts what numba compiled and loaded, for the warm-up commands.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numba.core.dispatcher import Dispatcher


def fingerprint(sources: Sequence[str | Path]) -> str:
    """SHA-256 over the sources' bytes, each behind its length."""
    digest = hashlib.sha256()
    for source in sources:
        data = Path(source).read_bytes()
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def defined_here(namespace: dict[str, Any]) -> list[Any]:
    """The numba dispatchers a module defines (`globals()` of it): an entry point and the
    kernels it calls of its own module, each of which numba caches on its own, so each must
    follow the sources it inlines (`drop_if_sources_changed`)."""
    module = namespace["__name__"]
    return [
        value
        for value in namespace.values()
        if isinstance(value, Dispatcher) and value.py_func.__module__ == module
    ]


def _marker(entry: Any) -> Path:
    module = entry.py_func.__module__
    return Path(entry.stats.cache_path) / f"{module}.{entry.__name__}.sources"


def drop_if_sources_changed(entries: Sequence[Any], sources: Sequence[str | Path]) -> int:
    """For each numba dispatcher in `entries` (made with `cache=True`): if its cache was not
    made from exactly `sources`, empty the cache's index (numba then compiles again) and
    record the sources' fingerprint. Returns how many were emptied. A cache directory that
    cannot be written is left as numba left it; with numba's JIT off, there is none."""
    current = fingerprint(sources)
    emptied = 0
    for entry in entries:
        if not hasattr(entry, "_cache"):
            continue  # a plain function: numba's JIT is off (NUMBA_DISABLE_JIT), no cache
        marker = _marker(entry)
        try:
            if marker.read_text() == current:
                continue
        except OSError:
            pass  # no marker yet: a cache made before this check is not trusted either
        with contextlib.suppress(OSError):
            entry._cache.flush()  # numba's own way to forget what its index holds
            temporary = marker.with_name(f"{marker.name}.{os.getpid()}")
            temporary.write_text(current)
            os.replace(temporary, marker)
            emptied += 1
    return emptied


@dataclass(frozen=True)
class WarmedUp:
    """What a warm-up (`podd-cdc warm-up`, `replica-agent warm-up`) had numba do."""

    compiled: int  # kernel signatures compiled (not found in the cache)
    loaded: int  # kernel signatures loaded from the cache
    cpu_seconds: float
    cache_dirs: tuple[str, ...]

    def __str__(self) -> str:
        where = ", ".join(self.cache_dirs) or "nothing"
        return (
            f"{self.compiled} kernel signature(s) compiled, {self.loaded} loaded from the "
            f"cache, in {self.cpu_seconds:.1f} CPU s; cached in {where}"
        )


def warmed_up(packages: tuple[str, ...], started: float) -> WarmedUp:
    """What numba did for the kernels of the modules of `packages` (name prefixes, such as
    "protocol.") imported so far, since `started` (`time.process_time()`)."""
    compiled = loaded = 0
    dirs: set[str] = set()
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(packages):
            continue
        for kernel in vars(module).values():
            if not isinstance(kernel, Dispatcher) or id(kernel) in seen:
                continue
            seen.add(id(kernel))
            stats = kernel.stats
            compiled += sum(stats.cache_misses.values())
            loaded += sum(stats.cache_hits.values())
            if stats.cache_misses or stats.cache_hits:
                dirs.add(str(stats.cache_path))
    return WarmedUp(compiled, loaded, time.process_time() - started, tuple(sorted(dirs)))
