"""A process that loads staged transfers into an embedded ClickHouse replica and may kill
itself (SIGKILL) at a chosen point, for `test_adqm_crash`; or that prints the replica's
state as JSON. chdb opens one directory per process, so every step is a process of its own.

    python -m tests.loader.adqm_crash_child load DIR SCHEMA.json TRANSFER... \
        [--kill-after-attach K | --kill-after-publish K | --kill-after-register]
    python -m tests.loader.adqm_crash_child dump DIR SCHEMA.json THROUGH
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from protocol.schema import LogicalSchema
from replica_store.adqm.store import AdqmStore
from replica_store.transfer import StagedTransfer
from tests.loader.store_loads import load


class Killing:
    """The store's client, killing this process right after the K-th statement holding
    `marker` (a table's move into t_actual, or its publish INSERT), or after the registry
    row's insert."""

    def __init__(self, client: Any, marker: str, count: int | None, after_register: bool) -> None:
        self._client, self._marker = client, marker
        self._left, self._after_register = count, after_register

    def command(self, statement: str) -> Any:
        result = self._client.command(statement)
        if self._left is not None and self._marker in statement:
            self._left -= 1
            if self._left == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        if self._after_register and statement.startswith("INSERT INTO `podd_replica`.`delta_"):
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["load", "dump"])
    parser.add_argument("directory")
    parser.add_argument("schema")
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--kill-after-attach", type=int)
    parser.add_argument("--kill-after-publish", type=int)
    parser.add_argument("--kill-after-register", action="store_true")
    args = parser.parse_args(argv)
    schema = LogicalSchema.model_validate_json(Path(args.schema).read_text())
    store = AdqmStore(f"chdb://{args.directory}")
    datamart = store.ensure(schema)
    if args.mode == "load":
        if args.kill_after_publish is not None:
            marker, count = "_publish` (", args.kill_after_publish
        else:
            marker, count = "ATTACH PARTITION", args.kill_after_attach
        store.client = Killing(store.client, marker, count, args.kill_after_register)
        for directory in args.rest:
            transfer = StagedTransfer.open(Path(directory))
            if store.applied(schema.datamart, transfer.manifest.delta_num) is None:
                load(store, datamart, transfer)
    else:
        through = int(args.rest[0])
        state = {
            table.name: [
                sorted(repr(row) for row in store.read_as_of(schema.datamart, table, n))
                for n in range(through + 1)
            ]
            for table in schema
        }
        registered = [e.delta_num for e in store.registry(schema.datamart)]
        print(json.dumps({"state": state, "registered": registered}))
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
