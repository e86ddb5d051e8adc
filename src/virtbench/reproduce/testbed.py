"""`virtbench reproduce --testbed`: study 004's pods on this machine's Kubernetes testbed
(`virtbench testbed k8s`). A cluster already up is used and left up (it is someone's); otherwise
one is started for the reproduce run and stopped after it, whatever way the run ends."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import UserError


def kubeconfig() -> Path:
    """Where the testbed's kubeconfig is (also before it is up: `up` writes it there)."""
    from ..drivers.pods.testbed.configs import Layout

    return Layout().kubeconfig


def running() -> str | None:
    """The testbed cluster's kubeconfig when it is up here and every node is Ready, else None."""
    from ..drivers.pods.testbed.status import status

    if not kubeconfig().is_file():
        return None
    st = status()
    nodes = st.get("nodes") or []
    return st["kubeconfig"] if st.get("up") and nodes and all(n["ready"] for n in nodes) else None


# measured: 2 nodes Ready in 10.5 s, then 20 s to push the guest image (load 10, 2 cores)
START_S = 35


def start_note() -> str:
    """What starting the testbed adds to the plan's time: its start, and its build the first time."""
    from ..drivers.pods.testbed import build

    built = build.built_dir() is not None
    return (f"starting the testbed cluster adds about {START_S} s" +
            ("" if built else "; its binaries are not built yet: the first start builds them, tens of minutes of "
                              "CPU (virtbench testbed k8s build does it ahead)"))


@contextlib.contextmanager
def cluster_for_run(log: Callable[[str], None], nodes: int = 2) -> Iterator[str]:
    """The testbed cluster's kubeconfig for the block: the running one, or one started now and
    stopped when the block ends (also on Ctrl-C or an error)."""
    from ..drivers.pods.testbed import up_down as cluster
    from ..drivers.pods.testbed.configs import Layout

    if kc := running():
        log(f"using the testbed cluster that is up ({kc}); it stays up afterwards")
        yield kc
        return
    log(f"starting the testbed cluster ({nodes} nodes) for this run; it is stopped afterwards")
    lay = cluster.up(nodes, log=log)
    try:
        yield str(lay.kubeconfig)
    finally:
        log("stopping the testbed cluster this run started")
        try:
            cluster.down(lay.name, log=log)
        except UserError as exc:  # another live run uses it now: it stays, and the run's own outcome is kept
            log(f"the testbed cluster stays up: {exc.message} ({exc.hint or 'virtbench testbed k8s down later'})")
        else:
            if left := cluster.leftovers(Layout(lay.name, 0)):
                log(f"could not remove: {', '.join(left)} (virtbench testbed k8s down tries again)")
