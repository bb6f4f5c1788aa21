"""The chaos run's supervisor: one agent process kept running, as a service manager would,
restarted when it ends or after the run kills it, its memory sampled."""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from podd_runtime.agent_child import AgentChild, AgentSpec, start_agent
from podd_runtime.errors import AgentChildError
from reliability.chaos_report import ChaosRun


class Supervisor:
    """Keeps one agent process running, as systemd or Kubernetes would."""

    def __init__(self, spec: AgentSpec, data_dir: Path, run: ChaosRun) -> None:
        self.spec, self.data_dir, self.run = spec, data_dir, run
        self.child: AgentChild | None = None
        self.starts = 0
        #: Its agent answered on its metrics page, so it holds its replica (the store opens
        #: first); False from a kill or a start until then.
        self.ready = False

    def start(self) -> None:
        """Start the agent; one that exits at start is started again after a pause, a few
        times (systemd's `Restart=always` with `RestartSec`), before the run gives up."""
        self.ready = False
        for attempt in range(1, 6):
            self.starts += 1
            self.child = start_agent(self.spec, self.data_dir / f"agent-{self.starts}.log")
            try:
                self.child.wait_ready(timeout=240)
                self.ready = True
                return
            except AgentChildError:
                if attempt == 5:
                    raise
                self.run.agent_exits[f"exit code {self.child.process.poll()} at start"] += 1
                time.sleep(3)

    def kill(self) -> None:
        assert self.child is not None
        self.child.kill()
        self.run.faults["agent kill -9"] += 1
        self.start()

    def watch(self) -> None:
        """Restart the agent if it ended by itself; sample its memory."""
        assert self.child is not None
        code = self.child.process.poll()
        if code is not None:
            self.run.agent_exits[f"exit code {code}"] += 1
            self.start()
            return
        try:
            rss = psutil.Process(self.child.process.pid).memory_info().rss / 2**20
        except psutil.Error:
            return
        self.run.peak_rss_mib = max(self.run.peak_rss_mib, rss)

    def running(self) -> bool:
        """Its agent is up and holds its replica."""
        return self.ready and self.child is not None and self.child.process.poll() is None

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
