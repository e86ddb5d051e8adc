"""Kubernetes pods as environments: two drivers that a suite names as driver = "pods" with option
`backend` (drivers/__init__.py's ALIASES): `kube-play` (kubeplay_driver.py: `podman kube play` on a
machine without a cluster, through kubeplay_backend.py) and `kubernetes` (kubernetes_driver.py: a real
cluster through the official client, kubernetes_backend.py), sharing common.py. One manifest generator
(`manifests.py`) feeds both, so the manifests that kube play runs here are the ones a cluster would
get. `phases.py` reads pod start phases from either backend's objects (pure, tested on recorded
objects). README.md says which file takes which change.
"""

BACKENDS = ("kube-play", "kubernetes")
CONTAINER = "main"  # the one container of every pod virtbench makes
