"""`protocol.kernel_cache`: a compiled entry point whose callee in another file changed is
compiled again, not loaded stale from numba's disk cache. Each run is a fresh process, as an
origin restarted after an upgrade in place."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_CALLEE = """
import numba

@numba.njit(cache=True)
def answer():
    return {value}
"""
_CALLER = """
import numba
import callee
from protocol.kernel_cache import drop_if_sources_changed

@numba.njit(cache=True)
def entry():
    return callee.answer()

if {guarded}:
    drop_if_sources_changed([entry], [__file__, callee.__file__])
"""


_ASK = "import caller; print(caller.entry(), sum(caller.entry.stats.cache_hits.values()))"


def _run(where: Path) -> tuple[int, bool]:
    """The entry point's answer, and whether it came from numba's disk cache."""
    env = dict(os.environ, PYTHONPATH=f"{where}{os.pathsep}{Path.cwd()}")
    done = subprocess.run(
        [sys.executable, "-c", _ASK],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    answer, hits = done.stdout.split()
    return int(answer), int(hits) > 0


@pytest.mark.parametrize("guarded", [True, False])
def test_a_changed_callee_is_compiled_again(tmp_path: Path, guarded: bool) -> None:
    (tmp_path / "caller.py").write_text(_CALLER.format(guarded=guarded))
    (tmp_path / "callee.py").write_text(_CALLEE.format(value=1))
    assert _run(tmp_path) == (1, False)
    assert _run(tmp_path) == (1, True)
    (tmp_path / "callee.py").write_text(_CALLEE.format(value=2))
    # Unguarded, numba loads the entry point's cache, keyed by the caller's file alone: the
    # old answer. This shows the hazard is real, so the guarded run shows the guard works.
    assert _run(tmp_path) == ((2, False) if guarded else (1, True))
    assert _run(tmp_path) == (2 if guarded else 1, True)  # the new code is cached in turn


_TWO_STEPS = """
import numba
import callee
from protocol.kernel_cache import defined_here, drop_if_sources_changed

@numba.njit(cache=True)
def step():
    return callee.answer()

@numba.njit(cache=True)
def entry():
    return step()

drop_if_sources_changed({guarded}, [__file__, callee.__file__])
"""


@pytest.mark.parametrize("every_kernel", [True, False])
def test_a_kernel_between_the_entry_and_a_changed_callee_is_compiled_again(
    tmp_path: Path, every_kernel: bool
) -> None:
    """numba caches each kernel of a module on its own: guarding the entry point alone
    leaves a kernel it calls loading the callee's old code; `defined_here` guards each."""
    guarded = "defined_here(globals())" if every_kernel else "[entry]"
    (tmp_path / "caller.py").write_text(_TWO_STEPS.format(guarded=guarded))
    (tmp_path / "callee.py").write_text(_CALLEE.format(value=1))
    assert _run(tmp_path)[0] == 1
    assert _run(tmp_path) == (1, True)
    (tmp_path / "callee.py").write_text(_CALLEE.format(value=2))
    assert _run(tmp_path)[0] == (2 if every_kernel else 1)


def test_with_the_jit_off_the_kernels_import(tmp_path: Path) -> None:
    """NUMBA_DISABLE_JIT=1 (the cachegrind count runs so) makes plain functions, with no
    cache: the guard leaves them alone, and the modules that call it import."""
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    modules = (
        "protocol.avro_encoder, podd_cdc.qlik_batch_kernel, podd_cdc.column_kernels, "
        "podd_cdc.dataworks_batch_kernel, podd_cdc.json_rows"
    )
    done = subprocess.run(
        [sys.executable, "-c", f"import {modules}"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
