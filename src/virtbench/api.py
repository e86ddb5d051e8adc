"""A small Python API for notebooks and scripts.

    >>> from virtbench.api import open_store
    >>> df = open_store().samples("20261122-0412-a3f9")   # a pandas DataFrame
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import analysis, paths
from .store import Store


class Results:
    def __init__(self, db: str | Path | None = None):
        self.store = Store(db or paths.default_db())

    def runs(self):
        import pandas as pd

        return pd.DataFrame(self.store.runs())

    def samples(self, run_id: str):
        """Every sample of a run, one row each; params, condition and metadata as dicts."""
        return self.store.dataframe(run_id)

    def results(self, run_id: str):
        """The summary rows `virtbench show --json` prints, as a DataFrame."""
        import pandas as pd

        return pd.DataFrame(analysis.results(self.store, run_id)["results"])

    def summary(self, run_id: str) -> dict[str, Any]:
        return analysis.results(self.store, run_id)


def open_store(db: str | Path | None = None) -> Results:
    return Results(db)
