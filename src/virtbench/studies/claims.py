"""Each published finding of the five studies as a checkable claim: data, beside `published.py`.

A claim names the finding in the study's words (`cite`: where it says so, in the original Japanese
text under shared/seeds), the quantity we compute, the direction or shape the study reports and the
tolerance taken from its wording. These were fixed from the text before any of our data was looked
at; a verdict that comes out "differs" is reported as it is. How a tolerance meets an interval (whole
interval inside: holds; wholly outside: differs; across: not measured) is score.decide's one rule.

`check` names a rule of score.py, `args` are its inputs (`published_at`: where the study found the
extreme a peak or a "best" selector looks for, so a range that stops short of it is not measured);
selectors pick measured groups by
experiment (reproduce.py's plan), workload, metric, environment kind, params and condition.
`needs` are facts of the machine without which the claim cannot be measured at all:
  kvm      the finding is about hardware virtualization: emulated (TCG) VMs never count
  cluster  the finding is about Kubernetes pods: needs --kubeconfig
  nfs      the host's kernel needs an NFS client (bare metal and pods mount the export)
`unmeasurable` is a reason that holds on any machine virtbench reaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Claim:
    id: str
    study: str
    finding: str          # the study's finding, in short
    cite: str             # where the study says it
    quantity: str         # what we compute
    tolerance: str        # the rule, in words, and where its numbers come from
    check: str            # rule name in score.py
    args: dict[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    unmeasurable: str = ""


def sel(experiment: str | tuple[str, ...], workload: str, metric: str, kind: str | tuple[str, ...], params: dict | None = None,
        condition: dict | None = None, prefer: tuple[str, ...] = ()) -> dict[str, Any]:
    """A selector of measured groups (score.select): of one experiment or of any of several.
    `prefer`: kinds taken first when they were measured (machines of their own, where the study's
    instances were)."""
    return {"experiment": (experiment,) if isinstance(experiment, str) else tuple(experiment), "workload": workload, "metric": metric,
            "kind": (kind,) if isinstance(kind, str) else tuple(kind), "params": params or {},
            "condition": condition or {}, "prefer": tuple(prefer)}


# Instances that are machines of their own, taken first where they were measured: a cloud's (the
# studies ran on Eucalyptus and EC2 instances), then SSH hosts of an inventory (separate nodes).
_SEPARATE = ("cloud", "ssh")
# Boot times: the cloud boot grid (a real cloud's, the study's own platform) where a cloud was given,
# else the VM grids (copy mode: the image copied from the local cache as the study's nodes did).
_BOOT_EXPS = ("000-boot-cloud", "000-boot-size")


_HPA = {"items": 1000, "support": 0.007, "ranks": 4, "instances": 4}
_BONNIE = "write_block"

CLAIMS: list[Claim] = [
    # -- 000: NII, Eucalyptus 1.6.2 vs 2.0 on Xen ------------------------------------------------------
    Claim("000-boot-size", "000", "Boot time grows linearly with image size (the image is copied from the node's cache)",
          "000, section 3.2.1, Tables 6 and 7 (2 GB: 106 s ... 20 GB: 990 s at 1 instance); SUMMARY: "
          "'about 50 s per GB'",
          "slope of seconds from request to running against image size (GB), copy mode, 1 instance at a time",
          "holds if the slope's 95 % interval is above 0 and a straight line explains >= 90 % of the variance of "
          "the size medians (Tables 6-7: 2 -> 20 GB gives 9.3x the time for 10x the size)",
          "slope", {"select": sel(_BOOT_EXPS, "boot", "running", ("cloud", "vm"), {"concurrency": 1},
                                  prefer=("cloud",)),
                    "x": "image_size", "min_r2": 0.9}),
    Claim("000-boot-concurrency", "000", "Boot time grows with the number of instances started at once (disk contention)",
          "000, section 3.2.1, Tables 6 and 7 (2 GB: 106 / 112 / 216 s at 1 / 4 / 8 instances)",
          "ratio of the median seconds to running at the largest concurrency to that at 1 instance, same image",
          "holds if the ratio's 95 % interval is above 1 (Tables 6-7: 1.0-1.1x at 4, 1.8-2.3x at 8)",
          "ratio", {"num": sel(("000-boot-cloud", "000-boot-concurrency"), "boot", "running", ("cloud", "vm"),
                               {"concurrency": "max"}, prefer=("cloud",)),
                    "den": sel(("000-boot-cloud", "000-boot-concurrency"), "boot", "running", ("cloud", "vm"),
                               {"concurrency": 1}, prefer=("cloud",)),
                    "above": 1.0}),
    Claim("000-unixbench-versions", "000", "UnixBench gave almost the same results on Eucalyptus 1.6.2 and 2.0",
          "000, section 4.3: '全パターンに亘って Eucalyptus 1.6.2 と Eucalyptus 2.0 でほぼ同じ結果'",
          "UnixBench index of one VM type on two versions of one cloud platform", "index ratio within 0.95-1.05",
          "none", unmeasurable="needs two versions of one cloud platform side by side; virtbench measures platforms, "
                               "not releases of one"),
    Claim("000-unixbench-vm-beats-bare", "000", "A VM with all the node's cores scored higher than the bare node",
          "000, section 4.3: 'VM での実行のほうが結果がよい' (figures 2 and 8)",
          "UnixBench-style index (all copies) of a VM with the host's vCPUs / the bare host's",
          "holds if the ratio's 95 % interval is above 1",
          "ratio", {"num": sel("000-unixbench", "system", "index", "vm", {"copies": "vcpus"}),
                    "den": sel("000-unixbench", "system", "index", "host", {"copies": "vcpus"}), "above": 1.0},
          needs=("kvm",)),
    Claim("000-npb-ep-scaling", "000", "EP's time halves each time the number of 1-vCPU instances doubles",
          "000, section 3.3.2, Tables 13-14 (EP 157 / 79 / 39 / 19 s on 2 / 4 / 8 / 16 m1.small)",
          "parallel efficiency T(1 instance) / (2 x T(2 instances)) of NPB EP, one rank per 1-vCPU instance",
          "holds if the efficiency is within 0.9-1.1 (Tables 13-14: each doubling gives 1.99-2.05x, "
          "efficiency 0.99-1.03)",
          "efficiency", {"one": sel("000-npb-ep", "npb", "time", ("cloud", "ssh", "container", "vm"), {"kernel": "ep", "instances": 1},
                                    prefer=_SEPARATE),
                         "many": sel("000-npb-ep", "npb", "time", ("cloud", "ssh", "container", "vm"), {"kernel": "ep", "instances": 2},
                                     prefer=_SEPARATE),
                         "factor": 2, "within": [0.9, 1.1]}),
    # -- 001: AIST, HPC on Xen and EC2 -------------------------------------------------------------
    Claim("001-disk-pvm", "001", "Para-virtual disk I/O is close to bare metal",
          "001, section 4.1: 'PVM は BMM とほぼ同じ挙動を示し、仮想化の影響はほとんど見られない' (figure 1)",
          "write throughput (fsync included, 64 KiB records, largest file) of a VM with virtio disks / the host's",
          "holds if the ratio is within 0.9-1.1 ('ほぼ同じ': about the same)",
          "ratio", {"num": sel("001-iozone", "iozone-like", "write", "vm", {"file_size_kb": "max"}, {"storage": "local"}),
                    "den": sel("001-iozone", "iozone-like", "write", "host", {"file_size_kb": "max"}, {"storage": "local"}),
                    "within": [0.9, 1.1]},
          needs=("kvm",)),
    Claim("001-mpi-half", "001", "MPI throughput in VMs is at best half of bare metal (PVM about 1/3)",
          "001, section 4.2, Table 2 (PingPong at 1 GB: BMM 967.3, PVM 304.9, HVM 175.4 MB/s); "
          "'現状では非仮想化環境の半分以上の性能を出すことは難しい'",
          "PingPong MB/s at the largest message between 2 VMs / between 2 host ranks",
          "holds if the ratio's 95 % interval is below 0.5",
          "ratio", {"num": sel("001-mpi", "mpi", "bandwidth_mbps", "vm", {"op": "pingpong", "bytes": "max"}),
                    "den": sel("001-mpi", "mpi", "bandwidth_mbps", "host", {"op": "pingpong", "bytes": "max"}),
                    "below": 0.5},
          needs=("kvm",)),
    Claim("001-npbmz-overhead", "001", "Virtualization costs 5-15 % of single-node compute time",
          "001, section 4.3, Table 3 (SP-MZ: BMM 86.63 s, PVM 100.44 s, HVM 101.08 s); "
          "'仮想化のオーバーヘッドはアプリケーションに依存して 5~15% 程度'",
          "time of NPB SP-MZ in a VM / on the host, same ranks and threads",
          "holds if the ratio is within 1.05-1.15 (the study's 5-15 %)",
          "ratio", {"num": sel("001-npbmz", "npb", "time", "vm", {"kernel": "sp-mz"}),
                    "den": sel("001-npbmz", "npb", "time", "host", {"kernel": "sp-mz"}),
                    "within": [1.05, 1.15]},
          needs=("kvm",)),
    Claim("001-coarse-copes", "001",
          "Fine-grained codes suffer from the virtual network; coarse-grained ones (Bloss) cope",
          "001, section 4.4 (figures 3 and 4): 'Bloss の MPI 通信は比較的、粗粒度であることから、通信性能の低い HVM "
          "でも並列化効率が極端に悪くなることはない'; section 5: '細粒度な並列アプリケーションは不利'",
          "network penalty P = (time in 2 instances over a virtual network / host's) / (time in 1 instance / host's), "
          "for SP-MZ (fine-grained) and vb-eigen, the Bloss-like solver (coarse-grained)",
          "holds if P(SP-MZ) > P(eigen) and P(eigen) <= 1.1 (efficiency 'not extremely worse')",
          "penalty", {"fine": {"workload": "npb", "params": {"kernel": "sp-mz"}},
                      "coarse": {"workload": "eigen", "params": {}},
                      "experiment": "001-network", "metric": "time", "kind": ("cloud", "ssh", "container", "vm"),
                      "prefer": _SEPARATE,
                      "coarse_max": 1.1}),
    # -- 002: Ochanomizu, IP-SAN from multi-core VMs ----------------------------------------------
    Claim("002-domu-slower", "002", "iSCSI throughput: normal kernel ~ dom0, domU far lower",
          "002, section 4.4: 'ノーマルカーネルとdomain0の間に大きな差は出ていないが、domainUではスループットが大幅に落ちている'",
          "bonnie++ block write over iSCSI in a VM / on the host", "holds if the ratio's 95 % interval is below 0.9",
          "ratio", {"num": sel("002-domu", "bonnie", _BONNIE, "vm", {}, {"storage": "iscsi"}),
                    "den": sel("002-domu", "bonnie", _BONNIE, "host", {}, {"storage": "iscsi"}), "below": 0.9},
          needs=("kvm",)),
    Claim("002-10gbe-no-gain", "002", "10 GbE gave no gain over 1 GbE for iSCSI (the bottleneck moved to the disk)",
          "002, section 4.4: 'iSCSIアクセスはGigabitEthernetと10GigabitEthernetでスループットにほとんど差は出なかった'",
          "bonnie++ block write over iSCSI with the target's link capped at 10000 Mbit/s / at 1000 Mbit/s (host)",
          "holds if the ratio is within 0.9-1.1 ('ほとんど差は出なかった': almost no difference)",
          "ratio", {"num": sel("002-link", "bonnie", _BONNIE, "host", {}, {"storage": "iscsi", "rate_mbit": 10000}),
                    "den": sel("002-link", "bonnie", _BONNIE, "host", {}, {"storage": "iscsi", "rate_mbit": 1000}),
                    "within": [0.9, 1.1]}),
    # -- 003: Ochanomizu, HPA on a Xen PC cluster ---------------------------------------------------
    Claim("003-bonnie-dom0-order", "003", "From dom0, writes are fastest to the local disk, then iSCSI, then iSCSI + 10 ms",
          "003, section 4.1 (figure 6): 'domain0 では性能のよい順に local、iSCSI、片道 10msec 遅延 iSCSI の順になった'",
          "bonnie++ block write on the host: local, iSCSI, iSCSI with 10 ms one-way delay",
          "holds if each step down the order is a ratio whose 95 % interval is below 1",
          "order", {"chain": [sel("003-bonnie", "bonnie", _BONNIE, "host", {}, {"storage": "local"}),
                              sel("003-bonnie", "bonnie", _BONNIE, "host", {}, {"storage": "iscsi", "delay_ms": 0}),
                              sel("003-bonnie", "bonnie", _BONNIE, "host", {}, {"storage": "iscsi", "delay_ms": 10})]}),
    Claim("003-bonnie-delay-drop", "003", "Delay cuts iSCSI write throughput sharply",
          "003, section 4.1: '遅延のない時には iSCSI はかなり高いアクセス性能であったが、遅延を入れると性能が大きく落ちる'",
          "bonnie++ block write over iSCSI with 10 ms one-way delay / without delay (host)",
          "holds if the ratio is at most 0.5 ('大きく落ちる': falls greatly, read as at least halved)",
          "ratio", {"num": sel("003-bonnie", "bonnie", _BONNIE, "host", {}, {"storage": "iscsi", "delay_ms": 10}),
                    "den": sel("003-bonnie", "bonnie", _BONNIE, "host", {}, {"storage": "iscsi", "delay_ms": 0}),
                    "at_most": 0.5}),
    Claim("003-domu-iscsi-beats-local", "003", "From a domU, iSCSI writes beat the local disk",
          "003, section 4.1: 'domainU では local よりも iSCSI のほうが早くなった'",
          "bonnie++ block write over iSCSI / on the local disk, in a VM",
          "holds if the ratio's 95 % interval is above 1",
          "ratio", {"num": sel("003-bonnie-vm", "bonnie", _BONNIE, "vm", {}, {"storage": "iscsi"}),
                    "den": sel("003-bonnie-vm", "bonnie", _BONNIE, "vm", {}, {"storage": "local"}), "above": 1.0},
          needs=("kvm",)),
    Claim("003-hpa-iscsi-like-local", "003", "HPA on iSCSI without delay runs about as fast as on the local disk",
          "003, section 4.2 (figures 7-10): '遅延がない iSCSI 通信は local と実行時間はほぼ変わらない'",
          "HPA time with its data on iSCSI (no delay) / on the local disk, host (system A)",
          "holds if the ratio is within 0.9-1.1 ('ほぼ変わらない': almost unchanged)",
          "ratio", {"num": sel("003-hpa", "hpa", "time", "host", _HPA, {"storage": "iscsi", "delay_ms": 0}),
                    "den": sel("003-hpa", "hpa", "time", "host", _HPA, {"storage": "local"}),
                    "within": [0.9, 1.1]}),
    Claim("003-hpa-delay-slow", "003", "HPA's time grows only slowly with 10-50 ms of storage delay (it is CPU-bound)",
          "003, section 4.2: '遅延をいれるとそれに伴い実行時間が徐々に長くなる'; section 5: '遅延が大きくなってもそれほど"
          "大きな差が見られなかった'",
          "HPA time on iSCSI at the largest delay / without delay, host (system A)",
          "holds if the ratio is at most 1.25 ('それほど大きな差が見られなかった': no large difference, read as within 25 %)",
          "ratio", {"num": sel("003-hpa", "hpa", "time", "host", _HPA, {"storage": "iscsi", "delay_ms": "max"}),
                    "den": sel("003-hpa", "hpa", "time", "host", _HPA, {"storage": "iscsi", "delay_ms": 0}),
                    "at_most": 1.25}),
    Claim("003-hpa-cpu-bound", "003", "HPA keeps the CPUs almost 100 % busy",
          "003, section 4.3 (figures 11-12): 'どちらの場合も CPU をほぼ 100 %使用している'",
          "mean CPU utilisation of the host while HPA runs on the largest dataset measured (monitor, 1 Hz)",
          "holds if the median is at least 0.9 ('ほぼ 100 %': almost all)",
          "level", {"select": sel("003-hpa", "hpa", "host.cpu_util_mean", "host", {**_HPA, "transactions": "max"},
                                  {"storage": "local"}), "at_least": 0.9}),
    Claim("003-domu-faster", "003", "HPA ran faster in the domUs than in the dom0s",
          "003, section 5: 'domain0 と domainU を比較すると domainU で実行したほうが実行時間が早くなる'",
          "HPA time in VMs / on the host", "holds if the ratio's 95 % interval is below 1",
          "ratio", {"num": sel("003-hpa-vm", "hpa", "time", "vm", _HPA, {"storage": "local"}),
                    "den": sel("003-hpa-vm", "hpa", "time", "host", _HPA, {"storage": "local"}), "below": 1.0},
          needs=("kvm",)),
    # -- 004: Kochi, containers vs hardware virtualization ----------------------------------------
    Claim("004-nfs-write", "004", "NFS writes: pod and VM about 10 % below bare metal, hypervisor-mounted about 30 % below",
          "004, section 4.4: 'Pod からマウントした場合の Write は 1 割程度スループットが低くなり、ハイパーバイザーから"
          "マウントした場合の Write では 3 割程度'",
          "dd write MB/s over NFS, pod / bare metal", "holds if the ratio is within 0.8-1.0 (about 10 % below)",
          "ratio", {"num": sel("004-nfs", "dd", "write", "container", {"file_size_mb": "max"}, {"storage": "nfs"}),
                    "den": sel("004-nfs", "dd", "write", "host", {"file_size_mb": "max"}, {"storage": "nfs"}),
                    "within": [0.8, 1.0]},
          needs=("nfs", "kvm")),
    Claim("004-nfs-read-alike", "004", "NFS reads are alike on bare metal, pods and VMs",
          "004, section 4.4: 'ベアメタル環境とハードウェア仮想化環境、コンテナ型仮想化環境でほぼ同様のスループット'",
          "dd read MB/s over NFS, pod / bare metal", "holds if the ratio is within 0.9-1.1",
          "ratio", {"num": sel("004-nfs", "dd", "read", "container", {"file_size_mb": "max"}, {"storage": "nfs"}),
                    "den": sel("004-nfs", "dd", "read", "host", {"file_size_mb": "max"}, {"storage": "nfs"}),
                    "within": [0.9, 1.1]},
          needs=("nfs", "kvm")),
    Claim("004-fio-container-latency", "004",
          "Over host-internal networking, a container's maximum read latency is above bare metal's (1.2x)",
          "004, section 4.6, Table 4.3 (bare 25018.4 ns, container 30014.3 ns): 'コンテナ型仮想化環境では 1.2 倍'",
          "fio max latency of a 64 MiB-block sequential read from a network block target on this machine, "
          "container / host",
          "holds if the ratio's 95 % interval is above 1 (the study: 'overhead occurs'; its 1.2x is shown beside ours)",
          "ratio", {"num": sel("004-fio", "fio", "lat_max", "container", {"rw": "read"}, {"storage": "nbd"}),
                    "den": sel("004-fio", "fio", "lat_max", "host", {"rw": "read"}, {"storage": "nbd"}),
                    "above": 1.0}),
    Claim("004-fio-vm-latency", "004", "A VM's maximum read latency is about 2.5x bare metal's, above a container's",
          "004, section 4.6, Table 4.3 (VM 64366.6 ns): 'ハードウェア仮想化環境では約 2.5 倍'",
          "fio max latency of the same read, VM / container",
          "holds if the ratio's 95 % interval is above 1",
          "ratio", {"num": sel("004-fio", "fio", "lat_max", "vm", {"rw": "read"}, {"storage": "nbd"}),
                    "den": sel("004-fio", "fio", "lat_max", "container", {"rw": "read"}, {"storage": "nbd"}),
                    "above": 1.0},
          needs=("kvm",)),
    Claim("004-web-pods-peak", "004", "More pods do not keep raising nginx throughput: it peaks (at 32 of 1-64)",
          "004, section 4.8 (figure 4.4): 'コンテナ数を増やせばその分だけ性能が上がるわけではなく ... Pod 数が 32 の時の "
          "19864.9 リクエスト'",
          "requests/s of nginx pods behind a Service against the replica count",
          "holds if the best replica count lies strictly inside the range measured (more than the fewest, fewer than "
          "the most); a best at the top of a range that stops below the study's 32 is not measured (score.py)",
          "peak", {"select": sel("004-web", "web", "requests_per_second", "pods", {"workers": 1}), "x": "replicas",
                   "published_at": 32},
          needs=("cluster",)),
    Claim("004-web-vm-vs-pods", "004", "One VM with 8 nginx workers serves at least as much as the best pod count",
          "004, section 4.8: 'ハードウェア仮想化環境では 1 秒あたりの処理リクエスト数が 20512.2' against 19864.9 for 32 pods",
          "requests/s of one VM with 8 workers / the pods' best",
          "holds if the ratio is at least 1.0; against a best at the top of a range that stops below the study's 32 "
          "pods, only 'differs' counts (score.py)",
          "ratio", {"num": sel("004-web", "web", "requests_per_second", "vm", {"workers": 8}),
                    "den": sel("004-web", "web", "requests_per_second", "pods", {"replicas": "best"}),
                    "at_least": 1.0, "published_at": {"replicas": 32}},
          needs=("kvm", "cluster")),
]


def by_id(claim_id: str) -> Claim:
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(claim_id)


def for_studies(studies: list[str] | None) -> list[Claim]:
    return [c for c in CLAIMS if not studies or c.study in studies]
