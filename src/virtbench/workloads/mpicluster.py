"""Clusters of instances for MPI: passwordless SSH between them, a hostfile, mpirun from instance 0.

A workload that asks for N instances of role "node" gets them from the runner and calls
`cluster.get(instances)`; the set-up happens once per instance set and is cached (per instance for
sshd and the key, per set for the hostfile), so repetitions only pay for `mpirun` itself.

Two modes:
- local: the instances share one operating system (all `host` instances, or a single instance of
  any kind). mpirun runs inside instance 0 with every rank there; no SSH at all. Host "instances"
  are logical: ranks are still placed on them (their storage directories, the placement record).
- ssh: several containers or VMs. One key pair per process (run), generated with ssh-keygen in a
  private temporary directory on this machine, copied into every instance and deleted here at once;
  each instance gets its own host key (ssh-keygen inside it) and an sshd on SSH_PORT started from
  the guest image's openssh-server. mpirun on instance 0 reaches the others with
  `plm_rsh_args "-p 2222 -i KEY ..."`, no tree spawn (only instance 0 needs to dial), and TCP
  restricted to the subnet of instance 0's address (the container bridge), for both Open MPI's
  out-of-band channel and its byte-transfer layer. Instances without an address their peers can
  reach (VMs behind QEMU's user-mode network) are first joined by their driver's
  `connect_cluster` (VMs: a private segment, see drivers/vm/driver.py); `cluster_network` records how.

Every mpirun uses `--bind-to none`: instances on one machine cannot see each other's bindings, and
Open MPI would pin the first rank of every container to core 0 (measured: 5 ms PingPong latency
instead of 12 us). Same flags everywhere, so host and container results stay comparable.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..drivers.base import ClusterNetworking, Instance
from ..errors import MissingTool, UserError, WorkloadFailed
from ..machines.ssh import make_keypair
from ..model import ExecResult

SSH_PORT = 2222
# Between a cluster's instances host keys are checked too: each sshd's key (made inside its instance)
# is read back and pinned in a known_hosts file next to the launcher's key.
SSH_OPTIONS = ("-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
               "-o", "ConnectTimeout=10")
SETUP_TIMEOUT = 120.0
# Ranks x threads per instance above this many times its vCPUs is refused as absurd (Workload.validate
# and capacity checks); above 1x the run is marked oversubscribed and warned about.
OVERSUBSCRIBE_LIMIT = 4
MAP_BY = ("slot", "node")  # slot: fill instance 0 first (block); node: round robin (cyclic)

_lock = threading.RLock()
_keypair: tuple[bytes, bytes] | None = None
_clusters: dict[tuple[str, ...], Cluster] = {}
# What this module learned of each instance, kept here (not as attributes on the instance), gone with it:
_vcpus_of: weakref.WeakKeyDictionary[Instance, int] = weakref.WeakKeyDictionary()  # its vCPUs, read once
_sshd_in: weakref.WeakSet[Instance] = weakref.WeakSet()  # instances whose cluster sshd runs

# Started inside each instance by `sh -c SCRIPT sh DIR PORT`: a host key of its own, then sshd.
_SSHD_SCRIPT = r"""
set -e
dir=$1; port=$2
mkdir -p /run/sshd
chmod 700 "$dir"; chmod 600 "$dir/id" "$dir/authorized_keys"
[ -f "$dir/host_key" ] || ssh-keygen -q -t ed25519 -N '' -C virtbench-host -f "$dir/host_key"
if [ -f "$dir/sshd.pid" ] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then exit 0; fi
rm -f "$dir/sshd.pid"
/usr/sbin/sshd -p "$port" -h "$dir/host_key" -o "AuthorizedKeysFile=$dir/authorized_keys" \
  -o "PidFile=$dir/sshd.pid" -o StrictModes=no -o PermitRootLogin=prohibit-password \
  -o PasswordAuthentication=no -o KbdInteractiveAuthentication=no -o UsePAM=no -o UseDNS=no \
  -o MaxStartups=100:30:200 -E "$dir/sshd.log"
