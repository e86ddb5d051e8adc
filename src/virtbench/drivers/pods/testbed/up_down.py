"""Start and remove a testbed cluster: processes, network namespaces, links, iptables chains, mounts.

`up` records every process it starts by pid and start time (`pids/`, written right after each
start, so a killed `up` leaves them too) and whose the cluster is (`owner.json`); runs that use
the cluster register under `runs/` (machines/testbed_owner.py). `down` refuses while a live run
uses it, and stops only the recorded processes, the containerd shims their containerds recorded
(`shim.pid` in each node's containerd state) and the descendants of both (the pods' processes):
never a process that merely names the cluster's files (a user's `kubectl --kubeconfig ...`).

The API server, etcd and the registry listen on fixed loopback ports and the nodes on fixed
addresses, so one cluster runs on a machine at a time: `up` says whose the running one is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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
from ....hostdirs import start_ticks
from ....machines import testbed_owner
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
SHIM_SOCKETS = Path("/run/containerd/s")  # where Debian's containerd 1.6 puts every shim's socket, whatever its state dir
HOST_NS_NAME = "hostns.net"  # a bind mount of this machine's network namespace, for the relays


def check_name(name: str) -> None:
    # Link names are at most 15 bytes: "<name>-cni" and "<name>-v<i>" must fit.
    if not re.fullmatch(r"[a-z][a-z0-9]{0,9}", name):
        raise UserError(f"testbed cluster name {name!r} is not 1-10 lowercase letters and digits, starting "
                        "with a letter", "e.g. --name vbk8s (the default)")


def clusters_here(root: Path = configs.ROOT) -> list[str]:
    """The testbed clusters on this machine (their state directories), up or half-removed."""
    return sorted(d.name for d in root.iterdir() if d.is_dir()) if root.is_dir() else []


def live_runs(lay: Layout) -> list[dict]:
    return testbed_owner.live_runs_in(lay.state)


def whose(lay: Layout) -> str:
    """"made by alice at 2026-11-27 22:50, in use by run R (user bob, pid 42)": for up's and down's refusals."""
    runs = live_runs(lay)
    return f"made {testbed_owner.owner_text(testbed_owner.owner_in(lay.state))}" + \
        (f", in use by run {testbed_owner.runs_text(runs)}" if runs else "")


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

def spawn(lay: Layout, name: str, argv: list[str], netns: str | None = None,
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
    # pid and start time: down stops this process, never another that got its pid later
    (pids / f"{name}.pid").write_text(f"{proc.pid} {start_ticks(proc.pid) or ''}")
    # how it was started, in start order: `heal` starts a dead one again the same way
    (pids / f"{name}.cmd").write_text(json.dumps({"argv": argv, "env": env or {}}))
    with open(pids / "order", "a") as f:
        f.write(name + "\n")
    return proc.pid


def _recorded(pidfile: Path) -> int | None:
    """The process a pid file of `spawn` names, if it still runs (same pid and start time)."""
    try:
        pid, _, ticks = pidfile.read_text().strip().partition(" ")
        pid_ = int(pid)
    except (OSError, ValueError):
        return None
    return pid_ if _alive(pid_) and start_ticks(pid_) == ticks else None


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
            if pidfile.is_file() and not _recorded(pidfile):
                raise UserError(f"{name} exited while waiting for {what}:\n{_log_tail(lay, name)}",
                                f"its log: {name}.log in the logs directory named above")
        if time.monotonic() - t0 > timeout:
            raise UserError(f"{what} not reached in {timeout:.0f} s", "the components' logs are in the logs "
                            "directory named above")
        time.sleep(0.3)


def _is_shim_of(pid: int, lay: Layout) -> bool:
    """A containerd shim of one of the cluster's containerds: containerd starts each in its task's
    bundle directory, under that containerd's state directory (the shim is re-parented, not
    containerd's child, and records its pid nowhere)."""
    try:
        if not os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("containerd-shim"):
            return False
        cwd = Path(os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)"))
    except OSError:
        return False
    return cwd.is_relative_to(lay.state) and "containerd" in cwd.relative_to(lay.state).parts[1:2]


