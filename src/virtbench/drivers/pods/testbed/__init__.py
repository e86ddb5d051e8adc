"""`virtbench testbed k8s`: a real Kubernetes cluster on this machine, from pinned upstream sources.

build.py compiles the components (Go modules in testbed/k8s), pki.py makes the cluster's keys,
configs.py writes the components' configuration (pure), images.py puts the guest image into the
cluster's registry, up_down.py starts and removes the processes, namespaces and links, status.py
says which clusters are up, and commands.py is the CLI.
"""

KUBERNETES_VERSION = "v1.34.4"