# sshd detaches before it binds: its pid file appears only once it listens.
i=0; while [ ! -s "$dir/sshd.pid" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
[ -s "$dir/sshd.pid" ] && exit 0
echo "sshd did not start on port $port (is the port taken by another process?):" >&2
tail -n 3 "$dir/sshd.log" >&2; exit 1
"""

# Open MPI resolves "localhost" and the node's own name; a guest without /etc/hosts entries for them
# (the VM guest: no /etc/hosts, no reachable DNS) hangs in resolver time-outs. Added when missing.
_HOSTS_SCRIPT = r"""
h=$(hostname)
grep -qsE "^[^#]*[[:space:]]localhost([[:space:]]|$)" /etc/hosts || echo "127.0.0.1 localhost" >> /etc/hosts
grep -qsE "^[^#]*[[:space:]]$h([[:space:]]|$)" /etc/hosts || echo "127.0.1.1 $h" >> /etc/hosts
"""

# Memory-pressure counters, read inside an instance before and after a run: key=value lines.
# meminfo is the instance's view (a VM's own; a container sees the machine's), vmstat counters are
# the kernel's (machine-wide in a container), cgroup files are the instance's own limit (v2 or v1).
_MEMORY_SCRIPT = r"""
while read -r k v _; do case $k in MemAvailable:|SwapTotal:|SwapFree:) echo "${k%:}_kb=$v";; esac; done < /proc/meminfo
while read -r k v; do case $k in pswpin|pswpout|oom_kill) echo "vmstat_$k=$v";; esac; done < /proc/vmstat
if [ -r /sys/fs/cgroup/memory.events ]; then
  while read -r k v; do echo "cgroup_$k=$v"; done < /sys/fs/cgroup/memory.events
elif [ -r /sys/fs/cgroup/memory/memory.oom_control ]; then
  while read -r k v; do case $k in oom_kill) echo "cgroup_oom_kill=$v";; esac; done \
    < /sys/fs/cgroup/memory/memory.oom_control
  [ -r /sys/fs/cgroup/memory/memory.failcnt ] && echo "cgroup_max=$(cat /sys/fs/cgroup/memory/memory.failcnt)"