def own_processes(lay: Layout) -> list[int]:
    """The processes `up` started (recorded by pid and start time), their containerds' shims, and all
    their descendants (the pods' processes, the relays' connections)."""
    found = {pid for f in (lay.state / "pids").glob("*.pid") if (pid := _recorded(f))}
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if _is_shim_of(int(entry), lay):
            found.add(int(entry))
    found.discard(os.getpid())
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
        spawn(lay, f"relay-n{i}-{port}", [
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


def up(nodes: int = 2, name: str = configs.DEFAULT_NAME, log: Callable[[str], None] = print, push_image: bool = True) -> Layout:
    check_name(name)
    preflight()
    lay = Layout(name, nodes)
    if lay.state.exists() or leftovers(lay):
        rec = testbed_owner.owner_in(lay.state)
        mine = rec is None or rec.get("user") == testbed_owner.user()
        raise UserError(f"testbed cluster {name} is up already ({whose(lay)}), or a killed `up` left parts of it "
                        f"({lay.state})", f"use it: export KUBECONFIG={lay.kubeconfig}; " +
                        (f"or remove it first: virtbench testbed k8s down --name {name}" if mine else
                         "it is not yours: ask its owner before removing it"))
    for other in clusters_here(lay.root):
        o = Layout(other, 0, lay.root)
        raise UserError(f"testbed cluster {other} is up on this machine ({whose(o)}); its ports (API server "
                        f"{configs.API_PORT}, etcd {configs.ETCD_PORT}, registry {configs.REGISTRY_PORT}) and node "
                        f"addresses are fixed, so one testbed cluster runs on a machine at a time",
                        f"use it: export KUBECONFIG={o.kubeconfig}; or, when it is no longer needed: "
                        f"virtbench testbed k8s down --name {other}")
    bindir = build.ensure(log)
    runsc = shutil.which("runsc")
    if not runsc:
        log(f"no runsc (gVisor) here: RuntimeClass {configs.RUNTIME_CLASS} is not offered (apt-get install runsc)")
    t0 = time.monotonic()
    lay.state.mkdir(parents=True)
    os.chmod(lay.state, 0o700)
    testbed_owner.write_owner(lay.state)
    (lay.state / "nodes").write_text(str(nodes))
    bin_ = lambda n: str(bindir / n)  # noqa: E731
    try:
        _write_pki(lay)
        _setup_network(lay)
        _write_file(lay.state / "registry.yml", configs.registry_yaml(lay))
        spawn(lay, "registry", [bin_("registry"), "serve", str(lay.state / "registry.yml")])
        spawn(lay, "etcd", [bin_("etcd"), *configs.etcd_args(lay)])
        _wait("the registry", lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{configs.REGISTRY_PORT}/v2/", timeout=2).status == 200, 60, lay, ["registry"])
        push_pause(lay)
        spawn(lay, "kube-apiserver", [bin_("kube-apiserver"), *configs.apiserver_args(lay)])
        took = _wait("the API server's /readyz", lambda: _api_ready(lay), READY_TIMEOUT, lay,
                     ["etcd", "kube-apiserver"])
        log(f"API server ready at {configs.API_SERVER} ({took:.0f} s)")
        spawn(lay, "kube-controller-manager", [bin_("kube-controller-manager"), *configs.controller_manager_args(lay)])
        spawn(lay, "kube-scheduler", [bin_("kube-scheduler"), *configs.scheduler_args(lay)])
        for i in range(1, nodes + 1):
            nd, ns = lay.node_dir(i), lay.netns(i)
            if ns:
                _start_relays(lay, i)
            wrapper = None
            if runsc:
                wrapper = nd / "runsc-ptrace"
                _write_file(wrapper, configs.runsc_wrapper(runsc))
                os.chmod(wrapper, 0o700)
            _write_file(nd / "containerd.toml", configs.containerd_toml(lay, i, wrapper))
            _write_file(nd / "cni" / "10-pods.conflist", configs.cni_conflist(lay, i))
            _write_file(nd / "kubelet.yaml", configs.kubelet_yaml(lay, i))
            _write_file(nd / "kube-proxy.yaml", configs.kube_proxy_yaml(lay, i, nd / "kube-proxy.kubeconfig"))
            spawn(lay, f"containerd-n{i}", ["containerd", "--config", str(nd / "containerd.toml")], netns=ns)
            _wait(f"node {i}'s containerd socket", lambda: lay.containerd_sock(i).is_socket(),  # noqa: B023
                  60, lay, [f"containerd-n{i}"])
            spawn(lay, f"kubelet-n{i}", [bin_("kubelet"), *configs.kubelet_args(lay, i)], netns=ns)
            spawn(lay, f"kube-proxy-n{i}", [bin_("kube-proxy"), f"--config={nd / 'kube-proxy.yaml'}"], netns=ns)
        took = _wait(f"{nodes} Ready node(s)", lambda: len(ready_nodes(lay)) == nodes, READY_TIMEOUT, lay,
                     [p for i in range(1, nodes + 1) for p in (f"containerd-n{i}", f"kubelet-n{i}")])
        log(f"{nodes} node(s) Ready ({took:.0f} s)")
        _create_storage_class(lay)
        if runsc:
            _create_runtime_class(lay)
        reg = {"registry": f"127.0.0.1:{configs.REGISTRY_PORT}", "guest_repository":
               f"127.0.0.1:{configs.REGISTRY_PORT}/virtbench/guest", "testbed": lay.name,
               "storage_class": configs.STORAGE_CLASS, "runtimes": _runtimes(runsc),
               "runtime_classes": {configs.RUNTIME_CLASS: configs.GVISOR_HANDLER} if runsc else {}}
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
            down(name, force=True)
        raise
    (lay.state / "up.json").write_text(json.dumps({"seconds": round(time.monotonic() - t0, 1),
                                                   "version": KUBERNETES_VERSION, "nodes": nodes}))
    return lay


def kubelet_pid(lay: Layout, i: int) -> int | None:
    """Node i's kubelet, if it runs (fault tests kill it)."""
    return _recorded(lay.state / "pids" / f"kubelet-n{i}.pid")


def heal(name: str = configs.DEFAULT_NAME, log: Callable[[str], None] = print) -> list[str]:
    """Start again, the way `up` started them and in the same order, the cluster's processes that
    are not running (a kubelet killed, say), then wait until every node is Ready. Returns their names."""
    check_name(name)
    lay = Layout(name, 0)
    if not (lay.state / "up.json").is_file():
        raise UserError(f"testbed cluster {name} is not up", f"start it with: virtbench testbed k8s up --name {name}")
    lay = Layout(name, int((lay.state / "nodes").read_text()))
    pids = lay.state / "pids"
    restarted = []
    for name in dict.fromkeys((pids / "order").read_text().split()):
        if _recorded(pids / f"{name}.pid"):
            continue
        cmd = json.loads((pids / f"{name}.cmd").read_text())
        log(f"starting {name} again")
        spawn(lay, name, cmd["argv"], env=cmd["env"])
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


def _version_of(argv: list[str]) -> str | None:
    """'1.1.5+ds1' of `runc --version`'s 'runc version 1.1.5+ds1' (first line, last word)."""
    res = sh(argv, check=False, timeout=30)
    first = (res.stdout or "").strip().splitlines()[:1]
    return first[0].split()[-1] if res.returncode == 0 and first else None


def _runtimes(runsc: str | None) -> dict[str, dict]:
    """The nodes' OCI runtimes by containerd handler, as samples record them (the container driver's
    fields: runtime, its path, version, options and label)."""
    from ...container.ociruntime import label

    def one(runtime: str, path: str | None, options: dict[str, str]) -> dict:
        return {"runtime": runtime, "runtime_path": path, "runtime_version": _version_of([path or runtime, "--version"]),
                "runtime_options": options, "runtime_label": label(runtime, options)}

    out = {"runc": one("runc", shutil.which("runc"), {})}
    if runsc:
        out[configs.GVISOR_HANDLER] = one("runsc", runsc, dict(configs.GVISOR_OPTIONS))
    return out


def _create_runtime_class(lay: Layout) -> None:
    from kubernetes import client, config

    api = config.new_client_from_config(str(lay.kubeconfig))
    try:
        client.NodeV1Api(api).create_runtime_class(configs.runtime_class())
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


def _links(lay: Layout) -> list[str]:
    """The cluster's links: its bridge, its pods' CNI bridge, its nodes' veths (not another name's)."""
    res = sh(["ip", "-o", "link", "show"], check=False)
    names = [line.split(":")[1].strip().split("@")[0] for line in res.stdout.splitlines() if ":" in line]
    mine = re.compile(rf"{re.escape(lay.name)}(0|-cni|-v\d+)")
    return [n for n in names if mine.fullmatch(n)]


def _shim_sockets(lay: Layout) -> list[Path]:
    """The sockets of the cluster's shims, as each task's bundle records them ("unix:///run/containerd/s/<hash>")."""
    out = []
    for f in lay.state.glob("n*/containerd/state/io.containerd.runtime.v2.task/*/*/address"):
        with contextlib.suppress(OSError):
            addr = f.read_text().strip().removeprefix("unix://")
            if Path(addr).parent == SHIM_SOCKETS:
                out.append(Path(addr))
    return out


def _others(lay: Layout) -> list[str]:
    """Other testbed clusters on this machine: while one is there, the machine-wide parts (kube-proxy's
    chains, containerd's cni-* namespaces, the host-path volumes) are its, not ours to remove."""
    return [n for n in clusters_here(lay.root) if n != lay.name]


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
    left = [f"process {p}" for p in own_processes(lay)]
    left += [f"mount {m}" for m in _mounts_under(lay.state)]
    left += [f"netns {n}" for n in _netns_list() if n.startswith(f"{lay.name}-n")]
    left += [f"link {n}" for n in _links(lay)]
    if lay.state.exists():
        left.append(f"directory {lay.state}")
    if _others(lay):
        return list(dict.fromkeys(left))  # the machine-wide chains are the other cluster's
    for tool in IPTABLES:
        for table in TABLES:
            left += [f"{tool} {table} chain {c}" for c in _our_chains(tool, table) if c.startswith("VBK8S-")]
    return list(dict.fromkeys(left))


def down(name: str = configs.DEFAULT_NAME, log: Callable[[str], None] = print, force: bool = False,
         root: Path = configs.ROOT) -> list[str]:
    """Remove everything of testbed `name`; safe to repeat, and after a killed up. Refuses while a
    live run uses it, unless `force`."""
    check_name(name)
    lay = Layout(name, 0, root)
    if (runs := live_runs(lay)) and not force:
        raise UserError(f"testbed cluster {name} is in use by run {testbed_owner.runs_text(runs)}; removing it "
                        f"would fail that run's pods ({whose(lay)})",
                        f"wait until the run ends, or remove it anyway: virtbench testbed k8s down --name {name} --force")
    removed: list[str] = []
    # The kubelets first (or they restart what goes next), then the rest of what up started.
    kubelets = [p for f in (lay.state / "pids").glob("kubelet-n*.pid") if (p := _recorded(f))]
    _kill_all(kubelets)
    pids = own_processes(lay)
    _kill_all(pids)
    removed += [f"{len(set(pids) | set(kubelets))} processes"] if pids or kubelets else []
    others = _others(lay)
    if others:
        log(f"testbed cluster {', '.join(others)} is up on this machine too: its kube-proxy chains, pod "
            f"namespaces and volumes are left alone")
    built = build.built_dir()
    proxy = built / "kube-proxy" if built else None
    if not others and proxy and proxy.is_file() and any(_our_chains("iptables", t) for t in TABLES):
        sh([str(proxy), "--cleanup"], check=False, timeout=60)  # kube-proxy's own rules, its own way
    for tool in IPTABLES if not others else ():
        for table in TABLES:
            removed += _remove_chains(tool, table)
    for ns in _cni_netns() if not others else ():
        sh(["ip", "netns", "delete", ns], check=False)
        removed.append(f"netns {ns}")
    for sock in _shim_sockets(lay):  # a killed shim leaves its socket
        sock.unlink(missing_ok=True)
    for d in (SHIM_SOCKETS, SHIM_SOCKETS.parent):  # containerd's fixed /run/containerd/s, when empty
        with contextlib.suppress(OSError):
            d.rmdir()
    for m in _mounts_under(lay.state):
        if sh(["umount", m], check=False).returncode != 0:
            sh(["umount", "-l", m], check=False)
        removed.append(f"mount {m}")
    for ns in [n for n in _netns_list() if n.startswith(f"{lay.name}-n")]:
        sh(["ip", "netns", "delete", ns], check=False)
        removed.append(f"netns {ns}")
    for link in _links(lay):
        sh(["ip", "link", "delete", link], check=False)
        removed.append(f"link {link}")
    cni_results = Path("/var/lib/cni/results")
    for f in cni_results.glob(f"{lay.name}-n*-pods-*") if cni_results.is_dir() else []:
        f.unlink(missing_ok=True)
    for d in configs.HOSTPATH_PV_DIR.glob("*") if configs.HOSTPATH_PV_DIR.is_dir() and not others else []:
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
