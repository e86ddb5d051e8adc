"""One SSH testbed per test module or session: network namespaces with their own sshd, made by
`machines.testbed` under a prefix of the caller's own (so tests of other modules are not touched)."""

from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def own_testbed(hosts: int, inventory: Path, prefix: str, subnet: str | None = None):
    """Yields the inventory of `hosts` fresh hosts and removes them at the end. Skips only where this
    machine cannot make network namespaces; whatever a killed session left under `prefix` goes first."""
    from virtbench.machines import testbed

    blocking = [p for p in testbed.check() if p.startswith("not root") or "refuses network namespaces" in p]
    if blocking:
        pytest.skip("no local testbed: " + "; ".join(blocking))
    testbed.down(prefix)
    path = testbed.up(hosts, inventory, prefix=prefix, subnet=subnet)
    try:
        yield path
    finally:
        testbed.down(prefix)
