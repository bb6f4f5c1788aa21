"""The monitoring files of compose/ (the Grafana dashboard, the Prometheus alert rules) as the
tests read them, and a real Prometheus started for a test."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from podd_runtime.ports import free_port
from tests.conftest import REPO

COMPOSE = REPO / "compose"
DASHBOARD = COMPOSE / "grafana" / "dashboards" / "podd-replica.json"
ALERTS = COMPOSE / "prometheus" / "alerts.yml"
ALERT_TESTS = COMPOSE / "prometheus" / "alerts_test.yml"
#: What Grafana puts in place of its own variables before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
_NAME = re.compile(r"\b(podd_[a-z_]+)")


def tool(name: str) -> str:
    """A Prometheus binary; `scripts/install.sh --dev` installs them (Debian's package)."""
    found = shutil.which(name)
    assert found, f"{name} is not on PATH: run scripts/install.sh --dev (Debian's prometheus)"
    return found


def dashboard_queries() -> dict[str, str]:
    """{panel title and refId: the PromQL Prometheus receives}."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queries = {}
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries[f"{panel['title']} {target['refId']}"] = expr
    return queries


def alert_rules() -> dict[str, str]:
    """{alert name: its expression}."""
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def metric_names(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


class Prometheus:
    """A Prometheus server scraping one target every second, with the alert rules."""

    def __init__(self, work_dir: Path, target: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": "podd-replica-agent", "static_configs": [{"targets": [target]}]}
            ],
        }
        self.config = work_dir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.data = work_dir / "prometheus-data"
        self.log = work_dir / "prometheus.log"

    @contextmanager
    def running(self) -> Iterator[Prometheus]:
        command = [
            tool("prometheus"),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.data}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with self.log.open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not self._ready():
                assert process.poll() is None, self.log.read_text()[-3000:]
                assert time.monotonic() < deadline, "Prometheus did not start in 60 s"
                time.sleep(0.2)
            yield self
        finally:
            process.terminate()
            process.wait(timeout=30)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
                body = json.loads(answer.read())
        except urllib.error.HTTPError as error:  # a query Prometheus refuses: its words
            body = json.loads(error.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one sample) the expression gives now."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result
