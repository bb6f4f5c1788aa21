"""The cutters the intake and the runner ask alike: a change at a time (`Cutter`), or on arrays
(`QlikArrayCutter`, `DataWorksArrayCutter`: `podd-cdc run --columnar`, the default)."""

from __future__ import annotations

from podd_cdc.cutter import Cutter
from podd_cdc.dataworks_array_cutter import DataWorksArrayCutter
from podd_cdc.qlik_array_cutter import QlikArrayCutter

AnyCutter = Cutter | QlikArrayCutter | DataWorksArrayCutter
