"""Names, addresses and the components' configuration of one testbed cluster (pure).

Node 1 is this machine; node i (2..N) is the network namespace `<name>-n<i>` joined to the host
bridge `<name>0` by a veth. The bridge carries the nodes' addresses 10.232.0.i (node 1 = the
bridge's own 10.232.0.1: the kubelet refuses a loopback node IP). Node i's pods get
10.244.(i-1).0/24 on a CNI bridge of that node, routed between nodes through the host.

The API server and the registry listen on 127.0.0.1 only; a namespaced node reaches them through a
relay on its own loopback (socat, run in the host's namespace per connection).
"""

from __future__ import annotations

import base64
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path("/var/lib/virtbench/k8s")
DEFAULT_NAME = "vbk8s"  # the cluster `up` makes without --name
NODE_NET = "10.232.0"  # .i = node i
POD_NET = "10.244"  # .(i-1).0/24 = node i's pods
SERVICE_CIDR = "10.96.0.0/16"
API_PORT = 6443
ETCD_PORT = 2379
REGISTRY_PORT = 5000
RELAYED_PORTS = (API_PORT, REGISTRY_PORT)
PAUSE_REF = f"127.0.0.1:{REGISTRY_PORT}/virtbench/pause:3.10"
API_SERVER = f"https://127.0.0.1:{API_PORT}"
STORAGE_CLASS = "vbk8s-hostpath"
# gVisor: containerd's runc shim runs runsc (through a wrapper that adds its flags) as handler
# "runsc", offered to pods as RuntimeClass "gvisor". ptrace: these machines have no usable KVM.
# network "host": the pod's own network namespace (CNI's) through the host kernel's stack. gVisor's
# own stack ("sandbox") is refused by Debian 12's runsc on newer kernels: it takes a namespace with
# /proc/sys/net/core/rmem_default for the root one ("cannot run with network enabled in root network
# namespace"), and kernels since 5.x have that file in every namespace.
RUNTIME_CLASS = "gvisor"
GVISOR_HANDLER = "runsc"
GVISOR_OPTIONS = {"platform": "ptrace", "network": "host"}  # as the container driver's runsc options
GVISOR_FLAGS = tuple(f"--{k}={v}" for k, v in GVISOR_OPTIONS.items())
HOSTPATH_PV_DIR = Path("/tmp/hostpath_pv")  # fixed by the upstream provisioner


def storage_class() -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "kubernetes.io/host-path", "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate"}


@dataclass(frozen=True)
class Layout:
    name: str = DEFAULT_NAME
    nodes: int = 2
    root: Path = ROOT

    @property
    def state(self) -> Path:
        return self.root / self.name

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def registry_file(self) -> Path:
        """Beside the kubeconfig: where the backend learns the testbed's registry."""
        return self.state / "registry.json"

    @property
    def bridge(self) -> str:
        return f"{self.name}0"

    @property
    def cni_bridge(self) -> str:
        return f"{self.name}-cni"

    def node_name(self, i: int) -> str:
        return f"{self.name}-n{i}"

    def node_ip(self, i: int) -> str:
        return f"{NODE_NET}.{i}"

    def pod_cidr(self, i: int) -> str:
        return f"{POD_NET}.{i - 1}.0/24"

    def netns(self, i: int) -> str | None:
        """Node i's network namespace (None: node 1, this machine's)."""
        return None if i == 1 else f"{self.name}-n{i}"

    def veth(self, i: int) -> str:
        return f"{self.name}-v{i}"

    def node_dir(self, i: int) -> Path:
        return self.state / f"n{i}"

    def containerd_sock(self, i: int) -> Path:
        return self.node_dir(i) / "containerd.sock"

    def cni_network(self, i: int) -> str:
        return f"{self.name}-n{i}-pods"


def testbed_of_kubeconfig(kubeconfig: Path) -> Path | None:
    """The state directory of the testbed cluster whose kubeconfig this is (None: another cluster's)."""
    with contextlib.suppress(OSError, ValueError):
        state = kubeconfig.resolve().parent
        if json.loads((state / "registry.json").read_text()).get("testbed") == state.name:
            return state
    return None


def runtime_class() -> dict:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": RUNTIME_CLASS},
            "handler": GVISOR_HANDLER}


