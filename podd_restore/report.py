"""`podd-restore check`: what the topic holds for a datamart, delta by delta, as text or JSON.

Per delta: the increments (runs) that wrote it, complete or not and what they lack, the
duplicates, the run a restore would use, and the schema changes it brings; then the deltas
missing between the first and the last, keys that could not be read, other datamarts in the
topic, and "restorable up to delta N" from the replica's next expected delta.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podd_restore.errors import RestoreError
from podd_restore.plan import Increment
from podd_restore.topic_index import TopicIndex
from protocol.changelog import ChangeKind


@dataclass(frozen=True)
class CheckReport:
    data: dict[str, Any]

    @property
    def restorable(self) -> bool:
        return bool(self.data["restorable"])

    def text(self) -> str:
        d = self.data
        lines = [
            f"topic holds {d['messages']} message(s) of datamart {d['datamart']}; "
            f"the replica expects delta {d['next_expected']}"
        ]
        for delta in d["deltas"]:
            runs = delta["runs"]
            if len(runs) == 1 and runs[0]["increment_id"] == delta.get("uses"):
                run = runs[0]
                lines.append(
                    f"delta {delta['delta']}: {delta['status']}: {_messages(run)}, "
                    f"{run['delta_date'][:19]}"
                )
                runs = []
            else:
                lines.append(f"delta {delta['delta']}: {delta['status']}")
            for run in runs:
                state = "complete" if run["complete"] else "INCOMPLETE: " + "; ".join(run["lacks"])
                used = " <- used" if run["increment_id"] == delta.get("uses") else ""
                lines.append(f"    run {run['increment_id']}: {_messages(run)}, {state}{used}")
            for change in delta["schema_changes"]:
                lines.append(f"    schema: {change}")
        for place, error in d["undecodable_keys"]:
            lines.append(f"unreadable key at {place}: {error}")
        for name, count in sorted(d["other_datamarts"].items()):
            lines.append(f"other datamart in the topic: {name} ({count} message(s), ignored)")
        if d["restorable_to"] is None:
            lines.append(f"nothing restorable from delta {d['next_expected']}")
        else:
            lines.append(f"restorable up to delta {d['restorable_to']}")
        if d["stops_at"] is not None:
            lines.append(f"a restore stops before delta {d['stops_at']}: {d['stop_reason']}")
        return "\n".join(lines)


def _messages(run: dict[str, Any]) -> str:
    dup = f", {run['duplicates']} duplicate(s)" if run["duplicates"] else ""
    return f"{run['messages']} message(s){dup}"


def _run(increment: Increment) -> dict[str, Any]:
    lacks = list(increment.problems) + [str(g) for g in increment.gaps()[:20]]
    return {
        "increment_id": increment.increment_id,
        "complete": increment.complete,
        "messages": len(increment.chunks),
        "duplicates": increment.duplicates,
        "lacks": lacks,
        "delta_date": increment.delta_date.isoformat(),
    }


def build_report(
    topic_index: TopicIndex, first: int, to_delta: int | None, increment_id: str | None
) -> CheckReport:
    index = topic_index.index
    deltas = index.deltas()
    seen_changes: set[int] = set()
    rows: list[dict[str, Any]] = []
    previous: int | None = None
    for number in deltas:  # those the topic holds, and one line per run of missing ones
        if previous is not None and number > previous + 1:
            missing = (
                f"{previous + 1}" if number == previous + 2 else f"{previous + 1}-{number - 1}"
            )
            rows.append(
                {
                    "delta": missing,
                    "runs": [],
                    "schema_changes": [],
                    "status": "MISSING: no increment of it is in the topic",
                }
            )
        previous = number
        plan = index.delta(number, increment_id=increment_id)
        entry: dict[str, Any] = {
            "delta": number,
            "runs": [_run(i) for i in plan.increments],
            "schema_changes": [],
        }
        if plan.chosen is not None:
            entry["uses"] = plan.chosen.increment_id
            entry["status"] = f"complete (run {plan.chosen.increment_id})" + (
                " (already in the replica)" if number < first else ""
            )
            try:
                changes = topic_index.changes(plan.chosen)
            except RestoreError as exc:
                changes = []
                entry["schema_changes"].append(f"unreadable: {exc}")
            for change in sorted(changes, key=lambda c: c.change_num):
                if change.change_num in seen_changes:
                    continue
                seen_changes.add(change.change_num)
                if change.kind is not ChangeKind.DATABASE:
                    name = f" {change.name}" if change.name else f": {change.query[:80]}"
                    entry["schema_changes"].append(f"{change.change_num} {change.kind}{name}")
        else:
            entry["status"] = "MISSING: " + (plan.refusal or "")
        rows.append(entry)
    plans, stop = index.restorable(first, to_delta=to_delta, increment_id=increment_id)
    restorable_to = plans[-1].delta_num if plans else (first - 1 if stop is None else None)
    if restorable_to is not None and restorable_to < 0:
        restorable_to = None
    data = {
        "datamart": topic_index.datamart,
        "messages": index.messages,
        "next_expected": first,
        "deltas": rows,
        "undecodable_keys": [(str(p), e) for p, e in index.undecodable],
        "other_datamarts": dict(index.other_datamarts),
        "restorable_to": restorable_to,
        "stops_at": None if stop is None else stop.delta_num,
        "stop_reason": None if stop is None else stop.refusal,
        # Nothing to restore is fine only when the replica already holds the topic's last.
        "restorable": stop is None and bool(deltas) and (bool(plans) or first > deltas[-1]),
    }
    return CheckReport(data)
