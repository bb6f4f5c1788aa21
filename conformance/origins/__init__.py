"""Conformance for origins: a checking replica plays the replica's side of PROTOCOL.md,
scripted per scenario, and judges every message an origin sends (`podd-conformance origin`).

`judge` and `chunk_checks` (pure: the rules, over what `seen` keeps), `checking_replica`
(Kafka: reads, answers), `origin_scenarios` (the scripts), `origin_runner` (one origin
process per scenario), `origin_cli` (its report: `conformance.report`), and `mutants`
(faulty copies of the reference origin, to prove the harness judges).
"""
