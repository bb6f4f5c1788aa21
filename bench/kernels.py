"""Compile the kernels before a bench measures, as an install does (`compose/Dockerfile`
runs `podd-cdc warm-up && replica-agent warm-up`).

numba caches a compiled kernel on disk (`__pycache__` beside its module). On a fresh
checkout the cache is empty, and the first bench run then measured the compiler: 135 µs of
origin CPU a Qlik change against 27 on the same machine a run later, and 18 s for the
agent's first delta. The warm-ups run in child processes, so each measured process still
loads its kernels from the cache itself, as it does in production; what they did (signatures
compiled, CPU s) goes into the results beside the figures, not into them.
"""

from __future__ import annotations

import subprocess
import sys

#: The warm-up commands, by what they compile for.
WARM_UPS = {
    "origin": "podd_cdc.cli",
    "agent": "replica_agent.cli",
}


def warm_up_kernels() -> dict[str, str]:
    """Run each warm-up; what each said (`protocol.kernel_cache.WarmedUp`)."""
    said: dict[str, str] = {}
    for name, module in WARM_UPS.items():
        done = subprocess.run(
            [sys.executable, "-m", module, "warm-up"],
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        )
        said[name] = done.stdout.strip().splitlines()[-1]
        print(f"[warm-up] {name}: {said[name]}", flush=True)
    return said
