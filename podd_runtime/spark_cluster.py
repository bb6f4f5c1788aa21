"""A Spark standalone cluster (one master, one worker) from the installed pyspark.

The tests and the benchmarks run the loader on it as a user's cluster would: executors in
their own JVMs, their Python workers in the worker's own working directory, nothing shared
with the driver but the network and the paths a deployment mounts on both sides.

    with StandaloneCluster(work_dir, cores=2, memory="6g") as master_url:
        ...  # --spark-master spark://127.0.0.1:PORT

It is ready when the master's status page, answering with its own URL, lists the workers
as ALIVE.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from podd_runtime.agent_child import stop_process
from podd_runtime.errors import SparkClusterError
from podd_runtime.ports import free_port
from podd_runtime.wheels import package_dir

# The master binds exactly the ports it is given, and serves no REST submission port (a
# fixed 6066 that two clusters on one machine would contend for; nothing here submits by it).
_MASTER_OPTS = "-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false"
_MASTER_ATTEMPTS = 3


def _two_free_ports() -> tuple[int, int]:
    """Two ports free now and distinct (a released port can come back from the next call)."""
    port = free_port()
    ui_port = free_port()
    while ui_port == port:
        ui_port = free_port()
    return port, ui_port


def _a_port_was_taken(log: Path) -> bool:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return False
    return "java.net.BindException" in text or "Address already in use" in text


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
        self._processes: list[subprocess.Popen[bytes]] = []
        self.port, self.ui_port = _two_free_ports()

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(
        self,
        name: str,
        *args: str,
        wrapper: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        home = spark_home()
        # SPARK_LOCAL_IP: the web UIs bind the loopback address too, not every interface.
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        env.update(extra_env or {})
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
        return process

    def start(self) -> str:
        """The master first, on exactly its two ports; the workers once it answers as itself.

        A port free when chosen can be taken before the master's JVM binds it. Spark would
        then quietly bind the next port up, and whatever holds ours would answer for the
        master. So the master may not move (`spark.port.maxRetries=0`): it exits on a taken
        port, and the cluster starts it again on two new ones.
        """
        self.work_dir.mkdir(parents=True, exist_ok=True)
        worker_dir = self.work_dir / "worker"
        worker_dir.mkdir(exist_ok=True)
        deadline = time.monotonic() + self.ready_timeout
        try:
            self._start_master(deadline)
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
            self._wait_until(deadline, lambda status: self._alive(status) >= self.workers)
        except BaseException:
            self.stop()
            raise
        return self.master_url

    def _start_master(self, deadline: float) -> None:
        opts = f"{os.environ.get('SPARK_MASTER_OPTS', '')} {_MASTER_OPTS}".strip()
        for attempt in range(1, _MASTER_ATTEMPTS + 1):
            master = self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
                extra_env={"SPARK_MASTER_OPTS": opts},
            )
            try:
                self._wait_until(deadline, lambda status: True)
                return
            except SparkClusterError:
                if master.poll() is None or attempt == _MASTER_ATTEMPTS:
                    raise
                if not _a_port_was_taken(self.work_dir / "master.log"):
                    raise
            self._processes.remove(master)
            self.port, self.ui_port = _two_free_ports()

    def status(self) -> dict[str, Any] | None:
        """The master's status page, or None while ours is not the server answering there."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                status = json.load(response)
        except (OSError, http.client.HTTPException, ValueError):
            return None
        if not isinstance(status, dict) or status.get("url") != self.master_url:
            return None
        return status

    def alive_workers(self) -> int:
        status = self.status()
        return 0 if status is None else self._alive(status)

    @staticmethod
    def _alive(status: dict[str, Any]) -> int:
        workers = status.get("workers")
        if not isinstance(workers, list):
            return 0
        return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")

    def _wait_until(self, deadline: float, ready: Callable[[dict[str, Any]], bool]) -> None:
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.poll() is not None:
                    raise SparkClusterError(
                        f"a Spark process exited with {process.returncode}: see {self.work_dir}"
                    )
            status = self.status()
            if status is not None and ready(status):
                return
            time.sleep(0.3)
        raise SparkClusterError(
            f"the master at {self.master_url} and {self.workers} ALIVE worker(s) not ready "
            f"after {self.ready_timeout:g} s: see the logs in {self.work_dir}"
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
