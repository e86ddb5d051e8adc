"""Kubernetes pods as environments (the `pods` driver, drivers/pods/driver.py).

One manifest generator (`manifests.py`) feeds two backends: a real cluster through the official
`kubernetes` client (`cluster.py`) and `podman kube play` on a machine without one (`kubeplay.py`),
so the manifests that kube-play runs here are the ones a cluster would get. `phases.py` reads pod
start phases from either backend's objects (pure, tested on recorded objects).
"""

BACKENDS = ("kube-play", "kubernetes")
CONTAINER = "main"  # the one container of every pod virtbench makes
