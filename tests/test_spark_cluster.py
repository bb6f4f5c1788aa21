"""The standalone cluster the tests and benchmarks start: it answers for itself or not at all.

A bench run in CI failed when its cluster's status port answered with an HTML page: another
server held the port the master had been given, the master had quietly bound the next one,
and the status check read someone else's page.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from podd_runtime.spark_cluster import StandaloneCluster


class _SparkLikePage(BaseHTTPRequestHandler):
    """Any path answers 200 with HTML, as a Spark UI's catch-all page does."""

    def do_GET(self) -> None:
        body = b"<!DOCTYPE html><html><body><span>root</span></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _another_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("0.0.0.0", 0), _SparkLikePage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_a_status_port_taken_before_the_master_binds_it_is_given_up(tmp_path: Path) -> None:
    with _another_server() as taken:
        cluster = StandaloneCluster(tmp_path / "cluster", cores=1, memory="1g")
        cluster.ui_port = taken  # taken between being chosen and being bound
        with cluster as master:
            assert cluster.ui_port != taken
            status = cluster.status()
            assert status is not None
            assert status["url"] == master
            assert cluster.alive_workers() == 1
    assert "BindException" in (tmp_path / "cluster" / "master.log").read_text()


def test_a_stopped_cluster_answers_nothing(tmp_path: Path) -> None:
    cluster = StandaloneCluster(tmp_path / "cluster", cores=1, memory="1g", workers=0)
    with cluster as master:
        status = cluster.status()
        assert status is not None
        assert status["url"] == master
        assert cluster.alive_workers() == 0
    assert cluster.status() is None
