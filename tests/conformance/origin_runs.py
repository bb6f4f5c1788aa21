"""What the origin conformance tests share: the harness run against an origin template."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from conformance import cli

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "examples" / "marketing.sql"
FLAGS = (
    "--broker {broker} --datamart {datamart} --schema {schema} --deltas {deltas} "
    "--answer-timeout-seconds {answer_timeout} --state-timeout-seconds 5"
)
REFERENCE = f"{sys.executable} -m origin.cli run {FLAGS} --rows-per-delta 20 --chunk-rows 4"
LINE = re.compile(r"^(PASS|FAIL)  (\S+) +[\d.]+ s(?:: (\S+):)?", re.MULTILINE)


def run(broker: str, template: str, tmp: Path, *extra: str, schema: Path = SCHEMA) -> int:
    """`podd-conformance origin` against `template`, its logs in `tmp / "logs"`."""
    argv = [
        "origin",
        "--origin",
        template,
        "--broker",
        f"kafka://{broker}",
        "--schema",
        str(schema),
        "--work-dir",
        str(tmp / "logs"),
        *extra,
    ]
    return cli.main(argv)
