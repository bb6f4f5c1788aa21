"""A Spark standalone cluster (one master, one worker) from the installed pyspark.

The tests and the benchmarks run the loader on it as a user's cluster would: executors in
their own JVMs, their Python workers in the worker's own working directory, nothing shared
with the driver but the network and the paths a deployment mounts on both sides.

    with StandaloneCluster(work_dir, cores=2, memory="6g") as master_url:
        ...  # --spark-master spark://127.0.0.1:PORT

It is ready when the master's status page lists the worker as ALIVE.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from podd_runtime.agent_child import stop_process
from podd_runtime.errors import SparkClusterError
from podd_runtime.ports import free_port
from podd_runtime.wheels import package_dir


def spark_home() -> Path:
    """The installed pyspark is a Spark distribution: `bin/spark-class`, `jars/`."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    found = package_dir("pyspark")
    if found is None:
        raise SparkClusterError("pyspark is not installed: no Spark to start a cluster from")
    return found


class StandaloneCluster:
    """Master and worker processes on 127.0.0.1; logs and the worker's directory in `work_dir`."""

    def __init__(
        self,
        work_dir: Path,
        *,
        cores: int = 2,
        memory: str = "6g",
        workers: int = 1,
        worker_wrapper: Sequence[str] = (),
        ready_timeout: float = 90,
    ) -> None:
        """`workers=0` starts a master alone (no executor will ever run); `worker_wrapper`
        is a command the worker is started under (tests: a worker with its own mounts)."""
        self.work_dir = work_dir.resolve()
        self.cores = cores
        self.memory = memory
        self.workers = workers
        self.worker_wrapper = tuple(worker_wrapper)
        self.ready_timeout = ready_timeout
        # Two ports free now and distinct from each other (a released port can come back
        # from the next free_port() call); the workers' UIs take ephemeral ports (0), so
        # none of them can take the master's before it binds.
        self.port = free_port()
        self.ui_port = free_port()
        while self.ui_port == self.port:
            self.ui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self._processes: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, *args: str, wrapper: Sequence[str] = ()) -> None:
        home = spark_home()
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_NO_DAEMONIZE": "1"}
        env.pop("PYSPARK_GATEWAY_PORT", None)
        log = (self.work_dir / f"{name}.log").open("ab")
        with log:
            process = subprocess.Popen(
                [*wrapper, str(home / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.work_dir,
                env=env,
                start_new_session=True,
            )
        self._processes.append(process)

    def start(self) -> str:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        worker_dir = self.work_dir / "worker"
        worker_dir.mkdir(exist_ok=True)
        try:
            self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            )
            for number in range(self.workers):
                self._spawn(
                    f"worker-{number}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(worker_dir / str(number)),
                    "--webui-port",
                    "0",
                    wrapper=self.worker_wrapper,
                )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.master_url

    def alive_workers(self) -> int:
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as response:
            status = json.load(response)
        return sum(1 for w in status.get("workers", ()) if w.get("state") == "ALIVE")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    raise SparkClusterError(
                        f"a Spark process exited with {process.returncode}: see {self.work_dir}"
                    )
            try:
                if self.alive_workers() >= self.workers:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise SparkClusterError(
            f"no ALIVE worker after {self.ready_timeout:g} s: see the logs in {self.work_dir}"
        )

    def stop(self) -> None:
        for process in reversed(self._processes):
            stop_process(process, timeout=20)
        self._processes.clear()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
