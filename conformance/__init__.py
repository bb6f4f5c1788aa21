"""The protocol conformance harness (`podd-conformance replica|origin`), both sides in one
shape: scenarios named after the rule of PROTOCOL.md they check (`scenario`), one outcome per
run and one report, with JUnit XML (`report`).

* Replicas: `scenarios` drive any replica agent over Kafka as an origin would and judge its
  answers (and, given the replica's DSN, its tables) against PROTOCOL.md, REPLICA.md and the
  reference model of `protocol` (`harness`, `context`).
* Origins: `origins/` plays a checking replica and judges every message an origin sends.
* `forges/`: the hostile and broken messages the harness, the reliability runs and the tests
  send.
"""
