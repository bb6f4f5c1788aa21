"""BENCHMARKS.md: where the big delta's time still goes, when its targets are missed.

The agent's phases run one after the other (receive, stage, apply); the section adds them
up against the floors and says which overlap the remaining time would need. It states what
was measured and what is not built; it does not claim the targets cannot be met.
"""

from __future__ import annotations

from typing import Any


def remaining_section(
    main: dict[str, Any], chunk_rows: int, big_delta_target: float, headline_target: float
) -> list[str]:
    """Lines for the section, or none if the targets are met or the phases were not read."""
    phases = main.get("agent_phases", {})
    needed = ("receive_s", "stage_s", "apply_s")
    e2e = main["e2e_seconds"]
    floors = main["floors"]
    floor_a, floor_b = floors["consume_decode_seconds"], floors["keyed_copy_seconds"]
    ratio_limit = headline_target * max(floor_a, floor_b)
    limit = min(big_delta_target, ratio_limit)
    if not all(k in phases for k in needed) or e2e <= limit:
        return []
    receive, stage, apply = (phases[k] for k in needed)
    chunks = max(1, main["rows"] // chunk_rows)
    hidden = receive + apply  # staging overlapped with receiving
    return [
        "### Where the rest goes (targets 3 and 4)",
        "",
        f"To meet both targets, this delta must take at most {limit:.2f} s ({big_delta_target:g}"
        f" s, and {headline_target:g} times the larger floor = {ratio_limit:.2f} s). It took "
        f"{e2e:.2f} s, in three phases that run one after the other:",
        "",
        f"- **Receiving, {receive:.2f} s** for about {chunks:,} chunks "
        f"({1000 * receive / chunks:.1f} ms each), from the first chunk to the last staged. "
        "It cannot end before the origin has produced the last chunk "
        f"({main['produce_seconds']:.2f} s here, on the same two cores). Chunks are staged in "
        "groups: every message already delivered, up to 64, is written together, the fsyncs "
        "side by side and one directory fsync per transfer (before: two fsyncs per chunk, one "
        "chunk after another, 3.5-4.4 s for this delta; a per-group trace taken apart, once, "
        "2026-11-23, showed full groups of 64 every 90-100 ms: about 30 ms of fsyncs, the rest "
        "admission, measuring and Faust's hand-over). Floor (a), a plain aiokafka consumer "
        f"reading the messages already in the broker, takes {floor_a:.2f} s.",
        f"- **Staging, {stage:.2f} s**: decoding, keeping the last row per key, and COPY. It "
        "starts only when the last chunk is in. *Stage while receiving* is not built: it would "
        "decode each stream as soon as all of its chunks are in. That could hide most of this "
        "phase behind receiving, but PostgreSQL would then have to record which transfer each "
        "staging table holds, so that a restart can trust it.",
        f"- **The apply transaction, {apply:.2f} s**, which is {apply / floor_b:.2f} times floor "
        f"(b). Floor (b) only COPYs the kept rows. The apply must also delete the closed "
        "versions from `t_actual` and write them to `t_history`, with their index. That is "
        "about 415 MB of WAL for this delta (measured apart). One backend does all of it; "
        "PostgreSQL does not parallelise writes. The settings measured are in the README's "
        "tuning notes.",
        "",
        f"With staging hidden completely, this run would still take about {hidden:.2f} s "
        "(receiving plus the apply), which misses both targets. Meeting them would also need "
        "the apply to overlap receiving: one transaction held open while chunks still arrive. "
        "That is not built either. So these two targets are missed on this machine, but this "
        "run does not show that they cannot be met.",
        "",
    ]
