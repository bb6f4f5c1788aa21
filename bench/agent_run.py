"""The agent under benchmark: `replica-agent run` as a child process, and what its log says.

Each scaling point gets a fresh agent (so its peak memory is its own), on the same broker
and replica; the benchmark's Kafka client talks to it over the same topics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from podd_runtime.agent_child import AgentChild, AgentSpec, start_agent
from protocol.schema import LogicalSchema


@dataclass(frozen=True)
class AgentConfig:
    bootstrap: str
    dsn: str
    spark_master: str
    group_id: str
    #: Settings every agent of the run gets (the store: `PODD_STORE`).
    env: tuple[tuple[str, str], ...] = ()


@contextmanager
def running_agent(
    config: AgentConfig,
    schemas: list[LogicalSchema],
    data_dir: Path,
    extra_env: dict[str, str] | None = None,
) -> Iterator[AgentChild]:
    """An agent serving `schemas`, ready (recovered, metrics up) when the block starts."""
    spec = AgentSpec(
        schemas,
        config.bootstrap,
        config.dsn,
        data_dir,
        config.group_id,
        config.spark_master,
        dict(config.env) | dict(extra_env or {}),
    )
    agent = start_agent(spec, data_dir / "agent.log")
    try:
        agent.wait_ready()
        yield agent
    finally:
        agent.stop()


def log_events(log_path: Path, request_id: str) -> list[dict[str, Any]]:
    """The agent's JSON log records about one transfer, in order."""
    records = []
    for line in log_path.read_text(errors="replace").splitlines():
        if request_id not in line or not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("requestId") == request_id:
            records.append(record)
    return records


def _event_times(records: list[dict[str, Any]]) -> dict[str, datetime]:
    """When each event was logged; the loader's `applied` (step 4) as `apply end`."""
    times = {r["event"]: datetime.fromisoformat(r["timestamp"]) for r in records}
    for r in records:
        if r["event"] == "applied" and r.get("step") == 4:
            times["apply end"] = datetime.fromisoformat(r["timestamp"])
    return times


def phase_windows(log_path: Path, request_id: str) -> dict[str, tuple[float, float]]:
    """Each phase of one transfer as (start, end) in seconds since the epoch: receiving
    (first chunk to complete), staging (load start to staged), the apply transaction
    (staged to its end)."""
    times = _event_times(log_events(log_path, request_id))
    bounds = {
        "receive": ("first chunk", "complete"),
        "stage": ("load start", "staged"),
        "apply": ("staged", "apply end"),
    }
    return {
        name: (times[a].timestamp(), times[b].timestamp())
        for name, (a, b) in bounds.items()
        if a in times and b in times
    }


def phases(log_path: Path, request_id: str) -> dict[str, float]:
    """Seconds the agent spent receiving (first chunk to complete), waiting for the loader,
    staging in Spark, applying in PostgreSQL, and from the commit to the answer."""
    records = log_events(log_path, request_id)
    times = _event_times(records)
    out: dict[str, float] = {}

    def span(name: str, start: str, end: str) -> None:
        if start in times and end in times:
            out[name] = round((times[end] - times[start]).total_seconds(), 3)

    span("receive_s", "first chunk", "complete")
    span("queue_s", "complete", "load start")
    for r in records:
        if r["event"] == "staged":
            out["stage_s"] = float(r["seconds"])
        elif r["event"] == "applied" and r.get("step") == 4:
            out["apply_s"] = float(r["seconds"])
    span("load_to_answer_s", "load start", "answered")
    return out
