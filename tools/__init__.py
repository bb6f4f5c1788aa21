"""Tools run from a checkout, not shipped in the wheel: the settings reference's generator,
and the writers of test topics (backup, Qlik, DataWorks) that the tests, the demo and the
benchmarks use."""
