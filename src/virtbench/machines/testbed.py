"""A local testbed: real SSH hosts on this one machine, each an sshd in its own network namespace.

Host k is namespace `<prefix>-<k>` joined to bridge `<prefix>0` (the subnet's first address) by a
veth pair (`<prefix>-h<k>` on the bridge, `eth0` inside, address .10+k). Each sshd also runs in its
own mount namespace with private /tmp and /var/lib/virtbench-host, so hosts do not see each other's
files, like separate machines. They share one kernel and CPU: their figures measure the network
path and the remote machinery, not separate machines.

Everything is found again by name (namespaces, links, processes in those namespaces, the state
dir), so `down` also cleans up after an `up` that was killed half way.

A testbed belongs to someone: `owner.json` in its state dir says who made it and when, and each run
whose inventory names it registers itself under `runs/` while it runs, so `down` refuses to pull the
hosts from under a live run (`--force` overrides) and `up` on a taken name says whose it is. The
default name includes the user, and the default subnet is the first free one, so two users of one
machine do not collide (the records are testbed_owner.py's).

About 520 lines as one module on purpose: `up`, `down` and the discovery by name are one job and
must agree on every name (namespaces, links, mounts, processes, state files); apart, each half
would have to restate them.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from .. import procs
from ..errors import UserError
from ..model import ExecResult
from . import ssh
from .testbed_owner import STATE_ROOT, live_runs, owner, owner_text, state_dir, user

HOST_DIR = "/var/lib/virtbench-host"  # each host's own data dir (virtbench_dir in the inventory)
SSHD = "/usr/sbin/sshd"
SHARED_NOTE = ("testbed hosts share one kernel and CPU: their figures measure the network path and the "
               "remote machinery, not separate machines")

# sshd processes started by this Python process, reaped in down() so none stay as zombies.
sshd_children: dict[str, list[subprocess.Popen]] = {}


def default_name() -> str:
    """tb<user>, cut to a valid name: every user of a machine gets a testbed of their own."""
    clean = re.sub(r"[^a-z0-9]", "", user().lower())[:8] or str(os.getuid())
    return f"tb{clean}"


SUBNET_POOL = ipaddress.ip_network("10.214.0.0/16")  # default subnets: the first free /24 of these


def free_subnet() -> str:
    """The first 10.214.N.0/24 that no address on this machine overlaps."""
    used = [ipaddress.ip_interface(a).network for a in _addresses()]
    for net in SUBNET_POOL.subnets(new_prefix=24):
        if not any(n.overlaps(net) for n in used):
            return str(net)
    raise UserError(f"no free /24 in {SUBNET_POOL} for a testbed", "choose one with --subnet")


def host_name(prefix: str, k: int) -> str:
    return f"tb{k}" if prefix == "vbtb" else f"{prefix}h{k}"


def _run(argv: list[str], timeout: float = 30) -> str:
    res = procs.run(argv, timeout=timeout)
    if not res.ok:
        raise UserError(f"testbed: {' '.join(argv)} failed: {(res.stderr or res.stdout).strip()}")
    return res.stdout


# Interface names are at most 15 bytes: "<prefix>-h<k>" must fit with k up to 3 digits.
NAME_RULE = "1-10 lowercase letters and digits, starting with a letter"


def _check_prefix(prefix: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9]{0,9}", prefix):
        raise UserError(f"testbed name {prefix!r} is not {NAME_RULE}",
                        f"e.g. --name {default_name()} (it begins the names of network interfaces, which "
                        "hold at most 15 bytes)")


# -- discovery by name --------------------------------------------------------------------------

def _namespaces(prefix: str) -> list[str]:
    out = procs.run(["ip", "netns", "list"], timeout=30).stdout
    names = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    return sorted((n for n in names if re.fullmatch(rf"{re.escape(prefix)}-\d+", n)),
                  key=lambda n: int(n.rsplit("-", 1)[1]))


def _links(prefix: str) -> list[str]:
    out = procs.run(["ip", "-o", "link", "show"], timeout=30).stdout
    names = [ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines() if ln.count(":") >= 2]
    pat = rf"{re.escape(prefix)}0|{re.escape(prefix)}-h\d+"
    return [n for n in names if re.fullmatch(pat, n)]


def testbed_pids(prefix: str) -> list[int]:
    """Processes in the testbed's namespaces, plus those outside this network namespace whose command
    line names the state dir (an sshd whose namespace name is already gone). ssh clients here that
    use the testbed's key are not the testbed's."""
    pids = set()
    for ns in _namespaces(prefix):
        pids.update(int(p) for p in procs.run(["ip", "netns", "pids", ns], timeout=30).stdout.split())
    marker = str(state_dir(prefix)).encode() + b"/"
    own_net = os.readlink("/proc/self/ns/net")
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes() and os.readlink(d / "ns/net") != own_net:
                    pids.add(int(d.name))
            except OSError:
                pass
    pids.discard(os.getpid())
    return sorted(pids)


def _mounts(prefix: str) -> list[str]:
    """Namespace name mounts (/run/netns/<prefix>-<k>) and anything mounted under the state dir."""
    pat = re.compile(rf"/run/netns/{re.escape(prefix)}-\d+|{re.escape(str(state_dir(prefix)))}/.*")
    with open("/proc/self/mountinfo") as f:
        return [mnt for mnt in (line.split()[4] for line in f) if pat.fullmatch(mnt)]


def leftovers(prefix: str = "vbtb") -> list[str]:
    """What of testbed `prefix` is still on this machine; empty after a clean `down`."""
    items = [f"netns {n}" for n in _namespaces(prefix)]
    items += [f"link {n}" for n in _links(prefix)]
    for pid in testbed_pids(prefix):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        items.append(f"process {pid} {cmd}")
    items += [f"mount {m}" for m in _mounts(prefix)]
    if state_dir(prefix).exists():
        items.append(f"state dir {state_dir(prefix)}")
    return items


# -- check / down ---------------------------------------------------------------------------------

def check() -> list[str]:
    """Problems that stop `up` here, each with its fix; empty when the testbed can run."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root: network namespaces need root (run as root or with sudo)")
    for tool, pkg in (("ip", "iproute2"), ("tc", "iproute2"), ("unshare", "util-linux"),
                      ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        if not shutil.which(tool):
            problems.append(f"'{tool}' is missing: apt-get install {pkg}")
    if not os.access(SSHD, os.X_OK):
        problems.append(f"{SSHD} is missing: apt-get install openssh-server")
    if not problems:
        probe = f"vbprobe-{os.getpid()}"
        res = procs.run(["ip", "netns", "add", probe], timeout=30)
        procs.run(["ip", "netns", "del", probe], timeout=30)
        if not res.ok:
            problems.append(f"the kernel refuses network namespaces (ip netns add: {res.stderr.strip()}); "
                            "the testbed needs a kernel and container that allow them")
    return problems


def _reap(prefix: str) -> None:
    for p in sshd_children.pop(prefix, []):
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def down(prefix: str = "vbtb", *, force: bool = False) -> list[str]:
    """Remove testbed `prefix`: processes, namespaces, links, state dir. Idempotent. Refuses while a
    live run uses it, unless `force`."""
    _check_prefix(prefix)
    if (runs := live_runs(prefix)) and not force:
        names = ", ".join(f"{r['run_id']} (user {r.get('user', '?')}, pid {r.get('pid')})" for r in runs)
        raise UserError(f"testbed {prefix} is in use by run {names}; removing it would fail that run's "
                        f"repetitions (made {owner_text(owner(prefix))})",
                        f"wait until the run ends, or remove it anyway: virtbench testbed down --name {prefix} --force")
    removed = [f"containers on {h}" for h in _remove_containers(prefix)]
    pids = testbed_pids(prefix)
    killed = list(pids)
    if pids:
        removed.append(f"{len(pids)} process(es)")
    # Kill before deleting namespaces: `ip netns del` only drops the name, the processes would stay.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = [p for p in pids if _alive(p)]
    _reap(prefix)
    _wait_reaped(killed)
    for mnt in reversed(_mounts(prefix)):
        if not mnt.startswith("/run/netns/"):
            procs.run(["umount", "-l", mnt], timeout=30)
            removed.append(f"mount {mnt}")
    for ns in _namespaces(prefix):
        procs.run(["ip", "netns", "del", ns], timeout=30)
        removed.append(f"netns {ns}")
    deadline = time.monotonic() + 3  # the kernel removes a dead namespace's veths a moment later
    while any("-h" in n for n in _links(prefix)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for link in _links(prefix):  # the veths went with their namespaces; the bridge remains
        procs.run(["ip", "link", "del", link], timeout=30)
        removed.append(f"link {link}")
    if state_dir(prefix).exists():
        shutil.rmtree(state_dir(prefix), ignore_errors=True)
        removed.append(f"state dir {state_dir(prefix)}")
    return removed


def _remove_containers(prefix: str) -> list[str]:
    """`podman rm -af` inside each running host (its own engine state): containers run in network
    namespaces of their own, so killing the host's processes would not reach them."""
    if not shutil.which("podman"):
        return []
    hosts = []
    for pidfile in sorted(state_dir(prefix).glob("hosts/h*/sshd.pid")):
        pid = pidfile.read_text().strip()
        if not pid.isdigit() or not _alive(int(pid)):
            continue
        res = procs.run(["nsenter", f"--target={pid}", "--mount", "--net", "podman", "--runtime", "runc",
                         "--cgroup-manager", "cgroupfs", "rm", "-af", "-t", "0"], timeout=120)
        if res.ok and res.stdout.strip():
            hosts.append(pidfile.parent.name)
    return hosts


def _wait_reaped(pids: list[int], timeout: float = 15) -> None:
    """Until every process killed is gone from the process table, not only dead: a zombie stays until
    its parent (often init, after `up` exited) reaps it, and a caller that looks right after `down`
    must not find it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent can reap it


# -- up ---------------------------------------------------------------------------------------------

# Where podman keeps its state (rootful): each testbed host gets its own copy of these.
ENGINE_DIRS = ("/var/lib/containers", "/run/containers", "/run/libpod", "/var/lib/cni", "/run/cni", "/run/netns")
SSHD_ADDRESS = re.compile(r"^ListenAddress (\S+)", re.M)
SSHD_CONFIG = """\
# virtbench testbed host {name}: written by virtbench, removed by `virtbench testbed down`
ListenAddress {addr}
Port 22
HostKey {hdir}/ssh_host_ed25519_key
AuthorizedKeysFile {state}/authorized_keys
PidFile {hdir}/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# the state dir is root's but not laid out like ~/.ssh
StrictModes no
# many parallel sessions: multiplexed connections and concurrent runs
MaxSessions 64
MaxStartups 64:30:128
UseDNS no
PrintMotd no
LogLevel VERBOSE
Subsystem sftp internal-sftp
"""


def _keygen(path: Path, comment: str) -> str:
    pair = ssh.make_keypair(path.parent, comment, name=path.name)
    path.chmod(0o600)
    return " ".join(pair.public_line.split()[:2])


def ssh_argv(state: Path, addr: str) -> list[str]:
    """ssh to a testbed host as root with the testbed's key and pinned host keys, nothing else."""
    return ssh.pinned_argv(f"root@{addr}", state / "id_ed25519", state / "known_hosts")


def _answers(state: Path, addr: str) -> ExecResult:
    return ssh.answers(f"root@{addr}", state / "id_ed25519", state / "known_hosts")


def _tc(ns: str | None, dev: str, delay_ms: float | None, rate_mbit: float | None) -> None:
    """Delay (netem) and/or rate (tbf) on the egress of one device."""
    tc = ["tc", "-n", ns] if ns else ["tc"]
    parent = ["root", "handle", "1:"]
    if delay_ms:
        res = procs.run([*tc, "qdisc", "add", "dev", dev, *parent, "netem", "delay", f"{delay_ms}ms",
                         "limit", "100000"], timeout=30)
        if not res.ok:
            raise UserError(
                f"this kernel has no netem qdisc (sch_netem: {res.stderr.strip()}), so the testbed cannot "
                "add delay between hosts here",
                "leave out --delay; a suite's delay_ms condition (a user-space proxy) still adds delay")
        parent = ["parent", "1:1", "handle", "10:"]
    if rate_mbit:
        burst = max(64 * 1024, int(rate_mbit * 1e6 / 8 / 100))  # >= one GSO packet, >= 10 ms of rate
        _run([*tc, "qdisc", "add", "dev", dev, *parent, "tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst),
              "latency", "200ms"])


def _start_sshd(hdir: Path, ns: str, disk_size: str | None) -> subprocess.Popen:
    data, tmp, home = hdir / "data", hdir / "tmp", hdir / "home"
    # The host's own /var/lib/virtbench-host, /tmp and home directory (root's), seen by sshd and every
    # session it starts: separate machines do not share a home, and this machine's own shell start-up
    # files (which may take ~0.1 s per command) stay out of the remote sessions.
    if disk_size:
        first = f"mount -t tmpfs -o size={disk_size},mode=0755 virtbench-host {HOST_DIR}"
    else:
        first = f"mount --bind {data} {HOST_DIR}"
    # Its own container engine state too: a container a host starts is that host's alone (its network
    # namespace file under /run/netns exists only in this mount namespace).
    engine = "; ".join(f"mount --bind {hdir / 'engine' / d.strip('/').replace('/', '-')} {d}" for d in ENGINE_DIRS)
    script = (f"set -e; {first}; mount --bind {tmp} /tmp; mount --bind {home} /root; {engine}; "
              f"exec {SSHD} -D -f {hdir}/sshd_config -E {hdir}/sshd.log")
    with open(hdir / "start.log", "wb") as log:
        # nsenter, not `ip netns exec`: the latter mounts a fresh /sys without the cgroup hierarchies,
        # and container runtimes on the host then fail ("no cgroup mount found in mountinfo").
        return subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--propagation",
                                 "private", "--", "sh", "-c", script],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def up(count: int, inventory_path, *, prefix: str = "vbtb", subnet: str | None = "10.214.0.0/24",
       delay_ms: float | None = None, rate_mbit: float | None = None, disk_size: str | None = None) -> Path:
    """Start `count` SSH hosts and write an Ansible-style inventory of them; returns its path.
    subnet None: the first free one (free_subnet)."""
    _check_prefix(prefix)
    if problems := check():
        raise UserError("the testbed cannot run here: " + "; ".join(problems))
    if count < 1:
        raise UserError("a testbed needs at least one host")
    if disk_size and not re.fullmatch(r"\d+[kKmMgG]?", disk_size):
        raise UserError(f"--disk-size {disk_size!r} is not a size like 64M or 1G")
    if left := leftovers(prefix):
        rec = owner(prefix)
        runs = live_runs(prefix)
        mine = rec is not None and rec.get("user") == user()
        raise UserError(f"testbed {prefix!r} already exists, made {owner_text(rec)}"
                        + (f", in use by run {', '.join(r['run_id'] for r in runs)}" if runs else "")
                        + f" ({', '.join(left[:3])}{' ...' if len(left) > 3 else ''})",
                        (f"remove it first: virtbench testbed down --name {prefix}" if mine or rec is None else
                         f"it is not yours: choose another name with --name (yours is {default_name()})"))
    subnet = subnet or free_subnet()
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError as exc:
        raise UserError(f"subnet {subnet!r}: {exc}") from None
    if net.version != 4:
        raise UserError(f"subnet {subnet} is not IPv4", "for example: --subnet 10.214.0.0/24")
    if net.num_addresses < 10 + count + 2:
        raise UserError(f"subnet {subnet} is too small for {count} hosts (they start at .11)")
    used = [n for n in (ipaddress.ip_interface(a).network for a in _addresses()) if n.overlaps(net)]
    if used:
        raise UserError(f"subnet {subnet} overlaps {used[0]}, already on this machine",
                        "choose another subnet")
    gw = net[1]
    addrs = [str(net[10 + k]) for k in range(1, count + 1)]
    state = state_dir(prefix)
    inventory_path = Path(inventory_path)
    try:
        STATE_ROOT.mkdir(mode=0o755, exist_ok=True)
        state.mkdir(mode=0o700)
        (state / "owner.json").write_text(json.dumps({"user": user(), "uid": os.getuid(), "host": socket.gethostname(),
                                                      "created": time.time(), "pid": os.getpid()}))
        user_pub = _keygen(state / "id_ed25519", f"virtbench-testbed-{prefix}")
        (state / "authorized_keys").write_text(user_pub + "\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # Debian's sshd privilege separation dir
        for d in (HOST_DIR, *ENGINE_DIRS):  # mount points for each host's own directories
            Path(d).mkdir(parents=True, exist_ok=True)

        bridge = f"{prefix}0"
        _run(["ip", "link", "add", bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{gw}/{net.prefixlen}", "dev", bridge])
        _run(["ip", "link", "set", bridge, "up"])

        host_keys, children = [], []
        sshd_children[prefix] = children
        for k, addr in enumerate(addrs, 1):
            ns, veth, hdir = f"{prefix}-{k}", f"{prefix}-h{k}", state / "hosts" / f"h{k}"
            for d in (hdir / "data", hdir / "tmp", hdir / "home",
                      *(hdir / "engine" / e.strip("/").replace("/", "-") for e in ENGINE_DIRS)):
                d.mkdir(parents=True)
            (hdir / "home").chmod(0o700)
            (hdir / "tmp").chmod(0o1777)
            host_keys.append(_keygen(hdir / "ssh_host_ed25519_key", host_name(prefix, k)))
            (hdir / "sshd_config").write_text(SSHD_CONFIG.format(name=host_name(prefix, k), addr=addr,
                                                                 hdir=hdir, state=state))
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run(["ip", "link", "set", veth, "master", bridge, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/{net.prefixlen}", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "route", "add", "default", "via", str(gw)])
            if delay_ms or rate_mbit:  # both directions: the bridge side's egress and eth0's
                _tc(None, veth, delay_ms, rate_mbit)
                _tc(ns, "eth0", delay_ms, rate_mbit)
            if disk_size:
                (hdir / "disk_size").write_text(disk_size)
            children.append(_start_sshd(hdir, ns, disk_size))
        (state / "known_hosts").write_text("".join(f"{a} {key}\n" for a, key in zip(addrs, host_keys)))
        _wait_all(state, addrs, children)
        _write_inventory(inventory_path, prefix, state, addrs, host_keys, delay_ms, rate_mbit)
    except BaseException:
        with procs.interrupts_held():
            down(prefix)
        raise
    return inventory_path


def stop_host(k: int, prefix: str = "vbtb") -> int:
    """Kill every process of host k (its sshd, the sessions it serves, what they started), as if the
    machine went down; its namespace stays. Returns how many processes were killed (fault tests)."""
    res = procs.run(["ip", "netns", "pids", f"{prefix}-{k}"], timeout=30)
    pids = [int(p) for p in res.stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap(prefix)
    return len(pids)


def start_host(k: int, prefix: str = "vbtb") -> None:
    """Start host k's sshd again after stop_host (its files are kept; a tmpfs disk comes back empty)."""
    state = state_dir(prefix)
    hdir = state / "hosts" / f"h{k}"
    if not hdir.is_dir():
        raise UserError(f"testbed {prefix!r} has no host {k}")
    size = (hdir / "disk_size").read_text().strip() if (hdir / "disk_size").exists() else None
    child = _start_sshd(hdir, f"{prefix}-{k}", size or None)
    sshd_children.setdefault(prefix, []).append(child)
    addr = SSHD_ADDRESS.search((hdir / "sshd_config").read_text()).group(1)
    _wait_all(state, [addr], [child])


def _addresses() -> list[str]:
    out = procs.run(["ip", "-o", "-4", "addr", "show"], timeout=30).stdout
    return re.findall(r"inet (\S+)", out)


def _wait_all(state: Path, addrs: list[str], children: list[subprocess.Popen], timeout: float = 15) -> None:
    """Until every host runs a command over ssh with the pinned host key; all hosts at once."""
    failures: dict[int, str] = {}

    def wait(i: int) -> None:
        deadline = time.monotonic() + timeout
        while True:
            res = _answers(state, addrs[i])
            if res.ok:
                return
            rc = children[i].poll()
            if rc is not None or time.monotonic() > deadline:
                failures[i] = (f"sshd exited with code {rc}; " if rc is not None else "") + res.stderr.strip()
                return
            time.sleep(0.1)

    procs.fan_out(wait, len(addrs))
    if failures:
        i = min(failures)
        hdir = state / "hosts" / f"h{i + 1}"
        raise UserError(f"testbed host {addrs[i]} did not answer over ssh: {failures[i]}\n"
                        f"sshd start log:\n{_tail(hdir / 'start.log')}\nsshd log:\n{_tail(hdir / 'sshd.log')}")


def _write_inventory(path: Path, prefix: str, state: Path, addrs: list[str], host_keys: list[str],
                     delay_ms, rate_mbit) -> None:
    q = json.dumps  # JSON strings are valid YAML strings
    lines = [f"# virtbench testbed {q(prefix)}: written by `virtbench testbed up`.",
             f"# These {SHARED_NOTE}.",
             "all:", "  vars:",
             f"    virtbench_testbed: {q(prefix)}",
             f"    virtbench_testbed_delay_ms: {delay_ms or 0:g}",
             f"    virtbench_testbed_rate_mbit: {rate_mbit or 0:g}",
             "  children:", "    testbed:", "      hosts:"]
    for k, (addr, key) in enumerate(zip(addrs, host_keys), 1):
        lines += [f"        {host_name(prefix, k)}:",
                  f"          ansible_host: {addr}",
                  "          ansible_port: 22",
                  "          ansible_user: root",
                  f"          ansible_ssh_private_key_file: {state / 'id_ed25519'}",
                  f"          virtbench_host_key: {q(key)}",
                  f"          virtbench_dir: {HOST_DIR}",
                  f"          virtbench_netns: {prefix}-{k}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def status(prefix: str = "vbtb", probe: bool = True) -> dict:
    """The testbed's hosts from its state dir and (probe) whether each still answers over ssh."""
    state = state_dir(prefix)
    kh = state / "known_hosts"
    hosts = []
    if kh.exists():
        for k, line in enumerate(kh.read_text().splitlines(), 1):
            addr = line.split()[0]
            ok = _answers(state, addr).ok if probe else None
            hosts.append({"name": host_name(prefix, k), "address": addr, "netns": f"{prefix}-{k}", "answers": ok})
    return {"name": prefix, "hosts": hosts, "leftovers": leftovers(prefix) if not hosts else [],
            "owner": owner(prefix), "runs": live_runs(prefix)}
