"""`virtbench testbed k8s`: a real Kubernetes cluster on this machine, from pinned upstream sources.

build.py compiles the components (Go modules in testbed/k8s), pki.py makes the cluster's keys,
configs.py writes the components' configuration (pure), cluster.py starts and removes the
processes, namespaces and links, and commands.py is the CLI.
"""

KUBERNETES_VERSION = "v1.34.4"
