"""BENCHMARKS.md's table of what moved the figures in issue 16 (measured, not computed)."""

from __future__ import annotations

#: What moved the figures in issue 16, each step measured on its own at the time (2 cores;
#: the 1-row figures from a 10-delta series, the catch-up ones from 150-200 deltas).
CHANGES = [
    "### What changed",
    "",
    "| change | measured effect |",
    "|---|---|",
    "| consumers fetch with a 20 ms wait (`PODD_FETCH_MAX_WAIT_MS`; Faust hard-codes 1,500 ms)"
    " | a 1-row delta's chunks reached the agent 0.55 s after they were produced, then 0.02 s;"
    " 1-row median 0.75 s → 0.20 s |",
    "| small deltas staged in the driver (`PODD_IN_DRIVER_MAX_MIB`, issue 16's first step) |"
    " in-agent staging of a 1-row delta 0.245 s → 0.129 s |",
    "| a load uses one connection; only staging tables holding rows are truncated; tables "
    "with no staged row skip the apply | 1-row median 0.20 s → 0.085 s |",
    "| one statement per table for the apply (`DELETE … RETURNING` into history) | loader-only"
    " loop of 1,000-row deltas over 3 tables: 76 ms → 66 ms per load |",
    "| the connection is kept between loads; ANALYZE only from 10,000 staged rows | the same"
    " loop: 66 ms → 44 ms |",
    "| ANALYZE of big staging tables with a 3,000-row sample (statistics target 10) | loader"
    " alone, 1M-row delta over 10 tables: load 8.6 s → 7.3 s (staging 2.8 → 2.2 s, apply"
    " 5.9 → 5.1 s; with no ANALYZE at all, staging 1.9 s but apply 6.7 s) |",
    "| measured and left out: data checksums off, `wal_compression = pglz` | apply 6.05 s"
    " without checksums against 6.24-6.66 s with (same 414 MB of WAL); pglz: 317 MB of WAL"
    " but 9-10 s |",
    "| the body writer converts timestamps itself (also: naive ones as UTC, not local time) |"
    " the origin's framing of a 1,000-row delta: 26 ms → 14 ms |",
    "| the origin frames delta N + 1 while N is applied; no producer linger | catch-up cycle"
    " 113 ms → 86 ms |",
    "| small staging tables (under 10,000 rows, not analysed) applied by primary-key lookups"
    " only: no hash or merge join (`SET LOCAL`). t_actual not yet analysed made the planner"
    " hash-join a few hundred keys against a sequential scan of the whole table"
    " (auto_explain) | catch-up of 1,000 deltas: 7.17/s → 11.59/s; per load 46 → 122 ms as"
    " t_actual grew, now flat at 35-47 ms |",
    "| embedded PostgreSQL: `wal_buffers` 64MB (default 16MB here: full 388 times in one"
    " table's apply) | loader alone, 1M-row delta, alternating runs: apply 7.2-8.3 s → 5.0-7.3"
    " s |",
    "| chunks staged in groups: every delta.in message already delivered (up to 64) is"
    " admitted in order, then written together, fsyncs side by side, one directory fsync per"
    " transfer; bodies measured side by side | receiving the 1M-row delta (1,000 chunks):"
    " 4.44 s → 2.22-2.85 s, alternating runs (produce 1.0-2.2 s) |",
    "| measured and left out: the load applies table k while Spark stages table k + 1 (one"
    " Spark job per table) | alternating runs: end to end 10.3 → 11.3 s, the machine's CPU"
    " seconds 16.4 → 20.5 (Spark JVM 0.5 → 2.7 for ten jobs); loader alone 7.9-8.5 → 7.1-7.7"
    " s |",
    "| the apply takes one Spark job's tables while the next job stages (`PODD_STAGING_JOBS`"
    ", 3 jobs of consecutive tables) | loader alone, 4 alternating runs: 9.07 s (8.73-9.81) →"
    " 7.46 s (6.22-8.14). End to end, 7 alternating pairs: 11.66 s (8.65-14.69) → 11.03 s"
    " (9.39-12.51), 3 jobs faster in 4 pairs; the machine's speed moved more than that"
    " between runs |",
    "| fetch pacing: consumers keep the 20 ms fetch wait for a second after the last message"
    " or send, then wait 200 ms (`PODD_FETCH_IDLE_WAIT_MS`) | idle agent, origin and Tansu:"
    " 0.21 → 0.04 CPU-s a second. 1M-row delta, 3 alternating pairs: the origin, the broker"
    " and the agent used 1.48 → 0.73 CPU-s during the load, the machine 13.76 → 12.71; end to"
    " end 8.07 s (7.19-8.89) → 7.79 s (6.76-8.41); 1-row median 0.039-0.056 s both ways; a"
    " whole 1-row delta sent after 4 s of quiet: 0.043 → 0.073 s (the first fetch waits) |",
    "| measured and left out: staging jobs sized so the first (which the apply waits for) is"
    " the smallest, 3-3-4 tables instead of 4-3-3 | loader alone, 3 alternating pairs: 5.65 s"
    " (5.56-5.72) → 6.22 s (5.60-6.61); the last job, staged on one core, then outlasted the"
    " apply of the job before it |",
    "| the kept rows staged in key order (the byte order of the key's COPY encoding), so the"
    " apply's inserts into t_actual's primary-key index walk its leaf pages in order | one"
    " 100,000-row table applied alone: 0.37-0.52 s → 0.29-0.39 s; loader alone, 1M-row delta,"
    " 3 alternating pairs: apply 4.75 s (4.57-4.87) → 4.30 s (4.25-4.33), load 5.42 → 5.09 s |",
    "| Spark's JVMs compile with C1 only (`-XX:TieredStopAtLevel=1`): they only schedule"
    " tasks and pipe small results, and HotSpot's C2 compiler was most of their CPU | loader"
    " alone, four 1M-row loads in one session: the JVM's CPU per load 2.2-2.3 s, then 0.4-1.3"
    " s → 1.0 s, then 0.22 s |",
    "| the two above, end to end | 1M-row delta, 3 alternating pairs: 6.07 s (5.94-6.20) →"
    " 5.85 s (5.69-6.04); the apply 3.88 → 3.65 s; the Spark JVM's CPU 0.33-1.22 → 0.22-0.49"
    " s |",
    "| measured and left out: 4 staging jobs (3-2-3-2 tables) instead of 3 | loader alone, 3"
    " alternating pairs: 4.59 s (4.18-4.84) → 4.67 s (4.25-4.91) |",
]
