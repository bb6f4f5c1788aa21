"""Tools run from a checkout, not shipped in the wheel: the settings reference's generator,
and the writers of test topics (`write_backup`; `cdc_write`: Qlik and DataWorks) that the
tests, the docs' examples and the benchmarks use."""