def runsc_wrapper(runsc: str) -> str:
    """What containerd's runc shim runs as its runtime binary: runsc with the testbed's flags (the shim
    adds --root, --log and the subcommand), mending where runsc and the runc shim (written for runc)
    disagree:
    - `runsc start` of a pod's second container starts that container's gofer, which would inherit
      the shim's pipe on start's output and hold it open: the shim reads it to the end, so the
      container would never be reported started. start's output goes to /dev/null (its errors are
      in the --log file the shim reads), and with it the container's stdout (runsc takes it at
      start, the shim gives it at create): `kubectl logs` of a gVisor pod is empty here; commands
      through exec have their output.
    - runsc writes the sandbox's pid as every container's pid, and the shim takes the container's
      exit for that process's (the sandbox lives as long as the pod): it would never see a second
      container end. For such a container the pid file gets a waiter's pid instead: a shell
      (re-parented to the shim, its subreaper) that waits with `runsc wait` and exits with the
      container's status.
    - `runc kill` of a container that has stopped succeeds; `runsc kill` fails ("sandbox is not
      running"), and containerd then never finishes stopping the pod. A kill that fails on a stopped
      (or gone) container succeeds here; one of a container that was created and never started
      (runsc cannot signal it) deletes it.
    """
    run = f"{runsc} {' '.join(GVISOR_FLAGS)}"
    return f"""#!/bin/sh
# gVisor's runsc under containerd's runc shim (virtbench testbed); why: drivers/pods/testbed/configs.py runsc_wrapper
RUNSC="{run}"
root= bundle= pidfile= prev= id= last=
for a in "$@"; do
  case "$prev" in --root) root=$a ;; --bundle) bundle=$a ;; --pid-file) pidfile=$a ;; esac
  prev=$a id=$last last=$a
done
status() {{ $RUNSC --root "$root" state "$1" 2>/dev/null | sed -n 's/.*"status": *"\\([a-z]*\\)".*/\\1/p'; }}
case " $* " in
  *" start "*) exec $RUNSC "$@" </dev/null >/dev/null 2>&1 ;;
  *" kill "*)  # kill [--all] ID SIGNAL: the id is the last but one
    $RUNSC "$@" && exit 0
    case "$(status "$id")" in
      running) exit 1 ;;
      created) exec $RUNSC --root "$root" delete --force "$id" ;;
      *) exit 0 ;;
    esac ;;
  *" create "*) ;;
  *) exec $RUNSC "$@" ;;
esac
$RUNSC "$@" || exit $?
id=$last
grep -Eq '"io.kubernetes.cri.container-type": ?"container"' "$bundle/config.json" 2>/dev/null || exit 0
(
  exec </dev/null >/dev/null 2>&1
  while [ "$(status "$id")" = created ]; do
    sleep 0.05
  done
  code=$($RUNSC --root "$root" wait "$id" | sed -n 's/.*"exitStatus": *\\([0-9]*\\).*/\\1/p')
  exit "${{code:-255}}"
) &
printf %s $! > "$pidfile"  # the shim reads a bare number
"""


def containerd_toml(lay: Layout, i: int, runsc_wrapper: Path | None = None) -> str:
    """Node i's containerd; with `runsc_wrapper` (runsc_wrapper() written there) gVisor is its second
    runtime, handler GVISOR_HANDLER."""
    d = lay.node_dir(i)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"

[grpc]
  address = "{lay.containerd_sock(i)}"

[ttrpc]
  address = "{lay.containerd_sock(i)}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[{cri}]
  sandbox_image = "{PAUSE_REF}"
  # lowering oom_score_adj is refused in some sandboxes (these machines): runc then fails every pod
  restrict_oom_score_adj = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  # runc's state per node, not the machine-wide /run/containerd/runc
  Root = "{d}/runc"

{_gvisor_runtime(cri, d, runsc_wrapper) if runsc_wrapper else ""}
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{d}/cni"
  max_conf_num = 1

[{cri}.registry.mirrors."127.0.0.1:{REGISTRY_PORT}"]
  endpoint = ["http://127.0.0.1:{REGISTRY_PORT}"]
"""


def _gvisor_runtime(cri: str, d: Path, wrapper: Path) -> str:
    # Debian's runsc has no containerd shim of its own: the runc shim speaks the same CLI to it
    return f"""[{cri}.containerd.runtimes.{GVISOR_HANDLER}]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.{GVISOR_HANDLER}.options]
  BinaryName = "{wrapper}"
  Root = "{d}/runsc-root"
