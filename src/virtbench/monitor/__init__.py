"""The monitor: CPU, memory, network and disk of the host and of every instance, sampled (1 Hz by
default) by `vb-monitor` (native/monitor) while each repetition runs, stored as time series, and
summarized per repetition into samples marked `monitor: true`.

    session = Session.start(instances, environment="container", interval=1.0, lifetime=timeout)
    ... the workload runs ...
    result = session.stop(window)   # rows for the timeseries table, summary samples, notes
"""

from __future__ import annotations

from .series import SERIES, Trace, is_monitor_metric, is_monitor_sample, parse, rows, summarize
from .session import BIN, HOST, MonitorUnavailable, Result, Session, scope_for

__all__ = ["BIN", "HOST", "SERIES", "MonitorUnavailable", "Result", "Session", "Trace", "is_monitor_metric",
           "is_monitor_sample", "parse", "rows", "scope_for", "summarize"]
