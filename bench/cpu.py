"""Where the machine's CPU time went while a phase ran, by process, sampled every 100 ms.

The end-to-end benchmark runs everything on one machine: the origin (this process), the
broker, the agent with its Spark JVM and Python workers, and PostgreSQL. Overlapping the
agent's phases cannot make a delta faster than the CPU seconds its work takes divided by
the cores; this module measures those seconds.

Every 100 ms each process's cumulative user + system CPU time is read, keyed by pid and
start time so a reused pid is a new process. A process's share of a window is its last
reading minus its baseline: its reading at the window's start, or zero for a process
started since. Reaped children are not added to their parents (that would count them
twice), so a process's time after its last reading, and a process living less than one
interval, are missed; `machine` (from /proc/stat) counts everything, so `machine - sum of
groups` is what the sampling missed. A timeline of per-group totals lets the report split
the window at the agent's logged phase boundaries.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil

from bench.sampling import PeriodicSampler

GROUPS = (
    "origin",
    "broker",
    "agent",
    "spark_jvm",
    "spark_workers",
    "postgres",
    "postgres_background",
    "other",
    "sampler",
)
#: PostgreSQL's own processes (their command line names them), not a client's backend.
_PG_BACKGROUND = (
    b"walwriter",
    b"checkpointer",
    b"background writer",
    b"autovacuum",
    b"io worker",
    b"logical replication",
    b"walsummarizer",
    b"postgres -D",
    b"/bin/postgres",
)


@dataclass
class Sample:
    at: float  # seconds since the epoch (the agent's log timestamps are UTC)
    busy: float  # the machine's busy CPU seconds so far (all cores)
    groups: dict[str, float]


@dataclass
class CpuTimeline:
    samples: list[Sample] = field(default_factory=list)

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds per group (and `machine`, `wall`) from the sample at or before
        `start` to the sample at or after `end`."""
        if not self.samples:
            return {}
        first = max((s for s in self.samples if s.at <= start), key=lambda s: s.at, default=None)
        last = min((s for s in self.samples if s.at >= end), key=lambda s: s.at, default=None)
        first = first or self.samples[0]
        last = last or self.samples[-1]
        out = {g: round(last.groups[g] - first.groups[g], 3) for g in GROUPS}
        out["machine"] = round(last.busy - first.busy, 3)
        out["wall"] = round(last.at - first.at, 3)
        return out

    def whole(self) -> dict[str, float]:
        if not self.samples:
            return {}
        return self.between(self.samples[0].at, self.samples[-1].at)


def _busy() -> float:
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class _Stat:
    pid: int
    name: str
    ppid: int
    cpu: float  # user + system seconds
    started: int  # clock ticks after boot
    rss: int  # resident bytes


def _processes() -> list[_Stat]:
    """Every process's /proc/PID/stat, read directly: psutil costs several times more, and
    the sampler runs in the origin's process, whose time it would inflate."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        close = raw.rfind(b")")
        name = raw[raw.find(b"(") + 1 : close].decode(errors="replace")
        fields = raw[close + 2 :].split()
        utime, stime, started = int(fields[11]), int(fields[12]), int(fields[19])
        cpu, rss = (utime + stime) / _TICK, int(fields[21]) * _PAGE
        out.append(_Stat(int(entry), name, int(fields[1]), cpu, started, rss))
    return out


def own_rss() -> int:
    """This process's resident set, in bytes (/proc/self/statm: pages)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


def _pg_background(pid: int) -> bool:
    """A postmaster or one of its helpers; a client's backend says `postgres: user db …`."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ")
    except OSError:
        return False
    return any(name in cmdline for name in _PG_BACKGROUND)


#: The groups of the agent's process tree (`MachineCpu.agent_peak_rss`).
AGENT_TREE = ("agent", "spark_jvm", "spark_workers")


class MachineCpu(PeriodicSampler):
    """`with MachineCpu(agent_pid) as cpu:` ... `cpu.timeline` once the block has ended.
    The sampler's own CPU time is its own group, not the origin's; with no agent
    (`agent_pid=None`, the floors), no process counts as the agent's."""

    def __init__(self, agent_pid: int | None, interval: float = 0.1) -> None:
        super().__init__(interval)
        self.agent_pid = agent_pid
        self.timeline = CpuTimeline()
        self._seen: dict[tuple[int, int], tuple[str, float, float]] = {}
        self._sampler_cpu = 0.0
        #: The origin's (this process's) largest resident set seen, in bytes: read here, so
        #: that reading it is the sampler's time too, not the origin's.
        self.origin_peak_rss = 0
        #: The agent's tree's largest resident memory seen, in bytes, for each group of
        #: `AGENT_TREE` and `tree`, the largest sum of them at one sample (not the sum of
        #: each one's peak: the JVM and the workers peak at different moments).
        self.agent_peak_rss = dict.fromkeys((*AGENT_TREE, "tree"), 0)

    def _group(self, proc: _Stat, agent_tree: set[int]) -> str:
        if proc.pid == os.getpid():
            return "origin"
        if proc.pid == self.agent_pid:
            return "agent"
        if proc.pid in agent_tree:
            return "spark_jvm" if "java" in proc.name else "spark_workers"
        if proc.name.startswith("postgres"):
            return "postgres_background" if _pg_background(proc.pid) else "postgres"
        if "tansu" in proc.name:
            return "broker"
        return "other"

    def _agent_tree(self, procs: list[_Stat]) -> set[int]:
        if self.agent_pid is None:
            return set()
        children: dict[int, list[int]] = {}
        for p in procs:
            children.setdefault(p.ppid, []).append(p.pid)
        tree, todo = set(), [self.agent_pid]
        while todo:
            for child in children.get(todo.pop(), []):
                tree.add(child)
                todo.append(child)
        return tree

    def _sample(self) -> None:
        began = time.thread_time()
        busy = _busy()
        self.origin_peak_rss = max(self.origin_peak_rss, own_rss())
        procs = _processes()
        tree = self._agent_tree(procs)
        resident = dict.fromkeys(AGENT_TREE, 0)
        for proc in procs:
            key = (proc.pid, proc.started)
            if key in self._seen:
                group, first, _ = self._seen[key]
            else:  # new since the start: everything it used falls in the window
                group, first = self._group(proc, tree), proc.cpu if not self.started else 0.0
            self._seen[key] = (group, first, proc.cpu)
            if group in resident:
                resident[group] += proc.rss
        self._note_agent_rss(resident)
        groups = dict.fromkeys(GROUPS, 0.0)
        for group, first, last in self._seen.values():
            groups[group] += last - first
        groups["origin"] -= self._sampler_cpu
        groups["sampler"] = self._sampler_cpu
        self.timeline.samples.append(Sample(time.time(), busy, groups))
        if self.started:
            self._sampler_cpu += time.thread_time() - began

    def _note_agent_rss(self, resident: dict[str, int]) -> None:
        """Keep the peaks of one sample's resident bytes of each group of `AGENT_TREE`."""
        resident["tree"] = sum(resident.values())
        for group, held in resident.items():
            self.agent_peak_rss[group] = max(self.agent_peak_rss[group], held)

    def agent_rss_mib(self) -> dict[str, float]:
        """`agent_peak_rss` in MiB (`bench.cdc_bench`'s `agent_rss_mib`)."""
        return {group: round(held / 2**20, 1) for group, held in self.agent_peak_rss.items()}
