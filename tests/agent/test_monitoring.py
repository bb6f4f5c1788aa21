"""A real Prometheus scrapes a real agent while a delta goes through: every expression of
the Grafana dashboard and of the alert rules evaluates without error, the lag panels show the
delta (1 behind while it is sent and loaded, 0 once applied), and the rules are healthy."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from protocol.apply_model import DeltaRow
from protocol.messages import DeltaStatus
from protocol.schema import LogicalSchema
from protocol.workload import Workload, WorkloadSpec
from tests.agent.conftest import AgentProcess, agent_fixture
from tests.agent.kafka_io import Origin, chunks_of
from tests.agent.test_integration import outcome
from tests.loader.staging_helpers import delta_date
from tests.monitoring import Prometheus, alert_rules, dashboard_queries

pytestmark = pytest.mark.slow

agent = agent_fixture(1, incomplete_timeout=120)

LAG = "Replica lag A"
SINCE = "Seconds since the last applied delta A"
LAST = "Last applied delta A"


def _value(prometheus: Prometheus, expr: str, datamart: str) -> float | None:
    for sample in prometheus.query(expr):
        if sample["metric"].get("datamart", "") == datamart:
            return float(sample["value"][1])
    return None


def _wait_for(prometheus: Prometheus, expr: str, datamart: str, wanted: float) -> None:
    deadline = time.monotonic() + 60
    while _value(prometheus, expr, datamart) != wanted:
        assert time.monotonic() < deadline, (expr, prometheus.query(expr))
        time.sleep(0.5)


def test_prometheus_scraping_the_agent_during_a_delta(agent: AgentProcess, tmp_path: Path) -> None:
    schema = agent.take()
    datamart = schema.datamart
    queries = dashboard_queries()
    server = Prometheus(tmp_path, f"127.0.0.1:{agent.metrics_port}")
    with server.running() as prometheus:
        _wait_for(prometheus, 'up{job="podd-replica-agent"}', datamart="", wanted=1)
        # Served from the start: nothing applied, nothing behind.
        _wait_for(prometheus, queries[LAST], datamart, -1)
        _wait_for(prometheus, queries[LAG], datamart, 0)

        rows = Workload(schema, WorkloadSpec(rows_per_delta=150_000, seed=3)).next_delta()

        def rows_of(schema: LogicalSchema) -> dict[str, list[DeltaRow]]:
            return Workload(schema, WorkloadSpec(rows_per_delta=20, seed=4)).next_delta()

        async def send() -> DeltaStatus:
            async with Origin(agent.broker, agent.topics) as origin:
                chunks = chunks_of(schema, 0, rows, chunk_rows=2000)
                await origin.send_chunks(chunks)
                return (await outcome(origin, chunks[0].key.request_id)).status

        assert asyncio.run(send()) is DeltaStatus.OK
        _wait_for(prometheus, queries[LAST], datamart, 0)
        _wait_for(prometheus, queries[LAG], datamart, 0)
        # The lag panel showed the delta while it was sent and loaded (scraped every second).
        during = f"max_over_time(({queries[LAG]})[5m:1s])"
        assert _value(prometheus, during, datamart) == 1, prometheus.query(during)
        since = _value(prometheus, queries[SINCE], datamart)
        assert since is not None
        assert 0 <= since < 60
        # The answer counter may reach Prometheus a scrape after the registry's panels.
        _wait_for(prometheus, 'podd_answers_total{answer="OK"}', datamart, 1)
        answers = prometheus.query('podd_answers_total{answer="OK"}')
        assert [a["metric"]["datamart"] for a in answers] == [datamart]

        # Hostile claims move no panel: a delta number far ahead (refused OUT_OF_SEQUENCE)
        # does not raise the lag, and a datamart not served adds no label of its name.
        stranger = f"not_served_{datamart}"
        far = [
            replace(c, key=c.key.model_copy(update={"delta_num": 10**15}))
            for c in chunks_of(schema, 1, rows_of(schema), date=delta_date(1))
        ]
        foreign = [
            replace(c, key=c.key.model_copy(update={"datamart": stranger}))
            for c in chunks_of(schema, 1, rows_of(schema))
        ]

        async def send_hostile() -> list[str | None]:
            async with Origin(agent.broker, agent.topics) as origin:
                await origin.send_chunks([*far, *foreign])
                found = [await outcome(origin, c[0].key.request_id) for c in (far, foreign)]
                return [r.error_code for r in found]

        assert asyncio.run(send_hostile()) == ["OUT_OF_SEQUENCE", "UNKNOWN_DATAMART"]
        _wait_for(prometheus, 'podd_answers_total{answer="UNKNOWN_DATAMART"}', "", 1)
        assert _value(prometheus, queries[LAG], datamart) == 0
        assert _value(prometheus, queries[LAST], datamart) == 0
        labels = {m["metric"].get("datamart") for m in prometheus.query("{datamart!=''}")}
        assert stranger not in labels

        # Every expression evaluates without error (`query` asserts Prometheus's status).
        for _name, expr in [*queries.items(), *alert_rules().items()]:
            prometheus.query(expr)
        time.sleep(2)  # an evaluation of the rules after the delta
        groups = prometheus.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert {rule["name"] for rule in rules} == set(alert_rules())
        assert all(rule["health"] == "ok" for rule in rules), rules
        firing = [rule["name"] for rule in rules if rule["state"] == "firing"]
        assert firing == [] or firing == ["PoddSigningDisabled"], firing
