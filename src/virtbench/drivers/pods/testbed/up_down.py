"""Start and remove a testbed cluster: processes, network namespaces, links, iptables chains, mounts.

Every process the testbed starts names the state directory in its command line (configs, data
dirs, sockets), so `down` finds them by that alone: it works after a killed `up`, when no pid
file was written. Pod processes are found as descendants of those (the containerd shims).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ....errors import UserError
from . import KUBERNETES_VERSION, build, configs, pki
from .configs import Layout
from .images import push_guest, push_pause, sh

READY_TIMEOUT = 240.0
TOOLS = {"containerd": "containerd", "runc": "runc", "socat": "socat", "nsenter": "util-linux",
         "iptables": "iptables", "ip": "iproute2", "podman": "podman", "gcc": "build-essential",
         "mount": "mount"}
CNI_DIR = Path("/usr/lib/cni")
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")
OUR_CHAIN_PREFIXES = ("KUBE-", "VBK8S-")
HOST_NS_NAME = "hostns.net"  # a bind mount of this machine's network namespace, for the relays


def preflight() -> None:
    if os.geteuid() != 0:
        raise UserError("the Kubernetes testbed needs root (network namespaces, containerd, kubelet)",
                        "run it as root, e.g. with sudo")
    missing = sorted({pkg for tool, pkg in TOOLS.items() if not shutil.which(tool)})
    if not (CNI_DIR / "bridge").is_file():
        missing.append("containernetworking-plugins")
    if missing:
        raise UserError(f"the Kubernetes testbed needs these Debian packages: {' '.join(missing)}",
                        f"apt-get install {' '.join(missing)} (bash setup.sh installs them)")


# -- processes -------------------------------------------------------------------------------------

def _spawn(lay: Layout, name: str, argv: list[str], netns: str | None = None,
           env: dict[str, str] | None = None) -> int:
    if netns:
        # nsenter, not `ip netns exec`: that one mounts a fresh /sys, the cgroup mounts vanish and
        # the kubelet cannot find them
        argv = ["nsenter", f"--net=/var/run/netns/{netns}", *argv]
    logs = lay.state / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **(env or {})})
    pids = lay.state / "pids"
    pids.mkdir(exist_ok=True)
    (pids / f"{name}.pid").write_text(str(proc.pid))
    # how it was started, in start order: `heal` starts a dead one again the same way
    (pids / f"{name}.cmd").write_text(json.dumps({"argv": argv, "env": env or {}}))
    with open(pids / "order", "a") as f:
        f.write(name + "\n")
    return proc.pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _log_tail(lay: Layout, name: str, lines: int = 8) -> str:
    try:
        text = (lay.state / "logs" / f"{name}.log").read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _wait(what: str, probe: Callable[[], bool], timeout: float, lay: Layout, procs: list[str]) -> float:
    t0 = time.monotonic()
    while True:
        with contextlib.suppress(Exception):
            if probe():
                return time.monotonic() - t0
        for name in procs:
            pidfile = lay.state / "pids" / f"{name}.pid"
            if pidfile.is_file() and not _alive(int(pidfile.read_text())):
                raise UserError(f"{name} exited while waiting for {what}:\n{_log_tail(lay, name)}",
                                f"its log: {name}.log in the logs directory named above")
        if time.monotonic() - t0 > timeout:
            raise UserError(f"{what} not reached in {timeout:.0f} s", "the components' logs are in the logs "
                            "directory named above")
        time.sleep(0.3)


def _ours(lay: Layout) -> list[int]:
    """Processes that name the state directory, and all their descendants (the pods' processes)."""
    mark = str(lay.state) + "/"
    parents: dict[int, int] = {}
    found: set[int] = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                parents[pid] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read() and pid != me:
                    found.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    grew = True
    while grew:
        more = {p for p, pp in parents.items() if pp in found and p not in found}
        found |= more
        grew = bool(more)
    return sorted(found)


def _kill_all(pids: list[int], grace: float = 5.0) -> None:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return


# -- network ---------------------------------------------------------------------------------------

def _setup_network(lay: Layout) -> None:
    ip = lambda *a: sh(["ip", *a])  # noqa: E731
    ip("link", "add", lay.bridge, "type", "bridge")
    ip("addr", "add", f"{lay.node_ip(1)}/24", "dev", lay.bridge)
    ip("link", "set", lay.bridge, "up")
    sh(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    for i in range(2, lay.nodes + 1):
        ns, veth = lay.netns(i), lay.veth(i)
        ip("netns", "add", ns)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", veth, "master", lay.bridge, "up")
        nsip = lambda *a: sh(["ip", "-n", ns, *a])  # noqa: E731,B023
        nsip("addr", "add", f"{lay.node_ip(i)}/24", "dev", "eth0")
        nsip("link", "set", "eth0", "up")
        nsip("link", "set", "lo", "up")
        nsip("route", "add", "default", "via", lay.node_ip(1))
        sh(["nsenter", f"--net=/var/run/netns/{ns}", "sysctl", "-qw", "net.ipv4.ip_forward=1"])
    for i in range(1, lay.nodes + 1):  # pods of node i: via node i's address, from every other node
        for j in range(1, lay.nodes + 1):
            if i == j or (j != 1 and i != 1):
                continue  # namespaced nodes reach each other through the host (their default route)
            cmd = ["ip", *(["-n", lay.netns(j)] if lay.netns(j) else []), "route", "add", lay.pod_cidr(i),
                   "via", lay.node_ip(i)]
            sh(cmd)
    # Pod traffic is forwarded whatever the FORWARD policy (a container engine may have set DROP).
    for tool in IPTABLES[:1]:
        sh([tool, "-N", "VBK8S-FORWARD"])
        for rule in (["-s", f"{configs.POD_NET}.0.0/16"], ["-d", f"{configs.POD_NET}.0.0/16"],
                     ["-i", lay.bridge], ["-o", lay.bridge]):
            sh([tool, "-A", "VBK8S-FORWARD", *rule, "-j", "ACCEPT"])
        sh([tool, "-I", "FORWARD", "-j", "VBK8S-FORWARD"])
    # The relays re-enter this namespace per connection through this bind mount.
    hostns = lay.state / HOST_NS_NAME
    hostns.touch()
    sh(["mount", "--bind", f"/proc/{os.getpid()}/ns/net", str(hostns)])


def _start_relays(lay: Layout, i: int) -> None:
    """Node i's loopback ports of the API server and registry, relayed to this machine's loopback."""
    hostns = lay.state / HOST_NS_NAME
    for port in configs.RELAYED_PORTS:
        _spawn(lay, f"relay-n{i}-{port}", [
            "socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr",
            f"SYSTEM:exec nsenter --net={hostns} socat STDIO TCP\\:127.0.0.1\\:{port}"], netns=lay.netns(i))


# -- up --------------------------------------------------------------------------------------------

def _write_pki(lay: Layout) -> None:
    d = lay.pki
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    ca = pki.CA.new(f"virtbench testbed {lay.name} CA")
    ca.write(d)
    node_ips = tuple(lay.node_ip(i) for i in range(1, lay.nodes + 1))
    pki.write_pair(d, "apiserver", ca.issue(
        "kube-apiserver", server=True, ips=("127.0.0.1", "10.96.0.1", *node_ips),
        dns=("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
             "localhost")))
    pki.write_pair(d, "apiserver-kubelet", ca.issue("kube-apiserver-kubelet-client", "system:masters", client=True))
    pki.write_sa_keys(d)
    ca_pem = (d / "ca.crt").read_bytes()

    def kubeconfig(path: Path, cn: str, org: str | None) -> None:
        crt, key = ca.issue(cn, org, client=True)
        pki.write_private(path, configs.kubeconfig(configs.API_SERVER, cn, ca_pem, crt, key, lay.name).encode())

    kubeconfig(lay.kubeconfig, "virtbench-admin", "system:masters")
    kubeconfig(lay.state / "controller-manager.kubeconfig", "system:kube-controller-manager", None)
    kubeconfig(lay.state / "scheduler.kubeconfig", "system:kube-scheduler", None)
    for i in range(1, lay.nodes + 1):
        nd = lay.node_dir(i)
        nd.mkdir(parents=True, exist_ok=True)
        kubeconfig(nd / "kubelet.kubeconfig", f"system:node:{lay.node_name(i)}", "system:nodes")
        kubeconfig(nd / "kube-proxy.kubeconfig", "system:kube-proxy", None)
        pki.write_pair(d, f"kubelet-n{i}", ca.issue(f"system:node:{lay.node_name(i)}", "system:nodes",
                                                    server=True, ips=(lay.node_ip(i),), dns=(lay.node_name(i),)))


def _api_ready(lay: Layout) -> bool:
    import base64

    import yaml

    kc = yaml.safe_load(lay.kubeconfig.read_text())
    user = kc["users"][0]["user"]
    with tempfile.TemporaryDirectory() as tmp:
        for k, fn in (("client-certificate-data", "c"), ("client-key-data", "k"),):
            pki.write_private(Path(tmp) / fn, base64.b64decode(user[k]))
        ctx = ssl.create_default_context(cafile=str(lay.pki / "ca.crt"))
        ctx.load_cert_chain(f"{tmp}/c", f"{tmp}/k")
        with urllib.request.urlopen(f"{configs.API_SERVER}/readyz", context=ctx, timeout=5) as r:
            return r.status == 200


def _write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pki.write_private(path, text.encode())


def up(nodes: int = 2, name: str = "vbk8s", log: Callable[[str], None] = print, push_image: bool = True) -> Layout:
    preflight()
    lay = Layout(name, nodes)
    if lay.state.exists() or leftovers(lay):
        raise UserError(f"testbed cluster {name} is up already, or a killed `up` left parts of it "
                        f"({lay.state})", "remove it first with: virtbench testbed k8s down")
    bindir = build.ensure(log)
    t0 = time.monotonic()
    lay.state.mkdir(parents=True)
    os.chmod(lay.state, 0o700)
    (lay.state / "nodes").write_text(str(nodes))
    bin_ = lambda n: str(bindir / n)  # noqa: E731
    try:
        _write_pki(lay)
        _setup_network(lay)
        _write_file(lay.state / "registry.yml", configs.registry_yaml(lay))
        _spawn(lay, "registry", [bin_("registry"), "serve", str(lay.state / "registry.yml")])
        _spawn(lay, "etcd", [bin_("etcd"), *configs.etcd_args(lay)])
        _wait("the registry", lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{configs.REGISTRY_PORT}/v2/", timeout=2).status == 200, 60, lay, ["registry"])
        push_pause(lay)
        _spawn(lay, "kube-apiserver", [bin_("kube-apiserver"), *configs.apiserver_args(lay)])
        took = _wait("the API server's /readyz", lambda: _api_ready(lay), READY_TIMEOUT, lay,
                     ["etcd", "kube-apiserver"])
        log(f"API server ready at {configs.API_SERVER} ({took:.0f} s)")
        _spawn(lay, "kube-controller-manager", [bin_("kube-controller-manager"), *configs.controller_manager_args(lay)])
        _spawn(lay, "kube-scheduler", [bin_("kube-scheduler"), *configs.scheduler_args(lay)])
        for i in range(1, nodes + 1):
            nd, ns = lay.node_dir(i), lay.netns(i)
            if ns:
                _start_relays(lay, i)
            _write_file(nd / "containerd.toml", configs.containerd_toml(lay, i))
            _write_file(nd / "cni" / "10-pods.conflist", configs.cni_conflist(lay, i))
            _write_file(nd / "kubelet.yaml", configs.kubelet_yaml(lay, i))
            _write_file(nd / "kube-proxy.yaml", configs.kube_proxy_yaml(lay, i, nd / "kube-proxy.kubeconfig"))
            _spawn(lay, f"containerd-n{i}", ["containerd", "--config", str(nd / "containerd.toml")], netns=ns)
            _wait(f"node {i}'s containerd socket", lambda: lay.containerd_sock(i).is_socket(),  # noqa: B023
                  60, lay, [f"containerd-n{i}"])
            _spawn(lay, f"kubelet-n{i}", [bin_("kubelet"), *configs.kubelet_args(lay, i)], netns=ns)
            _spawn(lay, f"kube-proxy-n{i}", [bin_("kube-proxy"), f"--config={nd / 'kube-proxy.yaml'}"], netns=ns)
        took = _wait(f"{nodes} Ready node(s)", lambda: len(ready_nodes(lay)) == nodes, READY_TIMEOUT, lay,
                     [p for i in range(1, nodes + 1) for p in (f"containerd-n{i}", f"kubelet-n{i}")])
        log(f"{nodes} node(s) Ready ({took:.0f} s)")
        _create_storage_class(lay)
        reg = {"registry": f"127.0.0.1:{configs.REGISTRY_PORT}", "guest_repository":
               f"127.0.0.1:{configs.REGISTRY_PORT}/virtbench/guest", "testbed": lay.name,
               "storage_class": configs.STORAGE_CLASS}
        lay.registry_file.write_text(json.dumps(reg, indent=2) + "\n")
        if push_image:
            from .... import image

            info = image.find()
            if info is None:
                log("no guest image built yet: the kubernetes backend pushes it on first use "
                    "(or run `virtbench image build` first)")
            else:
                push_guest(info, log)
    except BaseException:
        kept = Path(tempfile.mkdtemp(prefix=f"{name}-up-logs-"))
        with contextlib.suppress(OSError):
            shutil.copytree(lay.state / "logs", kept, dirs_exist_ok=True)
        log(f"up failed: removing what it started; the components' logs are kept in {kept}")
        with contextlib.suppress(Exception):
            down(name)
        raise
    (lay.state / "up.json").write_text(json.dumps({"seconds": round(time.monotonic() - t0, 1),
                                                   "version": KUBERNETES_VERSION, "nodes": nodes}))
    return lay


def kubelet_pid(lay: Layout, i: int) -> int | None:
    """Node i's kubelet, if it runs (fault tests kill it)."""
    pidfile = lay.state / "pids" / f"kubelet-n{i}.pid"
    pid = int(pidfile.read_text()) if pidfile.is_file() else None
    return pid if pid and _alive(pid) else None


def heal(name: str = "vbk8s", log: Callable[[str], None] = print) -> list[str]:
    """Start again, the way `up` started them and in the same order, the cluster's processes that
    are not running (a kubelet killed, say), then wait until every node is Ready. Returns their names."""
    lay = Layout(name, 0)
    if not (lay.state / "up.json").is_file():
        raise UserError(f"testbed cluster {name} is not up", "start it with: virtbench testbed k8s up")
    lay = Layout(name, int((lay.state / "nodes").read_text()))
    pids = lay.state / "pids"
    restarted = []
    for name in dict.fromkeys((pids / "order").read_text().split()):
        pidfile = pids / f"{name}.pid"
        if pidfile.is_file() and _alive(int(pidfile.read_text())):
            continue
        cmd = json.loads((pids / f"{name}.cmd").read_text())
        log(f"starting {name} again")
        _spawn(lay, name, cmd["argv"], env=cmd["env"])
        restarted.append(name)
        if name.startswith("containerd-n"):  # its kubelet needs the socket
            i = int(name.rsplit("-n", 1)[1])
            _wait(f"node {i}'s containerd socket", lambda: lay.containerd_sock(i).is_socket(),  # noqa: B023
                  60, lay, [name])
    if restarted:
        _wait("the API server's /readyz", lambda: _api_ready(lay), READY_TIMEOUT, lay, restarted)
    took = _wait(f"{lay.nodes} Ready node(s)", lambda: len(ready_nodes(lay)) == lay.nodes, READY_TIMEOUT, lay,
                 restarted)
    log(f"{lay.nodes} node(s) Ready ({took:.0f} s)")
    return restarted


def _create_storage_class(lay: Layout) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(str(lay.kubeconfig))
    try:
        client.StorageV1Api(api).create_storage_class(configs.storage_class())
    finally:
        api.close()


def ready_nodes(lay: Layout) -> list[str]:
    from kubernetes import client, config

    api = config.new_client_from_config(str(lay.kubeconfig))
    try:
        out = []
        for node in client.CoreV1Api(api).list_node().items:
            conds = {c.type: c.status for c in node.status.conditions or []}
            if conds.get("Ready") == "True":
                out.append(node.metadata.name)
        return out
    finally:
        api.close()


# -- down ------------------------------------------------------------------------------------------

def _mounts_under(path: Path) -> list[str]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            target = line.split()[4].replace("\\040", " ")
            if target == str(path) or target.startswith(str(path) + "/"):
                out.append(target)
    return sorted(set(out), key=len, reverse=True)


def _netns_list() -> list[str]:
    res = sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def _links(prefix: str) -> list[str]:
    res = sh(["ip", "-o", "link", "show"], check=False)
    names = [line.split(":")[1].strip().split("@")[0] for line in res.stdout.splitlines() if ":" in line]
    return [n for n in names if n.startswith(prefix)]


def _our_chains(tool: str, table: str) -> list[str]:
    res = sh([tool, "-w", "-t", table, "-S"], check=False)
    return [line.split()[1] for line in res.stdout.splitlines()
            if line.startswith("-N ") and line.split()[1].startswith(OUR_CHAIN_PREFIXES)]


def _remove_chains(tool: str, table: str) -> list[str]:
    chains = _our_chains(tool, table)
    if not chains:
        return []
    res = sh([tool, "-w", "-t", table, "-S"], check=False)
    for line in res.stdout.splitlines():  # jumps into our chains from the built-in ones
        parts = line.split()
        if parts[:1] == ["-A"] and parts[1] not in chains and "-j" in parts and \
                parts[parts.index("-j") + 1] in chains:
            sh([tool, "-w", "-t", table, "-D", *parts[1:]], check=False)
    for c in chains:
        sh([tool, "-w", "-t", table, "-F", c], check=False)
    for c in chains:
        sh([tool, "-w", "-t", table, "-X", c], check=False)
    return [f"{tool} {table} chain {c}" for c in chains]


def _cni_netns() -> list[str]:
    """The pod sandboxes' namespaces containerd made (cni-<uuid>)."""
    return [n for n in _netns_list() if n.startswith("cni-")]


def leftovers(lay: Layout) -> list[str]:
    """What of the testbed is still there (empty after a clean down)."""
    left = [f"process {p}" for p in _ours(lay)]
    left += [f"mount {m}" for m in _mounts_under(lay.state)]
    left += [f"netns {n}" for n in _netns_list() if n.startswith(f"{lay.name}-n")]
    left += [f"link {n}" for n in _links(lay.name)]
    if lay.state.exists():
        left.append(f"directory {lay.state}")
    for tool in IPTABLES:
        for table in TABLES:
            left += [f"{tool} {table} chain {c}" for c in _our_chains(tool, table) if c.startswith("VBK8S-")]
    return list(dict.fromkeys(left))


def down(name: str = "vbk8s", log: Callable[[str], None] = print) -> list[str]:
    """Remove everything of testbed `name`; safe to repeat, and after a killed up."""
    lay = Layout(name, 0)
    removed: list[str] = []
    # The kubelets first (or they restart what goes next), then everything else that names the state.
    kubelets = [p for p in _ours(lay) if b"kubelet" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]]
    _kill_all(kubelets)
    pids = _ours(lay)
    _kill_all(pids)
    removed += [f"{len(set(pids) | set(kubelets))} processes"] if pids or kubelets else []
    built = build.built_dir()
    proxy = built / "kube-proxy" if built else None
    if proxy and proxy.is_file() and any(_our_chains("iptables", t) for t in TABLES):
        sh([str(proxy), "--cleanup"], check=False, timeout=60)  # kube-proxy's own rules, its own way
    for tool in IPTABLES:
        for table in TABLES:
            removed += _remove_chains(tool, table)
    for ns in _cni_netns():
        sh(["ip", "netns", "delete", ns], check=False)
        removed.append(f"netns {ns}")
    for m in _mounts_under(lay.state):
        if sh(["umount", m], check=False).returncode != 0:
            sh(["umount", "-l", m], check=False)
        removed.append(f"mount {m}")
    for ns in [n for n in _netns_list() if n.startswith(f"{lay.name}-n")]:
        sh(["ip", "netns", "delete", ns], check=False)
        removed.append(f"netns {ns}")
    for link in _links(lay.name):
        sh(["ip", "link", "delete", link], check=False)
        removed.append(f"link {link}")
    cni_results = Path("/var/lib/cni/results")
    for f in cni_results.glob(f"{lay.name}-n*-pods-*") if cni_results.is_dir() else []:
        f.unlink(missing_ok=True)
    for d in configs.HOSTPATH_PV_DIR.glob("*") if configs.HOSTPATH_PV_DIR.is_dir() else []:
        shutil.rmtree(d, ignore_errors=True)  # volumes of claims the cluster had no time to delete
        removed.append(f"volume directory {d}")
    with contextlib.suppress(OSError):
        configs.HOSTPATH_PV_DIR.rmdir()
    links = Path("/var/log/containers")  # the kubelet's fixed symlinks to its containers' logs
    for link in links.iterdir() if links.is_dir() else []:
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(str(lay.state) + "/"):
                link.unlink()
    if lay.state.exists():
        shutil.rmtree(lay.state, ignore_errors=True)
        removed.append(f"directory {lay.state}")
    for d in (lay.root, lay.root.parent):  # /var/lib/virtbench/k8s and /var/lib/virtbench, when empty
        with contextlib.suppress(OSError):
            d.rmdir()
    return removed
