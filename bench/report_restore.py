"""The report's restore section: `podd-restore run` beside the same rows through
`delta.in`, and its CPU account."""

from __future__ import annotations

from typing import Any


def restore_section(r: dict[str, Any], headline_point: dict[str, Any]) -> list[str]:
    ratio = r["delta_in_seconds"] / r["restore_seconds"] if r["restore_seconds"] else 0.0
    versus = r["restore_rows_per_second"] / max(1, headline_point["rows_per_second"])
    return [
        "## Restore from a backup topic",
        "",
        f"{r['rows']:,} rows in {r['deltas']} deltas: a BACKUP_TO_KAFKA topic restored by "
        "`podd-restore run` (timed from the first message read to the last commit), beside "
        "the same rows sent as `delta.in` deltas to a fresh agent, one delta at a time as the "
        "protocol requires (first chunk produced to last answer). Same run, same replica, the "
        "same chunk bodies byte for byte.",
        "",
        "| path | seconds | rows/s |",
        "|---|---:|---:|",
        f"| `podd-restore run` | {r['restore_seconds']:.2f} | {r['restore_rows_per_second']:,} |",
        f"| `delta.in` through the agent | {r['delta_in_seconds']:.2f} | "
        f"{r['delta_in_rows_per_second']:,} |",
        f"| the headline delta ({headline_point['rows']:,} rows in one `delta.in` delta) | "
        f"{headline_point['e2e_seconds']:.2f} | {headline_point['rows_per_second']:,} |",
        "",
        f"The restore is {ratio:.2f}x the speed of the same deltas through `delta.in`, and "
        f"{versus:.2f} of the headline delta's rows/s (issue 29's target: at least 0.8); its "
        f"process took {r['restore_process_seconds']:.1f} s in all. Spark is started only "
        "for a delta bigger than `PODD_IN_DRIVER_MAX_MIB` (8 MiB for a restore): these deltas "
        "(about 2.5 MiB decoded each) are staged by the restore's own process, in each "
        "delta's apply transaction, each decoded while the delta before it applies.",
        *_restore_cpu(r.get("restore_cpu") or {}, r["deltas"]),
    ]


def _restore_cpu(cpu: dict[str, float], deltas: int) -> list[str]:
    """The restore's CPU account: what bounds it is one PostgreSQL backend's work."""
    if not cpu.get("wall"):
        return []
    pg, wall = cpu["postgres"], cpu["wall"]
    return [
        "",
        f"Its CPU, sampled as for the headline (the whole process, {wall:.2f} s): PostgreSQL "
        f"backends {pg:.2f} s, the restore's process with the rest {cpu['other']:.2f} s, "
        f"the broker {cpu['broker']:.2f} s; the machine {cpu['machine']:.2f} s "
        f"({cpu['machine'] / wall:.2f} of its 2 CPUs). One backend does a delta's COPY, "
        f"apply and commit, and the deltas go one after the other: {pg / wall:.0%} of the "
        f"wall time it was busy. {deltas} deltas of this size cost it more than one "
        "delta of all their rows: each table's few thousand keys are looked up in t_actual's "
        "index one by one (a hash join would read the whole table for them), and every "
        "delta commits on its own. Decoding ahead hides the restore's own work behind "
        "the backend's; the backend's work is what is left.",
    ]
