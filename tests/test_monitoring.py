"""The alert rules pass promtool's unit tests, and every metric the dashboard and the rules
name is one the agent exports (a name that drifts would show an empty panel, or an alert that
never fires). The same files against a real Prometheus scraping a real agent:
tests/agent/test_monitoring.py."""

from __future__ import annotations

import json
import subprocess

from replica_agent.metrics import AgentMetrics
from tests.monitoring import (
    ALERT_TESTS,
    ALERTS,
    DASHBOARD,
    alert_rules,
    dashboard_queries,
    metric_names,
    tool,
)


def exported() -> set[str]:
    """Every sample name the agent's /metrics page can hold (counters' `_total`,
    histograms' `_bucket`...)."""
    names = set()
    for family in AgentMetrics().registry.collect():
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_sum", "_count", "_created"),
        }.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_the_alert_rules_are_valid_and_pass_their_unit_tests() -> None:
    promtool = tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", str(ALERT_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ALERT_TESTS.parent,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_unit_test() -> None:
    text = ALERT_TESTS.read_text()
    untested = [name for name in alert_rules() if f"alertname: {name}" not in text]
    assert not untested


def test_every_metric_the_dashboard_and_the_rules_name_is_exported() -> None:
    names = exported()
    expressions = [*dashboard_queries().values(), *alert_rules().values()]
    used = set().union(*(metric_names(e) for e in expressions))
    assert used, "no podd_ metric found in the dashboard and the rules"
    assert not used - names, f"not exported by the agent: {sorted(used - names)}"
    # The operator-facing panels the issue names are there.
    titles = {panel["title"] for panel in json.loads(DASHBOARD.read_text())["panels"]}
    for wanted in (
        "Replica lag",
        "Seconds since the last applied delta",
        "Load time",
        "Rows per delta",
        "Answers on delta.in.rs",
        "Refused and poison messages",
        "Staging disk",
    ):
        assert wanted in titles


def test_the_dashboard_reads_the_provisioned_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    uids = {
        target["datasource"]["uid"] for panel in dashboard["panels"] for target in panel["targets"]
    }
    provisioned = ALERTS.parent.parent / "grafana/provisioning/datasources/prometheus.yml"
    assert uids == {"prometheus"}
    assert "uid: prometheus" in provisioned.read_text()
