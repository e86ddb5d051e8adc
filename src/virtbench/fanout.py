"""One function over several items at once, in threads: commands on several instances or machines
(each mostly waits: an engine exec, an SSH round trip), every item's result or error kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MAX_THREADS = 16


def each(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[tuple[Any, Any, Exception | None]]:
    """(item, fn(item), None), or (item, None, the exception) where fn raised; in the items' order."""
    if not items:
        return []

    def call(item):
        try:
            return item, fn(item), None
        except Exception as exc:  # kept for the caller: one failure does not hide the others
            return item, None, exc

    with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(items))) as pool:
        return list(pool.map(call, items))


def all_of(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """fn(item) for every item; the first error is raised once all have finished."""
    results = each(fn, items)
    for _, _, exc in results:
        if exc is not None:
            raise exc
    return [r for _, r, _ in results]
