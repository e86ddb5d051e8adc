"""`virtbench reproduce --testbed`: study 004's pods on this machine's Kubernetes testbed
(`virtbench testbed k8s`). A cluster already up (whatever its name; --testbed-name picks one) is
used and left up (it is someone's); otherwise one is started for the reproduce run and stopped
after it, whatever way the run ends. The reproduce run is registered with the cluster for its
whole life (`registered`), not only while a child run uses it, so `testbed k8s down` between two
experiments refuses instead of taking the cluster away."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import UserError


def kubeconfig(name: str | None = None) -> Path:
    """Where the kubeconfig of testbed cluster `name` (None: the one up here, else the default) is,
    also before it is up: `up` writes it there."""
    from ..drivers.pods.testbed.status import chosen

    return chosen(name).kubeconfig


def name_of(kubeconfig_path: str | Path | None) -> str | None:
    """The testbed cluster a kubeconfig path belongs to (<root>/<name>/kubeconfig), else None."""
    from ..drivers.pods.testbed.configs import ROOT

    path = Path(kubeconfig_path) if kubeconfig_path else None
    return path.parent.name if path and path.name == "kubeconfig" and path.parent.parent == ROOT else None


def running(name: str | None = None) -> str | None:
    """The kubeconfig of testbed cluster `name` (None: the one up here) when it is up and every node
    is Ready, else None."""
    from ..drivers.pods.testbed.status import chosen, status

    lay = chosen(name)
    if not lay.kubeconfig.is_file():
        return None
    st = status(lay.name)
    nodes = st.get("nodes") or []
    return st["kubeconfig"] if st.get("up") and nodes and all(n["ready"] for n in nodes) else None


@contextlib.contextmanager
def registered(kubeconfig_path: str | None, run_id: str, db: str = "") -> Iterator[None]:
    """While the block runs, reproduce run `run_id` is registered with the testbed cluster whose
    kubeconfig this is (none: nothing to do), so `testbed k8s down` refuses between its child runs too."""
    from ..drivers.pods.testbed.configs import testbed_of_kubeconfig
    from ..machines import testbed_owner

    state = testbed_of_kubeconfig(Path(kubeconfig_path)) if kubeconfig_path else None
    with testbed_owner.used_in([state] if state else [], run_id, db):
        yield


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
def cluster_for_run(log: Callable[[str], None], nodes: int = 2, name: str | None = None) -> Iterator[str]:
    """The kubeconfig of testbed cluster `name` (None: the one up here, else the default) for the
    block: the running one, or one started now and stopped when the block ends (also on Ctrl-C or
    an error)."""
    from ..drivers.pods.testbed import up_down as cluster
    from ..drivers.pods.testbed.configs import Layout
    from ..drivers.pods.testbed.status import chosen

    if kc := running(name):
        log(f"using testbed cluster {name_of(kc)}, which is up ({kc}); it stays up afterwards")
        yield kc
        return
    name = chosen(name).name
    log(f"starting testbed cluster {name} ({nodes} nodes) for this run; it is stopped afterwards")
    lay = cluster.up(nodes, name=name, log=log)
    try:
        yield str(lay.kubeconfig)
    finally:
        log(f"stopping testbed cluster {lay.name}, which this run started")
        try:
            cluster.down(lay.name, log=log)
        except UserError as exc:  # another live run uses it now: it stays, and the run's own outcome is kept
            log(f"the testbed cluster stays up: {exc.message} ({exc.hint or 'virtbench testbed k8s down later'})")
        else:
            if left := cluster.leftovers(Layout(lay.name, 0)):
                log(f"could not remove: {', '.join(left)} (virtbench testbed k8s down tries again)")