"""


def cni_conflist(lay: Layout, i: int) -> str:
    return json.dumps({
        "cniVersion": "1.0.0", "name": lay.cni_network(i),
        "plugins": [{"type": "bridge", "bridge": lay.cni_bridge, "isGateway": True, "ipMasq": False,
                     "hairpinMode": True,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": lay.pod_cidr(i)}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(lay.node_dir(i) / "ipam")}}
                    ]}, indent=2)


def kubelet_yaml(lay: Layout, i: int) -> str:
    pki = lay.pki
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": lay.node_ip(i), "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "tlsCertFile": str(pki / f"kubelet-n{i}.crt"), "tlsPrivateKeyFile": str(pki / f"kubelet-n{i}.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(pki / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{lay.containerd_sock(i)}",
        # cgroup v1 (hybrid) on these machines, several kubelets on one kernel: no QoS hierarchy,
        # no node allocatable enforcement, no kernel defaults to demand
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False, "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [], "localStorageCapacityIsolation": False, "protectKernelDefaults": False,
        "serializeImagePulls": False, "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
        # the testbed's disk is the machine's: never evict the run's pods for it
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "maxPods": 110, "podPidsLimit": -1,
        "podLogsDir": str(lay.node_dir(i) / "pod-logs"),  # not /var/log/pods: down removes it with the rest
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def kube_proxy_yaml(lay: Layout, i: int, kubeconfig: Path) -> str:
    cfg = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "mode": "iptables",
        "clusterCIDR": f"{POD_NET}.0.0/16", "hostnameOverride": lay.node_name(i),
        "bindAddress": lay.node_ip(i), "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
        # leave the machine's conntrack sysctls alone (refused in a sandbox, and not ours to change)
        "conntrack": {"maxPerCore": 0, "min": 0},
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def kubeconfig(server: str, user: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, cluster: str) -> str:
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem),
                                          "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
    }, sort_keys=False)


def apiserver_args(lay: Layout) -> list[str]:
    p = lay.pki
    return [
        f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}", "--bind-address=127.0.0.1", f"--secure-port={API_PORT}",
        # the address of the `kubernetes` Service's endpoint; nothing in the pods calls it
        f"--advertise-address={lay.node_ip(1)}",
        f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
        f"--client-ca-file={p / 'ca.crt'}",
        f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
        f"--kubelet-client-certificate={p / 'apiserver-kubelet.crt'}",
        f"--kubelet-client-key={p / 'apiserver-kubelet.key'}",
        f"--kubelet-certificate-authority={p / 'ca.crt'}", "--kubelet-preferred-address-types=InternalIP",
        "--allow-privileged=true", "--profiling=false", f"--cert-dir={lay.state / 'apiserver-certs'}",
        "--enable-admission-plugins=NodeRestriction", "--service-node-port-range=30000-32767",
    ]


def controller_manager_args(lay: Layout) -> list[str]:
    p, kc = lay.pki, lay.state / "controller-manager.kubeconfig"
    return [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p / 'sa.key'}", f"--root-ca-file={p / 'ca.crt'}",
            f"--cluster-signing-cert-file={p / 'ca.crt'}", f"--cluster-signing-key-file={p / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allocate-node-cidrs=false",
            f"--cert-dir={lay.state / 'controller-manager-certs'}", "--profiling=false",
            # the testbed's storage class: directories under HOSTPATH_PV_DIR, made and deleted by the
            # controller manager itself (every node shares this machine's filesystem, so a claim
            # serves pods on any node)
            "--enable-hostpath-provisioner=true"]


def scheduler_args(lay: Layout) -> list[str]:
    kc = lay.state / "scheduler.kubeconfig"
    return [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false",
            f"--cert-dir={lay.state / 'scheduler-certs'}"]


def etcd_args(lay: Layout) -> list[str]:
    peer = "http://127.0.0.1:2380"
    return [f"--name={lay.name}", f"--data-dir={lay.state / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{ETCD_PORT}",
            f"--advertise-client-urls=http://127.0.0.1:{ETCD_PORT}", f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}", f"--initial-cluster={lay.name}={peer}",
            "--listen-metrics-urls=", "--log-level=warn"]


def kubelet_args(lay: Layout, i: int) -> list[str]:
    d = lay.node_dir(i)
    return [f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            f"--root-dir={d / 'kubelet'}", f"--cert-dir={d / 'kubelet-certs'}",
            f"--hostname-override={lay.node_name(i)}", f"--node-ip={lay.node_ip(i)}",
            f"--node-labels=virtbench.testbed={lay.name}"]


def registry_yaml(lay: Layout) -> str:
    return yaml.safe_dump({
        "version": "0.1", "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(lay.state / "registry")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{REGISTRY_PORT}", "debug": {"addr": ""}},
    }, sort_keys=False)
