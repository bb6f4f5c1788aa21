"""The CDC origin's section of BENCHMARKS.md, from `bench.cdc_bench`'s results (`cdc`)."""

from __future__ import annotations

from typing import Any

#: Issue 46's targets: the origin's own CPU per change, and its changes/s against the
#: delta.in delta's rows/s and against the peer's, in one run.
ORIGIN_US_TARGET = 10.0
DELTA_IN_RATIO_TARGET = 0.5
PEER_RATIO_TARGET = 10.0
_NAMES = {"qlik": "Qlik JSON", "dataworks": "DataWorks JSON"}


def cdc_section(c: dict[str, Any]) -> list[str]:
    delta_in = c.get("delta_in")
    peer = c.get("qlik", {}).get("peer")
    lines = [
        "## CDC origin: Qlik and DataWorks topics (bench.cdc_bench)",
        "",
        f"Measured {c['date']} (`python -m bench.cdc_bench`, {c['bench_seconds']:,.0f} s). Each "
        "format: source changes over 10 tables in transactions of 1 to 100 changes, written to "
        "a 4-partition topic beforehand, then cut by the CDC origin (deltas of at most 100,000 "
        "changes) and applied by a fresh agent; timed from the first message read to the last "
        "`delta.in.rs`. Phases are the origin's busy seconds (reading runs beside cutting and "
        "sending, so they overlap on the clock). The peer follows the same Qlik topic with "
        "`json.loads` and batched per-row upserts, keeping current rows only.",
        *_warm_up(c),
        "",
        "| run | changes | deltas | seconds | changes/s | parse s | cut s | frame s "
        "| send + load s | origin CPU s | origin µs/change | agent tree CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fmt in ("qlik", "dataworks"):
        r = c.get(fmt)
        if not r:
            continue
        ph, cpu = r["phases"], r.get("cpu", {})
        agent = sum(cpu.get(k, 0) for k in ("agent", "spark_jvm", "spark_workers"))
        lines.append(
            f"| {_NAMES[fmt]} | {r['source_changes']:,} | {r['deltas']} | {r['seconds']:.1f} | "
            f"{r['changes_per_second']:,} | {ph['parse']:.1f} | {ph['cut']:.1f} | "
            f"{ph['frame']:.1f} | {ph['send_and_load']:.1f} | {cpu.get('origin', 0):.1f} | "
            f"{r.get('origin_us_per_change', 0):.1f} | {agent:.1f} |"
        )
    if delta_in:
        lines.append(
            f"| `delta.in` delta | {delta_in['rows']:,} rows | 1 | "
            f"{delta_in['seconds']:.1f} | {delta_in['rows_per_second']:,} rows/s "
            "| | | | | | | |"
        )
    if peer:
        lines.append(
            f"| peer (per-row upserts) | {peer['changes']:,} | - | {peer['seconds']:.1f} "
            f"| {peer['changes_per_second']:,} | | | | | | | |"
        )
    lines += ["", *_verdicts(c, delta_in, peer)]
    return lines


def _warm_up(c: dict[str, Any]) -> list[str]:
    """What the kernels' warm-up did before the run (runs recorded before it had none)."""
    said = c.get("warm_up")
    if not said:
        return []
    return [
        "",
        "Before measuring, the origin's and the agent's kernels were compiled into numba's "
        "cache, as an install does (`podd-cdc warm-up`, `replica-agent warm-up`): "
        + "; ".join(f"{name}: {line.split('; cached in')[0]}" for name, line in said.items())
        + ".",
    ]


def _verdicts(c: dict[str, Any], delta_in: Any, peer: Any) -> list[str]:
    lines = []
    for fmt in ("qlik", "dataworks"):
        r = c.get(fmt)
        if not r:
            continue
        rate = r["changes_per_second"]
        parts = []
        if "origin_us_per_change" in r:
            us = r["origin_us_per_change"]
            met = "met" if us <= ORIGIN_US_TARGET else "missed"
            parts.append(f"{us:.1f} µs of origin CPU a change (target {ORIGIN_US_TARGET:g}: {met})")
        if delta_in:
            ratio = rate / delta_in["rows_per_second"]
            met = _met(ratio, r.get("ceiling_ratio_to_delta_in"), DELTA_IN_RATIO_TARGET)
            parts.append(
                f"{ratio:.2f}x the `delta.in` rows/s (target {DELTA_IN_RATIO_TARGET}: {met})"
            )
        if peer:
            ratio = rate / peer["changes_per_second"]
            met = _met(ratio, r.get("ceiling_ratio_to_peer"), PEER_RATIO_TARGET)
            parts.append(f"{ratio:.1f}x the peer (target {PEER_RATIO_TARGET:g}: {met})")
        parts += _ceiling(r)
        memory = r.get("origin_rss_mib")
        if memory:
            held = r.get("held_peak")
            holding = f", holding {held:,} changes at most" if held else ""
            parts.append(
                f"the origin's process at {memory['peak']:,.0f} MiB at most while it ran "
                f"({memory['before']:,.0f} MiB before){holding}"
            )
        agent = r.get("agent_rss_mib")
        if agent:
            parts.append(
                f"the agent's tree at {agent['tree']:,.0f} MiB at most (its process "
                f"{agent['agent']:,.0f}, Spark's JVM {agent['spark_jvm']:,.0f}, "
                f"its Python workers {agent['spark_workers']:,.0f})"
            )
        if parts:
            lines.append(f"- {_NAMES[fmt]}: " + "; ".join(parts) + ".")
    return lines


def _met(ratio: float, ceiling_ratio: float | None, target: float) -> str:
    """A ratio target's verdict: met, missed, or missed and above the run's ceiling
    (`ceiling_ratio`, from `cdc_bench.with_ratios`: no overlap of the run's work reaches it
    on this machine)."""
    if ratio >= target:
        return "met"
    if ceiling_ratio is not None and ceiling_ratio < target:
        return "missed, and above this run's ceiling"
    return "missed"


def _ceiling(r: dict[str, Any]) -> list[str]:
    """The ceiling of the run's CPU account (`bench.cdc_ceiling`), with its ratios to the
    yardsticks (`cdc_bench.with_ratios`; runs recorded before the bench measured it have
    none)."""
    run = r.get("in_run")
    if not run:
        return []
    ceiling = run["ceiling_changes_per_second"]
    against = []
    if "ceiling_ratio_to_delta_in" in r:
        against.append(f"{r['ceiling_ratio_to_delta_in']:.2f}x the `delta.in` rows/s")
    if "ceiling_ratio_to_peer" in r:
        against.append(f"{r['ceiling_ratio_to_peer']:.1f}x the peer")
    cpu = run["cpu"]
    processes = ", ".join(
        f"{name} {cpu[name]:.1f}"
        for name in ("origin", "broker", "agent", "postgres")
        if name in cpu
    )
    return [
        f"at most {ceiling:,} changes/s on {run['cores']} cores"
        + (f" ({', '.join(against)})" if against else "")
        + f": the fill ({run['fill_seconds']:.1f} s, before the agent has a delta) and the "
        f"last load ({run['last_load_seconds']:.1f} s, the origin done) as they ran, and "
        f"the rest of the timed window's {cpu['machine']:.1f} CPU s ({processes}) packed "
        "onto every core (`bench.cdc_ceiling`)"
    ]
