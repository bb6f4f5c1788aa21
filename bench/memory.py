"""Peak resident memory of a process tree, sampled every 100 ms while a phase runs.

The tree of a running agent: the agent's Python process (Faust, the tracker, and the Spark
driver's Python side), the Spark JVM it starts (the driver and, in local mode, the
executors), and the Python workers the JVM forks for the tasks (summed).
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from bench.sampling import PeriodicSampler


@dataclass
class Peaks:
    python: int = 0
    jvm: int = 0
    workers: int = 0

    def as_mib(self) -> dict[str, float]:
        return {
            "python_mib": round(self.python / 2**20, 1),
            "jvm_mib": round(self.jvm / 2**20, 1),
            "workers_mib": round(self.workers / 2**20, 1),
        }


class TreeMemory(PeriodicSampler):
    """`with TreeMemory(pid) as peak:` ... `peak.peaks` once the block has ended."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        super().__init__(interval)
        self.root = psutil.Process(pid)
        self.peaks = Peaks()

    def _sample(self) -> None:
        try:
            python = self.root.memory_info().rss
            children = self.root.children(recursive=True)
        except psutil.Error:
            return
        jvm = workers = 0
        for child in children:
            try:
                rss = child.memory_info().rss
                if "java" in child.name():
                    jvm += rss
                else:
                    workers += rss
            except psutil.Error:
                continue
        p = self.peaks
        p.python, p.jvm, p.workers = max(p.python, python), max(p.jvm, jvm), max(p.workers, workers)
