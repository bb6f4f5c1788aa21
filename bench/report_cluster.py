"""BENCHMARKS.md's section on a standalone Spark cluster, from `bench.run`'s results."""

from __future__ import annotations

from typing import Any


def cluster_section(local: dict[str, Any], cluster: dict[str, Any], master: str) -> list[str]:
    """The headline delta and the 1-row latency, local mode beside a standalone cluster."""
    rows = []
    for name, p in (
        (f"`{master}`", local),
        (f"standalone, 1 worker, {cluster['cores']} cores", cluster),
    ):
        ph = p.get("agent_phases", {})
        lat = p.get("latency", {})
        rows.append(
            f"| {name} | {p['e2e_seconds']:.2f} | {ph.get('stage_s', 0):.2f} | "
            f"{ph.get('apply_s', 0):.2f} | {lat.get('median_seconds', 0):.3f} | "
            f"{lat.get('p95_seconds', 0):.3f} |"
        )
    local_stage = local.get("agent_phases", {}).get("stage_s", 0)
    cluster_stage = cluster.get("agent_phases", {}).get("stage_s", 0)
    lat_gap = cluster.get("latency", {}).get("median_seconds", 0) - local.get("latency", {}).get(
        "median_seconds", 0
    )
    return [
        "## On a Spark cluster",
        "",
        f"The same {local['rows']:,}-row delta (on its own {local['preload']:,}-row pre-load) "
        "and the same 1-row latency series, in the same run, with the agent's loader on a "
        "standalone master and one worker started from the installed pyspark on this machine "
        "(executors in their own JVM and working directory, reading the staging directory by "
        "absolute path).",
        "",
        "| Spark | end to end s | stage s | apply s | 1-row median s | 1-row p95 s |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"The cluster's overhead per delta: {cluster['e2e_seconds'] - local['e2e_seconds']:+.2f} s "
        f"end to end for the big delta ({cluster_stage - local_stage:+.2f} s in staging, the "
        f"part the executors run), {lat_gap:+.3f} s for a 1-row delta.",
    ]
