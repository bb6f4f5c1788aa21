"""Reliability runs of this project's agent, beside the benchmarks (`bench/`): they measure
and report (RELIABILITY.md), are run from a checkout, and are not shipped. `chaos`: deltas
through kills, database restarts, hostile messages, a second agent, a full disk."""
