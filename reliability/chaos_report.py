"""What a chaos run (`reliability.chaos`) saw, and its report (RELIABILITY.md)."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ChaosRun:
    """What happened, for the report."""

    deltas: int
    faults: Counter[str] = field(default_factory=Counter)
    malformed: Counter[str] = field(default_factory=Counter)
    #: Transfers of applied deltas sent again (as replayed signed messages would be).
    replays: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    agent_exits: Counter[str] = field(default_factory=Counter)  # exits the agent chose
    peak_rss_mib: float = 0.0
    seconds: float = 0.0
    differences: list[str] = field(default_factory=list)
    registry_rows: int = 0
    lies: list[str] = field(default_factory=list)
    #: Per fault: the longest time from its injection to the next delta answered OK.
    recovery: dict[str, float] = field(default_factory=dict)
    lost: int = 0  # deltas missing from the registry at the end
    doubled: int = 0  # registry rows beyond one per delta
    #: Faults that could not be injected here, and why.
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what a fault's target did
    failures: list[str] = field(default_factory=list)  # a fault handled wrongly

    @property
    def passed(self) -> bool:
        return (
            not self.differences
            and not self.lies
            and self.registry_rows == self.deltas
            and not self.failures
        )

    def recovered(self, fault: str, seconds: float) -> None:
        self.recovery[fault] = max(self.recovery.get(fault, 0.0), seconds)


def report(run: ChaosRun, args: argparse.Namespace) -> str:
    def table(title: str, counts: Counter[str]) -> list[str]:
        rows = [f"| {name} | {count:,} |" for name, count in counts.most_common()]
        return [f"| {title} | count |", "|---|---|", *(rows or ["| none | 0 |"]), ""]

    verdict = "PASS" if run.passed else "FAIL"
    kills = run.faults["agent kill -9"]
    short_of_kills = (
        [
            f"* {kills} of the {args.kills} kills scheduled fell before the last delta was "
            "applied (each waits for the restart of the one before)"
        ]
        if kills < args.kills
        else []
    )
    lines = [
        "# Reliability: deltas through faults",
        "",
        f"`python -m reliability.chaos --deltas {args.deltas} "
        f"--rows-per-delta {args.rows_per_delta} --kills {args.kills} "
        f"--pg-restarts {args.pg_restarts} --seed {args.seed}` on a 2-core "
        "VM: embedded Tansu and PostgreSQL, the agent as a process (local[2] Spark), the "
        "reference origin, malformed messages all along.",
        "",
        f"**{verdict}**: {run.deltas} deltas in {run.seconds:,.0f} s; the replica "
        + (
            "equals the reference model, also as of every delta"
            if not run.differences
            else "DIFFERS from the model: " + "; ".join(run.differences[:5])
        )
        + f"; the registry has {run.registry_rows} rows for {run.deltas} deltas; "
        + (
            f"{len(run.lies)} transfer(s) that applied a delta were answered ERROR"
            if run.lies
            else "no transfer that applied a delta was ever answered ERROR"
        )
        + ".",
        "",
        "| fault injected | times | deltas lost | deltas doubled | wrong answers "
        "| longest time to recover |",
        "|---|---|---|---|---|---|",
        *(
            f"| {name} | {count} | {run.lost} | {run.doubled} | {len(run.lies)} | "
            + (f"{run.recovery[name]:.1f} s |" if name in run.recovery else "- |")
            for name, count in run.faults.most_common()
        ),
        "",
        "(Lost, doubled and wrong answers are counted for the whole run, every fault "
        "together; time to recover runs from the injection to the next delta answered OK.)",
        "",
        *(f"* {note}" for note in run.notes),
        *short_of_kills,
        *(f"* NOT injected: {name}: {why}" for name, why in run.skipped.items()),
        *(f"* FAILED: {failure}" for failure in run.failures),
        "",
        *table("agent exit it chose (a supervisor restarted it)", run.agent_exits),
        *table("malformed message sent", run.malformed),
        *table("applied delta replayed under a new requestId", run.replays),
        *table("answer on delta.in.rs (status or errorCode)", run.answers),
        f"Peak RSS of the agent's Python process: {run.peak_rss_mib:,.0f} MiB "
        "(sampled every 0.5 s; Spark's JVM and workers aside).",
        "",
    ]
    for lie in run.lies[:20]:
        lines.append(f"* {lie}")
    return "\n".join(lines)
