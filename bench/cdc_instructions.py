"""`python -m bench.cdc_instructions`: the CDC origin's own work a change, counted in machine
instructions as well as in CPU time.

    python -m bench.cdc_instructions [--formats qlik dataworks] [--changes 30000] [--json]

Why: this machine's speed drifts by up to two or three times between runs, so a change that
saves 5% of the origin's CPU cannot be told from noise in seconds, even in alternating pairs.
The instructions a run executes are the same from run to run (to about 0.2% here), so they
can. What runs is the origin's path a message takes in-process, on `bench.cdc_bench`'s
messages: decode, the order check, feed, cut (every 2,000 messages, as the runner looks) and
frame every delta cut into its `delta.in` chunks. No broker, agent or store: this is not the
headline figure (`bench.cdc_bench` is), it is the yardstick for the origin's per-change path.

How: the messages and schema are written to a file once; child processes under valgrind's
cachegrind, with one hash seed, each read it and run the path over a few thousand messages
(the decoders' tables learnt), then over the first N1 or N2 messages. The kernels are
compiled for a generic CPU (`NUMBA_CPU_NAME=generic`), by a first child run natively and not
counted, and cached: under valgrind, which shows a CPU of its own, numba would compile
them again inside the counted children. Start-up is the same in both counted children, so
(instructions of N2 - of N1) / (N2 - N1) is the path's count a message, and that times
messages / source changes is its count a source change. An instruction of the interpreter's
loop is not one of msgspec's or the body writer's: the count compares a change of the code
with its parent; it does not convert to seconds. Without valgrind only the CPU time is given
(the least of three runs).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from podd_cdc.cutter import Bounds, Cutter
from podd_cdc.dataworks import DataWorksDecoder
from podd_cdc.intake import make_decoder
from podd_cdc.membership import Format
from podd_cdc.options import CdcOptions
from podd_cdc.qlik import QlikDecoder
from podd_cdc.records import Change, Position
from protocol.framing import frame_delta
from protocol.schema import LogicalSchema

#: Messages run before the measured part: numba's compile, the decoders' tables learnt.
WARM_MESSAGES = 3_000
#: The runner looks for a delta due after about this many messages (`podd_cdc.intake`).
LOOK_EVERY = 2_000
MAX_ROWS = 10_000
PARTITIONS = 4
_WALL = datetime(2026, 1, 1, tzinfo=UTC)


def _decoder(fmt: str, schema: LogicalSchema | None) -> QlikDecoder | DataWorksDecoder:
    """The format's decoder as a run makes it (no Qlik catalog: nothing learnt before)."""
    options = CdcOptions(fmt=cast(Format, fmt), topics=["t"], state_dir=Path("unused"))
    return make_decoder(options, schema, catalog=False)


def prepared(fmt: str, changes: int, seed: int = 7) -> dict[str, Any]:
    """`bench.cdc_bench`'s messages for `changes` source changes, and the schema the origin
    is given (learnt from them, as `podd-cdc schema` learns it from the topic)."""
    # Imported here: the children under valgrind need none of the bench's imports.
    from bench.cdc_bench import source  # noqa: PLC0415

    written, count = source(fmt, changes, seed)
    learner = _decoder(fmt, None)
    for message in written:
        try:
            learner.decode("t", message.value)
        except Exception:  # only the tables the messages describe count here
            continue
    schema = LogicalSchema(
        datamart="bench", tables=tuple(t.table for t in learner.by_name.values())
    )
    messages = [(m.partition, m.value) for m in written]
    return {"fmt": fmt, "schema": schema, "messages": messages, "source_changes": count}


def origin_path(
    fmt: str, schema: LogicalSchema, messages: list[tuple[int, bytes]]
) -> dict[str, int]:
    """Each message decoded, checked and fed; a delta looked for every `LOOK_EVERY`, the rest
    cut at the end; every delta framed. What was made, so a caller can check it."""
    decoder = _decoder(fmt, schema)
    keys = [f"t:{p}" for p in range(PARTITIONS)]
    cutter = Cutter(
        cast(Format, fmt), schema, dict.fromkeys(keys, 0), None, Bounds(max_rows=MAX_ROWS)
    )
    offsets = [0] * PARTITIONS
    made = {"changes": 0, "deltas": 0, "cut_changes": 0, "rows": 0, "chunks": 0}

    def framed(found: Any) -> None:
        cut, rows = found
        made["deltas"] += 1
        made["cut_changes"] += cut.changes
        made["rows"] += cut.rows
        chunks = frame_delta(
            schema, request_id="r", delta_num=cut.delta, delta_date=_WALL, rows_by_table=rows
        )
        made["chunks"] += sum(1 for _ in chunks)

    for n, (partition, value) in enumerate(messages):
        at = Position("t", partition, offsets[partition])
        offsets[partition] += 1
        record = decoder.decode("t", value)
        cutter.check(at, record, _WALL, keys[partition])
        cutter.feed(at, record, 0.0, len(value), keys[partition])
        made["changes"] += isinstance(record, Change)
        if n % LOOK_EVERY == 0 and (found := cutter.cut(made["deltas"], set(), 0.0, _WALL)):
            framed(found)
    while found := cutter.cut(made["deltas"], set(cutter.parts), 0.0, _WALL, force=True):
        framed(found)
    return made


