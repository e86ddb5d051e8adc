"""A small Python API for notebooks and scripts.

    >>> from virtbench.api import open_store
    >>> df = open_store().samples("20261122-0412-a3f9")   # a pandas DataFrame
    >>> ts = open_store().timeseries("20261122-0412-a3f9", metric="cpu_util")   # the monitor's series
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import analysis, paths
from .store import Store


class Results:
    def __init__(self, db: str | Path | None = None):
        self.store = Store(db or paths.default_db(), named=db)

    def runs(self):
        import pandas as pd

        return pd.DataFrame(self.store.runs())

    def samples(self, run_id: str):
        """Every sample of a run, one row each; params, condition and metadata as dicts."""
        return self.store.dataframe(run_id)

    def results(self, run_id: str, *, margin: float | None = None):
        """The summary rows `virtbench show --json` prints, as a DataFrame: per row its `verdict`
        (faster, slower, equivalent, inconclusive; None for the baseline), `margin` (the
        equivalence margin, a fraction: default the suite's `margin`, else 0.02), `detectable` (the
        largest change the ratio's interval leaves open) and `ratio_ci_level` (the interval's real level)."""
        import pandas as pd

        return pd.DataFrame(analysis.results(self.store, run_id, margin=margin)["results"])

    def timeseries(self, run_id: str, *, instance: str | None = None, metric: str | None = None):
        """The monitor's series (store table `timeseries`), one row per tick, instance and metric: t (epoch s),
        elapsed_s (since the attempt started), value, unit, source, with the attempt's environment,
        repetition, warmup flag, cell, workload and params (a dict)."""
        import pandas as pd

        from .export import TIMESERIES_COLUMNS, timeseries_rows

        rows = timeseries_rows(self.store, run_id, instance=instance, metric=metric)
        df = pd.DataFrame(rows, columns=list(TIMESERIES_COLUMNS))
        for col in ("params", "condition"):
            df[col] = df.pop(f"{col}_json").map(lambda v: json.loads(v) if v else {})
        return df

    def summary(self, run_id: str, *, margin: float | None = None) -> dict[str, Any]:
        return analysis.results(self.store, run_id, margin=margin)

    def compare(self, run_a: str, run_b: str, *, margin: float | None = None):
        """Run B against run A (`virtbench compare --json`'s rows) as a DataFrame, with the same verdicts."""
        import pandas as pd

        return pd.DataFrame(analysis.compare(self.store, run_a, run_b, margin=margin)["results"])


def open_store(db: str | Path | None = None) -> Results:
    return Results(db)
