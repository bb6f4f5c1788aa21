"""The benchmark's CPU sampler (`bench.cpu`) on real processes: who used the CPU, when."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.cpu import MachineCpu

SPIN = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"


def test_a_busy_child_of_the_agent_is_counted_as_its_and_the_machine_counts_it_too() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with MachineCpu(sleeper.pid) as cpu:
            started = time.time()
            # A child of the "agent" (not java): one of Spark's Python workers.
            subprocess.run(
                [sys.executable, "-c", f"import subprocess, sys\n{SPIN}"],
                check=True,
            )
            spun = time.time()
            time.sleep(0.3)
    finally:
        sleeper.kill()
        sleeper.wait()
    whole = cpu.timeline.whole()
    # The spinning process was this test's child, not the agent's: it is "other".
    assert whole["other"] >= 0.45
    assert whole["agent"] < 0.1
    assert whole["spark_workers"] == 0.0
    assert whole["machine"] >= whole["other"]
    assert whole["wall"] >= 0.9
    # The spin is placed in its own window. (Nothing is asserted of the window after it:
    # "other" holds whatever else the machine runs meanwhile, and a test must not assume an
    # idle machine.)
    assert cpu.timeline.between(started, spun)["other"] >= 0.45


def sampled_agent_running(script: str) -> MachineCpu:
    """The sampler over an "agent" whose child (one of its "workers") runs `script`, until
    the agent has ended."""
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {script!r}])",
        ]
    )
    with MachineCpu(agent.pid) as cpu:
        agent.wait(timeout=30)
    return cpu


def test_the_agents_descendants_are_its_workers() -> None:
    whole = sampled_agent_running(SPIN).timeline.whole()
    # The grandchild's 0.6 CPU-s is the agent's workers'. (What "other" holds is whatever
    # else the machine ran meanwhile: asserting it small failed whenever anything did.)
    assert whole["spark_workers"] >= 0.45
    assert whole["agent"] < whole["spark_workers"]


def test_the_origins_peak_memory_is_what_this_process_held_at_most() -> None:
    with MachineCpu(None) as cpu:
        held = bytearray(200 * 2**20)
        held[::4096] = b"x" * len(held[::4096])  # touch every page: resident, not reserved
        time.sleep(0.4)
        del held
        time.sleep(0.3)
    assert cpu.origin_peak_rss >= 200 * 2**20


HOLD = (
    "import time\nheld = bytearray(150 * 2**20)\nheld[::4096] = b'x' * len(held[::4096])\n"
    "time.sleep(0.6)"
)


def test_the_agents_peak_memory_counts_its_tree_at_once() -> None:
    cpu = sampled_agent_running(HOLD)
    peak = cpu.agent_peak_rss
    # The grandchild held 150 MiB resident: the agent's workers', not the agent's own.
    assert peak["spark_workers"] >= 150 * 2**20
    assert peak["agent"] < 100 * 2**20
    assert peak["tree"] > peak["spark_workers"]  # the agent itself, at the same moment
    assert cpu.agent_rss_mib()["tree"] == round(peak["tree"] / 2**20, 1)
