"""The experiments of `virtbench reproduce` as data: each names a suite, the environments and cells
of it that bear on the studies' findings, and its tiers (scales) with a prior estimate each, in
priority order (reproduce.py plans and runs them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Tier:
    label: str                          # what this scale is, in words
    repeat: int                         # repetitions per cell and environment
    estimate_s: float                   # prior: seconds on a busy 2-core machine (TCG only)
    params: dict[str, Any] = field(default_factory=dict)      # overrides (workloads without the key ignore it)
    select: dict[str, Any] = field(default_factory=dict)      # extra cell filter: param -> allowed values
    conditions: tuple[dict[str, Any], ...] = ()               # replaces each cell's condition by each of these
    boot: dict[str, Any] = field(default_factory=dict)        # boot grids: sizes_gb, scale, concurrency
    # More repetitions of the largest scale where an interval reached both sides of a tolerance: the
    # planner takes it only once every kept experiment is at its largest ordinary scale.
    extra: bool = False


@dataclass(frozen=True)
class Experiment:
    id: str
    study: str
    title: str
    suite: str                          # file name in suites/
    envs: tuple[str, ...] = ()          # the suite's environment names (the first is the baseline if no host)
    workload: str = ""                  # which [[workloads]] entries: by name
    where: dict[str, Any] = field(default_factory=dict)       # cell filter: param -> allowed values
    condition_where: dict[str, Any] = field(default_factory=dict)
    tiers: tuple[Tier, ...] = ()
    needs: tuple[str, ...] = ()         # kvm, cluster, nfs (see studies/claims.py)
    kvm_envs: tuple[str, ...] = ()      # environments added where KVM works (VMs under TCG count for nothing)
    boot: bool = False                  # a boot grid (`virtbench boot`) rather than a workload suite
                                        # (envs: its driver, the vm one when not given)
    same: tuple[str, ...] = ()          # params that must be equal in a kept cell (ranks = instances)
    note: str = ""                      # what differs from the study, beyond the suite's own comments
    # Instances on separate machines are the study's own layout: with --inventory the inventory's SSH
    # hosts (environment `hosts`, one instance per host) and with --cloud the cloud's instances
    # (environment `cloud`, the study's m1.small) also run every cell this environment runs.
    remote_like: str = ""
    remote_hosts: int = 0               # hosts the largest cell needs (one instance per host)

    @property
    def top(self) -> int:
        """The index of its largest ordinary tier (the extra ones, more repetitions, come after it)."""
        return max(i for i, t in enumerate(self.tiers) if not t.extra)


REMOTE_ENV = "hosts"  # the environment of the inventory's SSH hosts in a reproduce run
CLOUD_ENV = "cloud"   # the environment of the --cloud settings' instances
PLATFORM_ENVS = (REMOTE_ENV, CLOUD_ENV)
CLOUD_SHAPE = "m1.small"  # the studies' instance type (EC2 and Eucalyptus name it; shape_map maps it elsewhere)


def _iscsi(*delays: float, **extra: Any) -> tuple[dict[str, Any], ...]:
    return tuple({"storage": "iscsi", "delay_ms": d, **extra} for d in delays)


# In priority order: what the budget keeps first. Estimates are priors (seconds, busy 2-core machine).
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("003-hpa", "003", "HPA on local disk, iSCSI and iSCSI behind delay; CPU while it runs",
               "vcluster-hpa.toml", ("host",), "hpa", {"transactions": [400000, 1000000]},
               tiers=(Tier("400k transactions (1/20 of 8M), local / iSCSI / iSCSI + 50 ms, 3 repetitions", 3, 130,
                           select={"transactions": [400000]},
                           conditions=({"storage": "local"}, *_iscsi(0, 50))),
                      Tier("400k transactions, local / iSCSI / iSCSI + 10, 30, 50 ms, 3 repetitions", 3, 220,
                           select={"transactions": [400000]},
                           conditions=({"storage": "local"}, *_iscsi(0, 10, 30, 50))),
                      Tier("1M transactions (1/20 of 20M), local / iSCSI / iSCSI + 10, 30, 50 ms, 3 repetitions",
                           3, 420, select={"transactions": [1000000]},
                           conditions=({"storage": "local"}, *_iscsi(0, 10, 30, 50))),
                      # 3 left both HPA ratios open (iSCSI / local 1.55x [1.06, 1.84], 50 ms / none 0.714x
                      # [0.628, 1.59] in the 60-minute run of 27 Nov)
                      Tier("1M transactions, local / iSCSI / iSCSI + 10, 30, 50 ms, 6 repetitions", 6, 840,
                           select={"transactions": [1000000]},
                           conditions=({"storage": "local"}, *_iscsi(0, 10, 30, 50)), extra=True)),
               note="system A (the dom0s) only: the host with 4 logical instances; the suite's storage conditions "
                    "(local, iSCSI, iSCSI + delay) as the study ran them"),
    Experiment("004-fio", "004", "fio 64 MiB-block read max latency over host-internal networking",
               "nfs-dd.toml", ("host", "container"), "fio", condition_where={"storage": ["nbd"]},
               tiers=(Tier("256 MiB file (1/8 of 2 GB), NBD target on a server link, 3 repetitions", 3, 50),
                      Tier("256 MiB file, 5 repetitions (the study: 5)", 5, 70),
                      # 5 left the container / host max latency open (1.25x [0.546, 1.64], 27 Nov)
                      Tier("256 MiB file, 10 repetitions", 10, 140, extra=True)),
               kvm_envs=("vm",),
               note="the NBD target stands in for the study's NFS server on the same host (no kernel NFS client "
                    "here); NFS cells left out"),
    Experiment("003-bonnie", "003", "bonnie++ write: local, iSCSI, iSCSI + 10 ms one-way delay (dom0)",
               "remote-storage-delay.toml", ("host",), "bonnie", condition_where={"delay_ms": [None, 0, 10]},
               tiers=(Tier("suite sizes (1 GiB local, 256 MiB iSCSI, 64 MiB delayed), 2 repetitions", 2, 180),
                      Tier("suite sizes, 3 repetitions", 3, 260)),
               note="dom0 = the host; the 20-50 ms cells are left out (the finding is about 10 ms)"),
    Experiment("002-link", "002", "bonnie++ over iSCSI with the target's link at 1 GbE and at 10 GbE",
               "ipsan.toml", ("host",), "bonnie", condition_where={"storage": ["iscsi"]},
               tiers=(Tier("512 MiB file (1/4 of 2 GiB), 1000 / 10000 Mbit/s, 2 repetitions", 2, 140,
                           params={"scale": 0.25},
                           conditions=({"storage": "iscsi", "rate_mbit": 1000}, {"storage": "iscsi", "rate_mbit": 10000})),
                      Tier("1 GiB file (the suite's 1/2), 1000 / 10000 Mbit/s, 3 repetitions", 3, 360,
                           conditions=({"storage": "iscsi", "rate_mbit": 1000}, {"storage": "iscsi", "rate_mbit": 10000})),
                      # 3 left 10 GbE / 1 GbE open at 60 min (1.09x [0.541, 1.8]); 1.4x [1.21, 1.91] at 30 min
                      Tier("1 GiB file, 1000 / 10000 Mbit/s, 6 repetitions", 6, 720,
                           conditions=({"storage": "iscsi", "rate_mbit": 1000}, {"storage": "iscsi", "rate_mbit": 10000}),
                           extra=True)),
               note="the study's GbE and 10 GbE links as bandwidth caps on the target's link (normal kernel = host)"),
    Experiment("000-npb-ep", "000", "NPB EP on 1 and 2 one-vCPU instances",
               "nii-npb.toml", ("c-small",), "npb", {"kernel": ["ep"], "class": ["W"], "instances": [1, 2],
                                                    "ranks": [1, 2]},
               same=("ranks", "instances"), remote_like="c-small", remote_hosts=2,
               tiers=(Tier("class W, 1 and 2 instances (1/8 of 2..16), 3 repetitions", 3, 65),
                      Tier("class W, 5 repetitions", 5, 95),
                      Tier("class A (8x W's work: W's 1 s left MPI start-up noise), 5 repetitions", 5, 200,
                           params={"class": "A"}),
                      # 5 left the efficiency open (0.369 [0.256, 0.909], 27 Nov)
                      Tier("class A, 10 repetitions", 10, 400, params={"class": "A"}, extra=True)),
               note="m1.small VMs as 1-vCPU containers (EP does no I/O and hardly communicates)"),
    Experiment("001-network", "001", "SP-MZ and the Bloss-like eigensolver on 1 and on 2 instances",
               "aist-mpi.toml", ("host", "container"), "", {"kernel": ["sp-mz", None], "threads": [1]},
               same=("ranks", "instances"), remote_like="container", remote_hosts=2,
               tiers=(Tier("class S, 1 rank on 1 instance and 2 ranks on 2, 3 repetitions", 3, 150,
                           select={"class": ["S"]}),
                      Tier("class W, 1 rank on 1 instance and 2 ranks on 2, 3 repetitions", 3, 670,
                           select={"class": ["W"]})),
               kvm_envs=("vm",),
               note="the virtual network is the podman bridge between containers (and, with --inventory, the "
                    "network between the inventory's hosts)"),
    Experiment("000-boot-size", "000", "VM boot time against image size (copy mode, 1 instance)",
               "nii-boot.toml", boot=True,
               tiers=(Tier("5, 10, 20 GB x 0.1 (raised to the smallest image), 2 repetitions", 2, 240,
                           boot={"sizes_gb": [5, 10, 20], "scale": 0.1, "concurrency": [1]}),
                      Tier("5, 10, 20 GB x 0.2 = 1, 2, 4 GB, 3 repetitions", 3, 600,
                           boot={"sizes_gb": [5, 10, 20], "scale": 0.2, "concurrency": [1]})),
               note="image copied from the local cache as in the study; the study's 'running' is our running"),
    Experiment("000-boot-concurrency", "000", "VM boot time at 1 and 4 instances started at once (copy mode)",
               "nii-boot.toml", boot=True,
               tiers=(Tier("smallest image, 1 and 4 at once on this one node, 2 repetitions",
                           2, 320, boot={"sizes_gb": [2], "scale": 0.2, "concurrency": [1, 4]}),
                      Tier("smallest image, 1, 4 and 8 at once, 2 repetitions", 2, 800,
                           boot={"sizes_gb": [2], "scale": 0.2, "concurrency": [1, 4, 8]})),
               note="all copies go to this machine's one disk: 4 at once here against the study's 8 over 4 "
                    "nodes (2 per node's disk); 8 only at the larger scale"),
    Experiment("000-boot-cloud", "000", "Cloud instance boot time at 1 and 4 started at once, per image (EC2 API)",
               "nii-boot-cloud.toml", ("cloud",), boot=True, needs=("cloud",),
               tiers=(Tier("the images given (images = SIZE=ID,... or one image), 1 and 4 at once, 2 repetitions",
                           2, 300, boot={"concurrency": [1, 4]}),
                      Tier("the images given, 1, 4 and 8 at once (the study's), 3 repetitions", 3, 900,
                           boot={"concurrency": [1, 4, 8]})),
               note="the study's own platform: instances of the --cloud settings' cloud, timed from the API call "
                    "to running (polled every 0.1 s); the cloud makes each disk from its image"),
    # Only where KVM works: the studies' hardware-virtualization findings.
    Experiment("000-unixbench", "000", "UnixBench-style index, bare host vs a VM with all its cores",
               "quick.toml", ("host", "vm"), "system", {"copies": ["vcpus"]},
               tiers=(Tier("0.5 s per test, N copies, 3 repetitions", 3, 150),), needs=("kvm",)),
    Experiment("001-iozone", "001", "iozone-style write/read, host vs VM (virtio)",
               "iozone-like.toml", ("host", "vm"), "iozone-like", {"file_size_kb": [1 << 20]},
               condition_where={"storage": ["local"]},
               tiers=(Tier("1 GiB file, 64 KiB records, 3 repetitions", 3, 150),), needs=("kvm",)),
    Experiment("001-mpi", "001", "PingPong up to 64 MiB, 2 host ranks vs 2 VMs",
               "aist-mpi.toml", ("host", "vm"), "mpi", {"op": ["pingpong"]},
               tiers=(Tier("up to 64 MiB (1/16 of 1 GB), 3 repetitions", 3, 150, params={"max_bytes": "64M"}),),
               needs=("kvm",)),
    Experiment("001-npbmz", "001", "SP-MZ on one node, host vs VM",
               "aist-mpi.toml", ("host", "vm"), "npb", {"kernel": ["sp-mz"], "class": ["S"], "instances": [1],
                                                        "ranks": [1]},
               tiers=(Tier("class S, 1 rank, 3 repetitions", 3, 100),), needs=("kvm",)),
    Experiment("002-domu", "002", "bonnie++ over iSCSI, host vs VM (domU)",
               "ipsan.toml", ("host", "vm"), "bonnie", condition_where={"storage": ["iscsi"]},
               tiers=(Tier("512 MiB file, 3 repetitions", 3, 200, params={"scale": 0.25}),), needs=("kvm",)),
    Experiment("003-bonnie-vm", "003", "bonnie++ write in a VM (domU): local vs iSCSI",
               "remote-storage-delay.toml", ("vm",), "bonnie", condition_where={"delay_ms": [None, 0]},
               tiers=(Tier("suite sizes, 3 repetitions", 3, 200),),
               needs=("kvm",)),
    Experiment("003-hpa-vm", "003", "HPA on 4 VMs (domUs) vs the host",
               "vcluster-hpa.toml", ("host", "vm"), "hpa", {"transactions": [50000]},
               tiers=(Tier("50k transactions, local disk, 3 repetitions", 3, 200, conditions=({"storage": "local"},)),),
               needs=("kvm",)),
    Experiment("004-nfs", "004", "dd direct-I/O write/read over NFS mounted by the host and by a pod",
               "nfs-dd.toml", ("host", "container"), "dd", {"file_size_mb": [1024]},
               condition_where={"storage": ["nfs"]},
               tiers=(Tier("1 GiB x 1/8 file, 3 repetitions", 3, 150),), needs=("nfs",), kvm_envs=("vm",)),
    Experiment("004-web", "004", "nginx pods behind a Service, 1-8 replicas (and one VM with 8 workers)",
               # the cluster sibling of container-vs-vm.toml: the pods behind a ClusterIP Service, as
               # in the study (the host's scale-up cells have no balancer)
               "container-vs-vm-k8s.toml", ("host", "pods"), "web", {"workers": [1, 8], "balancer": ["none", "service"]},
               tiers=(Tier("replicas 1, 2, 4, 8 (VM: 8 workers), 5 s of load, 2 repetitions", 2, 300,
                           params={"duration": 5.0}, select={"replicas": [1, 2, 4, 8]}),),
               needs=("cluster",), kvm_envs=("vm",),
               note="the pods environment uses the Kubernetes backend of --kubeconfig"),
)
LEFT_OUT_ALWAYS = {
    "000-functional": "study 000's functional check of euca2ools commands is about one cloud's API, not a "
                      "measurement",
}
