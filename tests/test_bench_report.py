"""BENCHMARKS.md's account of the big delta's missed targets (pure: no run needed)."""

from __future__ import annotations

from typing import Any

from bench.report_remaining import remaining_section


def point(e2e: float) -> dict[str, Any]:
    return {
        "rows": 1_000_000,
        "e2e_seconds": e2e,
        "produce_seconds": 1.6,
        "floors": {"consume_decode_seconds": 1.6, "keyed_copy_seconds": 2.5},
        "agent_phases": {"receive_s": 3.5, "stage_s": 2.1, "apply_s": 5.5},
    }


def test_a_met_target_needs_no_account() -> None:
    assert remaining_section(point(4.9), 1000, 7.0, 2.0) == []


def test_a_missed_target_is_accounted_for_phase_by_phase() -> None:
    text = "\n".join(remaining_section(point(11.1), 1000, 7.0, 2.0))
    assert "at most 5.00 s" in text  # 2 x floor (b) is the tighter limit
    assert "**Receiving, 3.50 s** for about 1,000 chunks (3.5 ms each)" in text
    assert "2.20 times floor (b)" in text
    assert "about 9.00 s (receiving plus the apply)" in text


def test_without_the_agents_phases_nothing_is_claimed() -> None:
    bare = point(11.1) | {"agent_phases": {}}
    assert remaining_section(bare, 1000, 7.0, 2.0) == []
