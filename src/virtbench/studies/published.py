"""The five source studies' published figures as data (as each study prints them), for reports.

Each value carries its study id and table name. A missing value (the study printed "fail") is None.

Scale factor convention: a published figure was measured on the hardware of its day, so it is shown
beside ours unchanged, together with a scale factor
    s = our value / published value
for one matching reference row (same quantity, same unit, same kind of environment). Multiplying a
published value by s places it on our scale. Ratios between environments are dimensionless and are
compared as they are, never scaled. A scale factor is only stated when both sides measure the same
thing; when they do not (e.g. our index covers fewer tests), the report says so instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STUDIES: dict[str, str] = {
    "000": "Cloud platform evaluation report (NII; Eucalyptus 1.6.2 vs 2.0 on Xen 3.0.3)",
    "001": "Performance evaluation of cloud computing for HPC (AIST; Xen 3.4.3, EC2)",
    "002": "IP-SAN access in multi-core virtual machines (Ochanomizu; Xen, iSCSI)",
    "003": "A virtual-machine PC cluster running parallel data mining (Ochanomizu; Xen, HPA)",
    "004": "Container virtualization vs hardware virtualization (Kochi University of Technology)",
}


@dataclass(frozen=True)
class PublishedTable:
    study: str
    name: str  # the table's name, as the report cites it
    unit: str
    columns: tuple[str, ...]
    rows: dict[str, tuple[float | None, ...]]
    # Which of our environment kinds (driver names) each row corresponds to, where one does.
    kinds: dict[str, str] = field(default_factory=dict)
    notes: str = ""

    def value(self, row: str, column: str) -> float | None:
        return self.rows[row][self.columns.index(column)]

    def cite(self) -> str:
        return f"study {self.study}, {self.name}"


TABLES: list[PublishedTable] = [
    PublishedTable(
        "000", "UnixBench 5.1.2 test baselines", "score", ("baseline",),
        {"dhrystone": (116700.0,), "whetstone": (55.0,), "execl": (43.0,), "fcopy1024": (3960.0,),
         "fcopy256": (1655.0,), "fcopy4096": (5800.0,), "pipe": (12440.0,), "context": (4000.0,),
         "spawn": (126.0,), "shell1": (42.0,), "shell8": (42.0,), "syscall": (15000.0,)},
        notes="Table 8 of the study. Units: lps, MWIPS (whetstone), KBps (file copy), lpm (shell). The index "
              "is the geometric mean of score / baseline x 10. Table 8 prints 42 lpm for both shell tests; "
              "UnixBench 5.1.2's own baselines, which virtbench's index uses, are 42.4 (1 concurrent) and "
              "6.0 (8 concurrent)."),
    PublishedTable(
        "000", "UnixBench in 1-, 2- and 4-core Xen VMs and on the bare node", "index", (), {},
        notes="No numbers were published. Findings: the index was the same for Eucalyptus 1.6.2 and 2.0; "
              "a 4-core VM scored higher than the bare node; single-copy and N-copy runs, graphics tests off."),
    PublishedTable(
        "000", "Instance boot time (run-instances to 'running'), mean of 5", "s",
        ("1.6.2: 1", "1.6.2: 4", "1.6.2: 8", "2.0: 1", "2.0: 4", "2.0: 8"),
        {"2 GB": (106, 112, 216, 131, 126, 242), "5 GB": (246, 262, 509, 264, 301, 581),
         "10 GB": (508, 552, None, 518, 600, 1150), "20 GB": (990, None, None, 1008, 1178, 2160)},
        kinds={r: "vm" for r in ("2 GB", "5 GB", "10 GB", "20 GB")},
        notes="Columns: Eucalyptus version: concurrent instances. Empty = failed to start. "
              "Tables 6 (1.6.2) and 7 (2.0). Section 4.2: one factor in the boot time is how fast the image is "
              "copied from the node's cache (disk performance)."),
    PublishedTable(
        "000", "NPB on 2, 4, 8, 16 m1.small VMs", "s", ("2", "4", "8", "16"),
        {"EP": (157, 79, 39, 19), "CG": (212, 149, 190, 231), "IS": (29, 18, 16, 22),
         "LU": (1083, 414, 277, 216)},
        notes="Table 13 (Eucalyptus 1.6.2; Table 14, 2.0, is alike: EP 173 / 78 / 38 / 19 s), Open MPI 1.4.3, "
              "1800 MB per VM; the kernels run at every count (MG 53 / 45 s at 4 / 16, SP 692 / 601 s and BT "
              "254 / 204 s at 4 / 16: square counts only). Tables 11-12: MG on 16 x m1.small (128 MB) took "
              "9657 s / 14661 s (swapping) against 42-49 s on larger VMs."),
    PublishedTable(
        "001", "IMB throughput at 1 GB", "MB/s", ("PingPong", "Bcast", "Reduce", "Allreduce"),
        {"BMM": (967.3, 467.28, 266.80, 293.29), "PVM": (304.9, 140.68, 75.47, 101.19),
         "HVM": (175.4, 64.02, 45.12, 60.69), "EC2": (391.2, 196.78, 115.03, 135.72),
         "BMM-IB": (2233.8, 913.94, 450.30, 540.55)},
        kinds={"BMM": "host", "PVM": "vm", "HVM": "vm"},
        notes="Intel MPI Benchmarks 3.2; PingPong between 2 of 16 nodes, collectives over 16 nodes, 1 rank per node."),
    PublishedTable(
        "001", "Single-node NPB-MZ class C and Bloss", "s", ("SP-MZ", "BT-MZ", "Bloss (min)"),
        {"BMM": (86.63, 131.83, 21.06), "PVM": (100.44, 137.90, 22.33), "HVM": (101.08, 141.12, 22.66),
         "EC2": (88.00, 126.01, 20.00)},
        kinds={"BMM": "host", "PVM": "vm", "HVM": "vm"},
        notes="MPI x 2 OpenMP threads. Bloss in minutes. Virtualization cost 5-15 %."),
    PublishedTable(
        "002", "Socket and bonnie++ throughput over FE, GbE, 10 GbE", "", (), {},
        notes="No numbers printed (figures 1-11) but one: dom0 reached about 90 Mbps over Fast Ethernet. "
              "Finding: normal kernel ~ dom0 > domU; 10 GbE gave no gain over "
              "1 GbE for iSCSI (the bottleneck moved to the disk)."),
    PublishedTable(
        "003", "HPA datasets", "transactions", ("transactions", "MB per node"),
        {"1M": (1_000_000, 12.5), "8M": (8_000_000, 100.0), "10M": (10_000_000, 125.0),
         "20M": (20_000_000, 250.0)},
        notes="IBM Quest data: 1000 items, ~50 bytes per transaction, minimum support 0.7 %; 4 nodes "
              "(4 dom0s = system A, or 4 domUs of 1 GB = system B), data on local disk, on iSCSI, and on "
              "iSCSI with 10-50 ms one-way delay (Dummynet)."),
    PublishedTable(
        "003", "HPA execution time against iSCSI delay", "", (), {},
        notes="No numbers printed (figures 7-10). Finding: execution time grows only slowly with 10-50 ms delay "
              "(HPA is CPU-bound); peak network ~60 MB/s (dom0) vs 45 + 24 MB/s (domU)."),
    PublishedTable(
        "004", "CPU calibration: UnixBench overall index", "index", ("index",),
        {"VM host": (2402.8,), "container host": (3280.1,)},
        kinds={"VM host": "vm", "container host": "container"},
        notes="Different machines: the VM host is a Xeon E5-2670 v2 under VMware ESXi 6.5, the container "
              "host a Xeon E3-1220 v6 with Docker 18.09, so this ratio mixes hardware and virtualization."),
    PublishedTable(
        "004", "fio sequential read max latency, mean of 5", "ns", ("max latency",),
        {"bare": (25018.4,), "container": (30014.3,), "VM": (64366.6,)},
        kinds={"bare": "host", "container": "container", "VM": "vm"},
        notes="64 MB blocks, 2 GB file, host-internal networking."),
    PublishedTable(
        "004", "nginx static file, best configuration", "req/s", ("requests/s", "CPU %", "count"),
        {"32 pods": (19864.9, 94.0, 32), "1 VM, 8 workers": (20512.2, 94.0, 8)},
        kinds={"32 pods": "container", "1 VM, 8 workers": "vm"},
        notes="600-byte file from cache, 100,000 requests from JMeter, 5 runs; both at 94 % CPU. Pods were "
              "scaled 1, 2, 4, 8, 16, 32, 64 (best: 32); the VM ran one nginx with 8 workers. count = pods or "
              "workers at the best point."),
    PublishedTable(
        "004", "dd to NFS, sequential, bs 64 MB, 64 MB - 8 GB files", "", (), {},
        notes="No numbers printed (figures 4.2-4.3). Finding: write by the pod and by the VM ~10 % below bare metal, "
              "NFS mounted by the hypervisor as the VM's datastore ~30 % below; read alike everywhere."),
    PublishedTable(
        "001", "iozone write/read throughput against file size (64 kB records)", "", (), {},
        notes="No numbers printed (figure 1). Finding: PVM close to bare metal; HVM writes at about half; EC2's "
              "ephemeral disk half again."),
    PublishedTable(
        "000", "bonnie++ on local disk and on a 5 GB EBS volume over iSCSI", "", (), {},
        notes="Table 10 prints all 5 runs of each (K/sec): e.g. per-chr write 14.5-16.5 MB/s on the local disk "
              "against 20.5-25.1 MB/s on EBS (Eucalyptus 2.0), from an m1.small VM."),
    PublishedTable(
        "003", "bonnie++ write: local, iSCSI, iSCSI + 10 ms one-way delay", "", (), {},
        notes="No numbers printed (figure 6). Finding: from dom0 the local disk "
              "wrote fastest, then iSCSI, then iSCSI behind 10 ms of one-way delay (Dummynet); from a domU iSCSI "
              "beat the local disk; the delay cut the throughput sharply in both."),
]

# Which published tables a workload family reproduces (the report's section for it shows them).
BY_WORKLOAD: dict[str, list[tuple[str, str]]] = {
    "system": [("004", "CPU calibration: UnixBench overall index"),
               ("000", "UnixBench in 1-, 2- and 4-core Xen VMs and on the bare node")],
    "boot": [("000", "Instance boot time (run-instances to 'running'), mean of 5")],
    "mpi": [("001", "IMB throughput at 1 GB")],
    "npb": [("000", "NPB on 2, 4, 8, 16 m1.small VMs"), ("001", "Single-node NPB-MZ class C and Bloss")],
    "hpa": [("003", "HPA datasets"), ("003", "HPA execution time against iSCSI delay")],
    "web": [("004", "nginx static file, best configuration")],
    "fio": [("004", "fio sequential read max latency, mean of 5")],
    "dd": [("004", "dd to NFS, sequential, bs 64 MB, 64 MB - 8 GB files")],
    "iozone-like": [("001", "iozone write/read throughput against file size (64 kB records)")],
    "bonnie": [("000", "bonnie++ on local disk and on a 5 GB EBS volume over iSCSI"),
               ("002", "Socket and bonnie++ throughput over FE, GbE, 10 GbE"),
               ("003", "bonnie++ write: local, iSCSI, iSCSI + 10 ms one-way delay")],
}


def table(study: str, name: str) -> PublishedTable:
    for t in TABLES:
        if t.study == study and t.name == name:
            return t
    raise KeyError(f"no published table '{name}' in study {study}")


def for_workload(workload: str) -> list[PublishedTable]:
    return [table(s, n) for s, n in BY_WORKLOAD.get(workload, [])]


def scale_factor(ours: float | None, published: float | None) -> float | None:
    """s = ours / published: multiply a published value by s to place it on our scale."""
    if ours is None or not published:
        return None
    return ours / published