def cpu_us(data: dict[str, Any], repeats: int = 3) -> float:
    """The least CPU µs a message of `repeats` runs over every message."""
    messages = data["messages"]
    origin_path(data["fmt"], data["schema"], messages[:WARM_MESSAGES])
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        origin_path(data["fmt"], data["schema"], messages)
        best = min(best, time.process_time() - started)
    return round(best / len(messages) * 1e6, 2)


#: Every child runs with these, counted or not.
CHILD_ENV = {
    # one hash seed: sets and dicts then collide alike in both runs (1.4% apart without)
    "PYTHONHASHSEED": "0",
    # kernels compiled for no CPU in particular: valgrind shows the program a CPU of its own,
    # for which numba would compile everything again inside the counted child (the columnar
    # path's kernels, 35 CPU s natively, would take half an hour there)
    "NUMBA_CPU_NAME": "generic",
    # pyarrow's jemalloc pool frees in background threads, whose work varies from run to run
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "OMP_NUM_THREADS": "1",
}
_CACHEGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")


def _run_child(
    path: Path, messages: int, warm: int, env: dict[str, str] | None, module: str, *, counted: bool
) -> str:
    """A child that runs the path over the first `warm` messages, then over the first
    `messages` (`env` added to `CHILD_ENV`), under cachegrind if `counted`; its stderr. The
    child is `python -m MODULE --child PATH MESSAGES WARM`: this module's path, or another
    bench's (`bench.cdc_chain`: the columnar one)."""
    done = subprocess.run(
        [
            *(_CACHEGRIND if counted else ()),
            sys.executable,
            "-m",
            module,
            "--child",
            str(path),
            str(messages),
            str(warm),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        env=os.environ | (env or {}) | CHILD_ENV,
    )
    return done.stderr


def _counted(
    path: Path,
    messages: int,
    warm: int = WARM_MESSAGES,
    env: dict[str, str] | None = None,
    module: str = "bench.cdc_instructions",
) -> int:
    """Instructions of a child (`_run_child`) under cachegrind."""
    stderr = _run_child(path, messages, warm, env, module, counted=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", stderr)
    if found is None:
        raise RuntimeError(f"cachegrind gave no count: {stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def instructions(
    data: dict[str, Any], module: str = "bench.cdc_instructions"
) -> dict[str, Any] | None:
    """Instructions a message and a source change, or None without valgrind (the path of
    `module`'s child, `_counted`)."""
    if shutil.which("valgrind") is None:
        return None
    total = len(data["messages"])
    low, high = total // 5, total
    with tempfile.TemporaryDirectory(prefix="podd-cdc-instr-") as scratch:
        path = Path(scratch) / "data.pickle"
        path.write_bytes(pickle.dumps(data))
        # numba compiles the kernels natively and caches them (`CHILD_ENV`): not counted
        _run_child(path, 0, WARM_MESSAGES, None, module, counted=False)
        counts = [_counted(path, n, module=module) for n in (low, high)]
    per_message = (counts[1] - counts[0]) / (high - low)
    per_change = per_message * total / data["source_changes"]
    return {
        "messages": [low, high],
        "counts": counts,
        "per_message": round(per_message),
        "per_source_change": round(per_change),
    }


def _child(path: Path, messages: int, warm: int) -> None:
    data = pickle.loads(path.read_bytes())  # our own file, written by the parent above
    if warm:
        origin_path(data["fmt"], data["schema"], data["messages"][:warm])
    origin_path(data["fmt"], data["schema"], data["messages"][:messages])


def measure(fmt: str, changes: int) -> dict[str, Any]:
    data = prepared(fmt, changes)
    per_message = cpu_us(data)
    per_change = per_message * len(data["messages"]) / data["source_changes"]
    return {
        "messages": len(data["messages"]),
        "source_changes": data["source_changes"],
        "cpu_us_per_message": per_message,
        "cpu_us_per_source_change": round(per_change, 2),
        "instructions": instructions(data),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cdc_instructions", description=__doc__)
    parser.add_argument("--formats", nargs="+", default=["qlik", "dataworks"])
    parser.add_argument("--changes", type=int, default=30_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(Path(args.child[0]), int(args.child[1]), int(args.child[2]))
        return 0
    found = {fmt: measure(fmt, args.changes) for fmt in args.formats}
    if args.json:
        print(json.dumps(found, indent=1))
        return 0
    for fmt, figures in found.items():
        counted = figures["instructions"]
        print(
            f"{fmt}: {figures['messages']:,} messages, {figures['source_changes']:,} changes; "
            f"{figures['cpu_us_per_source_change']} CPU µs a change (least of 3)"
        )
        if counted is None:
            print("  instructions not counted: valgrind is not installed")
        else:
            print(f"  {counted['per_source_change']:,} instructions a change (cachegrind)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