fi
exit 0
"""


@dataclass
class Run:
    """What one mpirun produced, plus where its ranks ran."""

    result: ExecResult
    argv: list[str]  # the whole mpirun command
    options: list[str]  # mpirun and its options, without the program
    placement: list[dict[str, Any]]
    oversubscribed: bool
    machine_busy: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        return self.result.ok


@dataclass
class Cluster:
    instances: list[Instance]
    mode: str  # local | ssh
    subnet: str | None = None
    vcpus: list[int] = field(default_factory=list)
    network: dict[str, Any] | None = None  # how the instances reach each other (ssh mode)
    _hostfiles: dict[tuple[int, str], str] = field(default_factory=dict)

    @property
    def launcher(self) -> Instance:
        return self.instances[0]

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.instances]

    # -- placement -----------------------------------------------------------------------------
    def placement(self, ranks: int, map_by: str = "slot") -> list[dict[str, Any]]:
        """Which ranks run on which instance: slot = blocks of ranks/N, node = round robin."""
        n = len(self.instances)
        if ranks % n:
            raise ValueError(f"{ranks} ranks do not divide evenly over {n} instances")
        per = ranks // n
        owner = [r // per if map_by == "slot" else r % n for r in range(ranks)]
        return [{"instance": inst.name, "address": inst.address, "ranks": [r for r in range(ranks) if owner[r] == i]}
                for i, inst in enumerate(self.instances)]

    # -- running ---------------------------------------------------------------------------------
    def mpirun_argv(self, argv: list[str], ranks: int, *, threads: int = 1, map_by: str = "slot",
                    oversubscribe: bool = False, passive_wait: bool = False, transport: str = "auto",
                    env: dict[str, str] | None = None) -> list[str]:
        if map_by not in MAP_BY:
            raise ValueError(f"map_by must be one of {', '.join(MAP_BY)}")
        per = ranks // len(self.instances)
        cmd = ["mpirun", "--allow-run-as-root", "-np", str(ranks), "--hostfile", self._hostfile(per),
               "--map-by", map_by, "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads}"]
        if oversubscribe:
            cmd.append("--oversubscribe")
        if passive_wait:
            # Threads that wait by spinning take the cores the other ranks' threads need when there are
            # more threads than cores: measured 30x slower for SP-MZ class S at 1 x 2 on a loaded 2-core
            # machine. Waiting threads sleep instead (recorded in the mpirun options of every sample).
            cmd += ["-x", "OMP_WAIT_POLICY=passive"]
        for k, v in (env or {}).items():  # every rank's environment
            cmd += ["-x", f"{k}={v}"]
        if self.mode == "ssh":
            key = f"{_ssh_dir(self.launcher)}/id"
            cmd += ["--mca", "plm_rsh_agent", "ssh",
                    "--mca", "plm_rsh_args", " ".join(("-p", str(SSH_PORT), "-i", key, *ssh_options(self.launcher))),
                    "--mca", "plm_rsh_no_tree_spawn", "1",
                    "--mca", "oob_tcp_if_include", self.subnet, "--mca", "btl_tcp_if_include", self.subnet]
        if transport == "tcp":  # no shared memory between ranks: every message takes the TCP stack
            cmd += ["--mca", "btl", "self,tcp"]
        if not self.launcher.traits.host_process:
            # Ranks sharing a container use shared memory; its single-copy path (CMA,
            # process_vm_readv) is refused under the default seccomp profile without CAP_SYS_PTRACE.
            cmd += ["--mca", "btl_vader_single_copy_mechanism", "none"]
        return cmd + [str(a) for a in argv]

    def oversubscribed(self, ranks: int, threads: int) -> bool:
        """More busy threads than vCPUs: per instance, or on the one OS a local host cluster shares."""
        if self.mode == "local" and self.launcher.traits.host_process:
            return ranks * threads > self.vcpus[0]
        per = ranks // len(self.instances)
        return any(per * threads > v for v in self.vcpus)

    def machine_busy(self, ranks: int, threads: int) -> tuple[int, int] | None:
        """(busy threads, cores) when the instances on one machine ask for more than its cores have:
        counted on the machine each instance runs on, this one or another."""
        if not all(i.traits.machine_cores for i in self.instances):
            return None
        counts: dict[int, list] = {}
        for inst in self.instances:
            counts.setdefault(id(inst.machine), [inst.machine, 0])[1] += 1
        for machine, n in counts.values():
            busy = ranks * threads * n // len(self.instances)
            cores = len(machine.allowed_cpus())
            if busy > cores:
                return busy, cores
        return None

    def run(self, argv: list[str], ranks: int, *, threads: int = 1, map_by: str = "slot",
            timeout: float | None = None, transport: str = "auto", env: dict[str, str] | None = None) -> Run:
        over, busy = self.oversubscribed(ranks, threads), self.machine_busy(ranks, threads)
        cmd = self.mpirun_argv(argv, ranks, threads=threads, map_by=map_by, oversubscribe=over,
                               passive_wait=threads > 1 and (over or busy is not None), transport=transport,
                               env=env)
        res = self.launcher.exec(cmd, timeout=timeout)
        return Run(res, cmd, cmd[:len(cmd) - len(argv)], self.placement(ranks, map_by), over, busy)

    def metadata(self, run: Run, threads: int) -> dict[str, Any]:
        """What every sample of this run records about the cluster."""
        return {"cluster_mode": self.mode, "cluster_instances": self.names, "placement": run.placement,
                "ranks_per_instance": len(run.placement[0]["ranks"]), "threads_per_rank": threads,
                "instance_vcpus": self.vcpus, "oversubscribed": run.oversubscribed,
                "machine_oversubscribed": run.machine_busy is not None,
                "oversubscription": self._oversubscription(run, threads),
                "mpirun": " ".join(run.options), **({"cluster_network": self.network} if self.network else {})}

    def _oversubscription(self, run: Run, threads: int) -> str | None:
        """The sentence a result carries when its ranks had to share CPUs."""
        ranks = sum(len(p["ranks"]) for p in run.placement)
        per = len(run.placement[0]["ranks"])
        if run.oversubscribed and self.mode == "local" and self.launcher.traits.host_process:
            return (f"oversubscribed: {ranks} rank(s) x {threads} thread(s) on this machine's {self.vcpus[0]} "
                    "cores; ranks wait for each other's CPU")
        if run.oversubscribed:
            return (f"oversubscribed: {per} rank(s) x {threads} thread(s) per instance on {min(self.vcpus)} "
                    "vCPU(s); ranks wait for each other's CPU")
        if run.machine_busy:
            busy, cores = run.machine_busy
            return (f"oversubscribed machine: {busy} busy threads in the instances on this machine's {cores} "
                    "cores, so ranks share cores (a scaled-down cluster on one machine)")
        return None

    # -- memory pressure -------------------------------------------------------------------------
    def memory_snapshot(self) -> dict[str, dict[str, int]]:
        """Memory counters per instance (one read for local clusters: one operating system)."""
        targets = self.instances if self.mode == "ssh" else self.instances[:1]
        out = {}
        for inst in targets:
            res = inst.exec(["sh", "-c", _MEMORY_SCRIPT], timeout=60)
            out[inst.name] = parse_counters(res.stdout) if res.ok else {}
        return out

    # -- set-up ------------------------------------------------------------------------------------
    def _hostfile(self, per: int) -> str:
        with _lock:
            key = (per, self.mode)
            if key not in self._hostfiles:
                if self.mode == "local":
                    text = f"localhost slots={per * len(self.instances)}\n"
                else:
                    text = "".join(f"{i.address} slots={per}\n" for i in self.instances)
                digest = hashlib.sha1(text.encode()).hexdigest()[:10]
                path = f"{_ssh_dir(self.launcher)}/hostfile-{digest}"
                res = self.launcher.exec(["sh", "-c", 'mkdir -p "${1%/*}" && cat > "$1"', "sh", path],
                                         stdin=text.encode(), timeout=60)
                _check(res, f"writing the hostfile in {self.launcher.name}")
                self._hostfiles[key] = path
            return self._hostfiles[key]


def swap_room(snapshot: dict[str, dict[str, int]]) -> int | None:
    """Bytes each instance can give its ranks counting its swap (MemAvailable + SwapFree; the smallest
    instance's), from a memory_snapshot; None when an instance has no swap."""
    nodes = list(snapshot.values())
    if not nodes or not all(c.get("SwapTotal_kb", 0) > 0 and "MemAvailable_kb" in c for c in nodes):
        return None
    return min((c["MemAvailable_kb"] + c.get("SwapFree_kb", 0)) * 1024 for c in nodes)


def parse_counters(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.strip().partition("=")
        if sep and v.strip().lstrip("-").isdigit():
            out[k] = int(v)
    return out


def memory_pressure(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Per instance: what changed between two snapshots, and the warnings it deserves (pure)."""
    per, warnings = {}, []
    for name, b in before.items():
        a = after.get(name) or {}
        if not a or not b:
            continue

        def delta(key: str) -> int:
            return max(0, a.get(key, 0) - b.get(key, 0)) if key in a and key in b else 0

        d = {"swap_used_kb": max(0, b.get("SwapFree_kb", 0) - a.get("SwapFree_kb", 0)),
             "swapped_out_pages": delta("vmstat_pswpout"), "oom_kills_instance": delta("cgroup_oom_kill"),
             "oom_kills_machine": delta("vmstat_oom_kill"), "limit_hits": delta("cgroup_max"),
             "mem_available_kb_after": a.get("MemAvailable_kb")}
        per[name] = d
        what = []
        if d["oom_kills_instance"]:
            what.append(f"{d['oom_kills_instance']} OOM kill(s) in the instance")
        elif d["oom_kills_machine"]:
            what.append(f"{d['oom_kills_machine']} OOM kill(s) on the machine")
        if d["swap_used_kb"] or d["swapped_out_pages"]:
            what.append(f"swap use grew by {d['swap_used_kb'] / 1024:.0f} MiB "
                        f"({d['swapped_out_pages']} pages swapped out)")
        if d["limit_hits"]:
            what.append(f"its memory limit was hit {d['limit_hits']} time(s) (reclaim under the limit)")
        if what:
            warnings.append(f"memory pressure on {name}: {'; '.join(what)}: the result reflects a lack of "
                            "memory, not the platform's speed (study 000's 9657 s MG run was swapping); give the "
                            "instances more memory or use a smaller class or dataset")
    return {"memory_pressure": bool(warnings), "memory": per, "warnings": warnings}


# -- building clusters -------------------------------------------------------------------------------

def get(instances: list[Instance]) -> Cluster:
    """The cluster over these instances, set up on first use and cached by their names."""
    if not instances:
        raise ValueError("a cluster needs at least one instance")
    key = tuple(i.name for i in instances)
    with _lock:
        cached = _clusters.get(key)
        # The runner replaces a dead instance by a new object (and name), so identity is enough here;
        # no engine round trip per repetition.
        if cached and all(a is b for a, b in zip(cached.instances, instances)) and not any(map(_gone, instances)):
            return cached
        for stale in [k for k, c in _clusters.items() if any(map(_gone, c.instances))]:
            del _clusters[stale]
        cluster = _build(list(instances))
        _clusters[key] = cluster
        return cluster


def _gone(inst: Instance) -> bool:
    return inst.torn_down


def _build(instances: list[Instance]) -> Cluster:
    local = len(instances) == 1 or all(i.traits.host_process for i in instances)
    network = None if local else connect(instances)
    vcpus = [_vcpus(i) for i in instances]
    for inst in instances:
        if not inst.traits.real_machine:  # never touch a real machine's files
            _check(inst.exec(["sh", "-c", _HOSTS_SCRIPT], timeout=60), f"checking /etc/hosts in {inst.name}")
    if local:
        return Cluster(instances, "local", None, vcpus)
    missing = [i.name for i in instances if not i.address]
    if missing:
        raise WorkloadFailed(f"{', '.join(missing)} have no address their peers can reach ({instances[0].env.driver} "
                             "driver): an MPI cluster of several instances needs instances that reach each other; "
                             "use instances = 1 in this environment")
    for inst in instances:
        _setup_ssh(inst)
    _pin_host_keys(instances)
    cluster = Cluster(instances, "ssh", _subnet(instances[0]), vcpus)
    cluster.network = network or {"mechanism": f"{instances[0].env.driver} network (the driver's own addresses)",
                                  "subnet": cluster.subnet}
    for peer in instances[1:]:
        _probe(cluster.launcher, peer)
    return cluster


def connect(instances: list[Instance]) -> dict[str, Any] | None:
    """Drivers whose instances cannot reach each other by themselves (VMs on user-mode networking)
    offer `connect_cluster(instances)` (ClusterNetworking): a private segment with an address per instance."""
    driver = instances[0].driver
    if not isinstance(driver, ClusterNetworking) or any(i.driver is not driver for i in instances):
        return None
    return driver.connect_cluster(instances)


def _vcpus(inst: Instance) -> int:
    cached = _vcpus_of.get(inst)
    if cached is None:
        cached = _vcpus_of[inst] = inst.vcpus
    return cached


def _ssh_dir(inst: Instance) -> str:
    return f"{inst.scratch_dir()}/vb-mpi"


def keypair() -> tuple[bytes, bytes]:
    """(private, public) key for this process's clusters; nothing of it stays on this machine's disk."""
    global _keypair
    with _lock:
        if _keypair is None:
            if not shutil.which("ssh-keygen"):
                raise MissingTool("ssh-keygen", "openssh-client", "it makes the key MPI clusters log in with")
            tmp = Path(tempfile.mkdtemp(prefix="virtbench-ssh-"))
            try:
                try:
                    pair = make_keypair(tmp, "virtbench-cluster", name="id")
                except UserError as e:
                    raise WorkloadFailed(str(e)) from e
                _keypair = (pair.private.read_bytes(), Path(f"{pair.private}.pub").read_bytes())
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return _keypair


def _setup_ssh(inst: Instance) -> None:
    """Key, authorized_keys, own host key and a running sshd in one instance (once per instance)."""
    if inst in _sshd_in:
        return
    private, public = keypair()
    d = _ssh_dir(inst)
    _check(inst.exec(["mkdir", "-p", d], timeout=60), f"making {d} in {inst.name}")
    tmp = Path(tempfile.mkdtemp(prefix="virtbench-ssh-"))
    try:
        os.chmod(tmp, 0o700)
        for name, data in (("id", private), ("authorized_keys", public)):
            (tmp / name).write_bytes(data)
            os.chmod(tmp / name, 0o600)
            inst.inside.put(tmp / name, f"{d}/{name}", mode=0o600)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _check(inst.exec(["sh", "-c", _SSHD_SCRIPT, "sh", d, str(SSH_PORT)], timeout=SETUP_TIMEOUT),
           f"starting sshd in {inst.name}")
    _sshd_in.add(inst)


def ssh_options(inst: Instance) -> tuple[str, ...]:
    """ssh options from one instance of a cluster to the others (their host keys pinned)."""
    return (*SSH_OPTIONS, "-o", f"UserKnownHostsFile={_ssh_dir(inst)}/known_hosts")


def _pin_host_keys(instances: list[Instance]) -> None:
    """known_hosts in every instance: each peer's sshd host key, under its address and host name."""
    lines = []
    for inst in instances:
        res = inst.exec(["cat", f"{_ssh_dir(inst)}/host_key.pub"], timeout=60)
        _check(res, f"reading the sshd host key of {inst.name}")
        kind, key = res.stdout.split()[:2]
        names = dict.fromkeys(n for n in (inst.address, inst.hostname) if n)
        lines.append(",".join(f"[{n}]:{SSH_PORT}" for n in names) + f" {kind} {key}\n")
    for inst in instances:
        res = inst.exec(["sh", "-c", 'cat > "$1"', "sh", f"{_ssh_dir(inst)}/known_hosts"],
                        stdin="".join(lines).encode(), timeout=60)
        _check(res, f"writing known_hosts in {inst.name}")


def _probe(launcher: Instance, peer: Instance) -> None:
    """Passwordless SSH from the launcher to the peer works (a few tries while sshd comes up)."""
    argv = ["ssh", "-p", str(SSH_PORT), "-i", f"{_ssh_dir(launcher)}/id", *ssh_options(launcher), peer.address, "true"]
    res = None
    for _ in range(5):
        res = launcher.exec(argv, timeout=30)
        if res.ok:
            return
        launcher.exec(["sleep", "0.5"], timeout=10)
    raise WorkloadFailed(f"SSH from {launcher.name} to {peer.name} ({peer.address}:{SSH_PORT}) does not work: "
                         f"{res.describe_failure()}")


def _subnet(inst: Instance) -> str:
    """The network (CIDR) of the instance's address, from `ip -o -4 addr` inside it."""
    res = inst.exec(["ip", "-o", "-4", "addr", "show"], timeout=60)
    _check(res, f"reading the addresses of {inst.name}")
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+/\d+)", res.stdout):
        iface = ipaddress.ip_interface(m.group(1))
        if str(iface.ip) == inst.address:
            return str(iface.network)
    raise WorkloadFailed(f"{inst.name} has no interface with its address {inst.address}: {res.stdout.strip()}")


def _check(res: ExecResult, what: str) -> None:
    if not res.ok:
        raise WorkloadFailed(f"{what} failed: {res.describe_failure()}", res.stdout[-2000:] + res.stderr[-2000:])


def tool_error(res: ExecResult, tool: str) -> str:
    """The tool's own error line (`vb-npb: ...`) rather than mpirun's banner around it."""
    lines = [ln.strip() for ln in res.stderr.splitlines() if ln.strip().startswith(f"{tool}:")]
    head = res.describe_failure().split(":")[0]
    return f"{head}: {lines[0]}" if lines else res.describe_failure()


def dumps_record(record: dict[str, Any]) -> str:
    """The line a workload appends to the tool's output so the pure parser sees the cluster facts."""
    return json.dumps({"virtbench": record}, sort_keys=True)
