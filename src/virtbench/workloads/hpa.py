"""Hash Partitioned Apriori association-rule mining through virtbench's own `vb-hpa`, on IBM Quest
transactions from `vb-questgen` (native/hpa; study 003 item 2).

Each repetition generates the data where it will be read: every instance runs the (deterministic)
generator for the shares of the ranks placed on it, into its storage directory (`ctx.storage_dir`,
so local, remote and delayed storage conditions apply to the reads), then written out and dropped
from the page cache so that the reads cross that storage; the shares of other instances go to
/dev/null. A per-run directory under instance 0's scratch path (the same path on
every instance) holds one link per rank, `part.R`, so every rank opens the same prefix. Everything
is removed after the repetition. Generation is not timed; `time` is vb-hpa's own (reading + mining
+ rules). Rank 0 also writes the frequent itemsets and rules; their SHA-256 go into the metadata so
runs on different platforms can be checked to have found exactly the same sets.
"""

from __future__ import annotations

import json
import math
import secrets
import shutil
import statistics
import tempfile
from typing import Any

from . import mpicluster as cluster
from .. import drivers
from ..errors import WorkloadFailed
from ..model import EnvSpec, Sample
from . import mpijob
from .base import MetricSpec, Param, RunContext, Workload

BATCH = 65536  # vb-hpa's default --batch: subsets queued per destination before an exchange


def _count(value: Any) -> int:
    """A count with an optional decimal suffix k, M, G (1M = 1,000,000), as vb-questgen reads them."""
    return mpijob.suffixed_int(value, {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}, decimals=True)


_count.__name__ = "count"

# Generate the shares of the ranks listed in $3 (of $4 parts) into $1 (others to /dev/null) and link
# them from $2, after checking that $5 kB fit there. Arguments after the fifth are the generator's
# command line (without --parts and --out).
_GENERATE = r"""
set -e
data=$1; links=$2; own=$3; parts=$4; need_kb=$5; shift 5
mkdir -p "$data" "$links"
free_kb=$(df -Pk "$data" | awk 'NR==2{print $4}')
if [ -n "$free_kb" ] && [ "$free_kb" -lt "$need_kb" ]; then
  echo "vb-hpa-data: the data share (${need_kb} kB) does not fit in the ${free_kb} kB free at $data" >&2
  exit 3
fi
r=0
while [ "$r" -lt "$parts" ]; do
  case " $own " in
    *" $r "*) ln -sfn "$data/part.$r" "$links/part.$r" ;;
    *) ln -sfn /dev/null "$data/part.$r" ;;
  esac
  r=$((r + 1))
done
"$@" --parts "$parts" --out "$data/part"
for f in "$data"/part.*; do [ -L "$f" ] && rm -f "$f"; done
# Out of the page cache, so that vb-hpa reads its data through the storage path (the study's local
# disk, iSCSI, iSCSI behind delay) and not from the memory it was just written to.
for f in "$data"/part.*; do
  [ -f "$f" ] || continue
  sync "$f" && dd if="$f" iflag=nocache count=0 status=none || echo "vb-hpa-data: $f stays cached" >&2
done
exit 0
"""

def data_bytes(transactions: int, items: int, avg_size: float) -> float:
    """Approximate size of the generated text: per item its digits and a blank, per line a newline."""
    digits = 0
    for d in range(len(str(max(items - 1, 0)))):  # ids with d+1 digits among 0 .. items-1
        low = 10**d if d else 0
        digits += max(0, min(10**(d + 1), items) - low) * (d + 1)
    return transactions * (avg_size * (digits / max(items, 1) + 1) + 1)


def mem_per_rank(params: dict[str, Any]) -> float:
    share = params["transactions"] / params["ranks"]
    transactions = share * (params["avg_size"] + 2) * 4  # 4 bytes per item and a length
    exchange = 2 * params["ranks"] * BATCH * max(params["pattern_size"], 3) * 4
    counts = params["items"] ** 2 * 2  # pass-2 triangular matrix, at most 4096 items
    return transactions + exchange + counts + 16 * mpijob.MB + mpijob.MPI_RUNTIME_PER_RANK


class HPA(Workload):
    name = "hpa"
    description = "Hash Partitioned Apriori (MPI) on IBM Quest synthetic transactions, data on each instance's storage"
    params = (
        Param("transactions", _count, 100_000, "transactions D in the dataset (k/M suffixes: 1M = 10^6)",
              min=1, max=10**9),
        Param("items", int, 1000, "distinct items N", min=1, max=10_000_000),
        Param("support", float, 0.007, "minimum support, a fraction in (0, 1]"),
        Param("confidence", float, 0.5, "minimum confidence of the rules, in [0, 1]", min=0.0, max=1.0),
        *mpijob.cluster_params(ranks=1, instances=1),
        Param("avg_size", float, 10.0, "average transaction size T", min=1.0, max=1000.0),
        Param("pattern_size", float, 4.0, "average size of the potentially frequent patterns I", min=1.0, max=100.0),
        Param("seed", int, 1, "generator seed (same seed, same data)", min=0, max=2**63 - 1),
        Param("ship", str, "prefix", "how k-subsets travel to their owner rank: prefix = owner hashes the first "
              "item, a transaction's subsets for one owner go as one suffix; subsets = owner hashes the whole "
              "set, one record per subset (study 003's volume)", choices=("prefix", "subsets")),
        mpijob.TOTAL_VCPUS,
    )
    metrics = (
        MetricSpec("time", "s", False, "vb-hpa's total time: reading, mining all passes, rules"),
        MetricSpec("frequent_itemsets", "itemsets", True, "frequent itemsets found, all lengths"),
        MetricSpec("cpu_busy", "fraction", True, "each rank's share of vb-hpa's time on a CPU or waiting for one "
                   "(not blocked on I/O), the mean over the ranks (Linux schedstat; the smallest in metadata)"),
    )

    def validate(self, params: dict[str, Any]) -> None:
        s = params["support"]
        if not (0 < s <= 1) or math.isnan(s):
            raise ValueError(f"support must be a fraction in (0, 1], got {s}")
        if params["ranks"] > params["transactions"]:
            raise ValueError(f"ranks ({params['ranks']}) must not exceed transactions ({params['transactions']})")
        mpijob.check_layout(params)
        size = data_bytes(params["transactions"], params["items"], params["avg_size"])
        mpijob.check_machine_memory(mem_per_rank(params) * params["ranks"],
                                    f"mining {params['transactions']} transactions on {params['ranks']} rank(s)")
        free = shutil.disk_usage(tempfile.gettempdir()).free
        if size > free:
            raise ValueError(f"the dataset ({mpijob.human(size)}) does not fit in the {mpijob.human(free)} free "
                             f"on this machine")

    def check_capacity(self, params: dict[str, Any], env: EnvSpec) -> list[str]:
        per = params["ranks"] // params["instances"]
        problems = mpijob.capacity_problems(params, env, mem_per_rank(params) * per,
                                            f"mining {params['transactions']} transactions")
        share = data_bytes(params["transactions"], params["items"], params["avg_size"]) / params["instances"]
        if env.shape.disk_gb and share > env.shape.disk_gb * 1024**3:
            problems.append(f"each instance's share of the dataset ({mpijob.human(share)}) does not fit the "
                            f"shape's {env.shape.disk_gb} GB disk")
        space = drivers.class_for(env).scratch_space(env) if env.driver in drivers.names() else None
        if space is not None:
            need = share * params["instances"] if space.shared else share
            if need > space.free:
                whose = "the dataset" if space.shared else "each instance's share of the dataset"
                problems.append(f"{whose} ({mpijob.human(need)}) does not fit "
                                + space.what.replace("{free}", mpijob.human(space.free)))
        return problems

    def roles(self, params: dict[str, Any]) -> dict[str, int]:
        return {"node": params["instances"]}

    def timeout(self, params: dict[str, Any]) -> float:
        work = params["transactions"] / 1e6 * (params["avg_size"] / 10) ** 2 / max(params["support"] / 0.007, 0.05)
        return 60 * work * max(1.0, params["ranks"] / mpijob.machine_cores()) + 120

    def expected_seconds(self, params: dict[str, Any]) -> float | None:
        # the plan's model: the timeout's work unit (transactions, their size, the support) at about
        # 8 s per unit on one core (measured: 100k transactions, 1 rank, on the host: 1.3-2.3 s, load 9)
        work = params["transactions"] / 1e6 * (params["avg_size"] / 10) ** 2 / max(params["support"] / 0.007, 0.05)
        return mpijob.model_seconds({**params, "threads": 1}, 8.0 * work)

    def execute(self, instances, params: dict[str, Any], ctx: RunContext) -> str:
        cl = mpijob.get_cluster(instances, params)
        placement = cl.placement(params["ranks"])
        token = f"vb-hpa-{secrets.token_hex(4)}"
        links = f"{cl.launcher.scratch_dir()}/{token}-ranks"
        data = {inst.name: f"{ctx.storage_dir(inst)}/{token}-data" for inst in cl.instances}
        try:
            share = data_bytes(params["transactions"], params["items"], params["avg_size"]) / len(cl.instances)
            for inst, where in zip(cl.instances, placement):
                gen = [inst.bin("vb-questgen"), "--transactions", str(params["transactions"]),
                       "--items", str(params["items"]), "--avg-size", f"{params['avg_size']:g}",
                       "--pattern-size", f"{params['pattern_size']:g}", "--seed", str(params["seed"])]
                res = inst.exec(["sh", "-c", _GENERATE, "sh", data[inst.name], links,
                                 " ".join(map(str, where["ranks"])), str(params["ranks"]),
                                 str(math.ceil(share * 1.1 / 1024)), *gen], timeout=ctx.timeout)
                if not res.ok:
                    raise WorkloadFailed(f"{inst.name}: {cluster.tool_error(res, 'vb-hpa-data')}"
                                         if res.returncode == 3 else
                                         f"generating the data on {inst.name} failed: {res.describe_failure()}",
                                         res.stdout[-2000:] + res.stderr[-2000:])
                gen_record = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "{}"
            argv = [cl.launcher.bin("vb-hpa"), "--input", f"{links}/part", "--support", repr(params["support"]),
                    "--confidence", repr(params["confidence"]), "--itemsets-out", f"{links}/itemsets",
                    "--rules-out", f"{links}/rules", "--ship", params.get("ship", "prefix")]
            raw = mpijob.run(cl, argv, params, ctx, "vb-hpa",
                             extra={"data_dirs": data, "generator": _json_or_empty(gen_record)})
            digest = cl.launcher.exec(["sha256sum", f"{links}/itemsets", f"{links}/rules"], timeout=120)
            if digest.ok:
                sums = [line.split()[0] for line in digest.stdout.splitlines() if line.strip()]
                raw += cluster.dumps_record({"itemsets_sha256": sums[0], "rules_sha256": sums[1]}) + "\n"
            return raw
        finally:
            for inst in cl.instances:
                inst.exec(["rm", "-rf", data[inst.name], links], timeout=120)

    def summarize_metadata(self, metas: list[dict[str, Any]]) -> dict[str, Any]:
        passes = pass_medians(metas)
        return {"pass_medians": passes} if passes else {}

    def parse(self, raw: str, params: dict[str, Any]) -> list[Sample]:
        records, harness = mpijob.read_output(raw)
        summary = [r for r in records if r.get("summary")]
        passes = [r for r in records if "pass" in r]
        if len(summary) != 1:
            raise ValueError(f"expected one summary record from vb-hpa, got {len(summary)}")
        s = summary[0]
        missing = {"transactions", "ranks", "frequent_itemsets", "rules", "time_s", "bytes_exchanged",
                   "min_count", "passes"} - set(s)
        if missing:
            raise ValueError(f"vb-hpa summary lacks {', '.join(sorted(missing))}")
        if s["ranks"] != params["ranks"] or s["transactions"] != params["transactions"]:
            raise ValueError(f"vb-hpa mined {s['transactions']} transactions on {s['ranks']} ranks, expected "
                             f"{params['transactions']} on {params['ranks']}")
        if len(passes) != s["passes"]:
            raise ValueError(f"vb-hpa printed {len(passes)} pass records, its summary says {s['passes']}")
        meta = mpijob.harness_metadata(harness)
        meta.update(
            passes=[_pass_record(p) for p in passes],
            pass_count=s["passes"], bytes_exchanged=s["bytes_exchanged"], rules=s["rules"],
            min_count=s["min_count"], read_time_s=s.get("read_time_s"), items_seen=s.get("items"),
            data_dirs=harness.get("data_dirs"), generator=harness.get("generator"), code_version=s.get("version"),
            **{k: harness[k] for k in ("itemsets_sha256", "rules_sha256") if k in harness})
        out = [Sample("time", s["time_s"], "s", False, dict(meta)),
               Sample("frequent_itemsets", s["frequent_itemsets"], "itemsets", True, dict(meta))]
        if "cpu_busy_mean" in s:  # kernels without schedstat leave it out
            out.append(Sample("cpu_busy", s["cpu_busy_mean"], "fraction", True,
                              {**meta, "cpu_busy_min": s.get("cpu_busy_min")}))
        return out


PASS_FIELDS = ("pass", "candidates", "frequent", "time_s", "bytes_sent")
# vb-hpa version 2 adds, per pass: rank 0's seconds in candidate generation (+ transaction
# filtering), counting (+ packing), MPI exchange calls (incl. waiting) and gathering L(k); the
# subsets counted over all ranks; and the busiest rank's share of them over the mean.
PASS_PROFILE_FIELDS = ("gen_s", "count_s", "exchange_s", "gather_s", "subsets", "imbalance")


def pass_medians(metas: list[dict]) -> list[dict]:
    """Per mining pass, over the samples that have it: the median of each timing and volume field
    (candidates and frequent itemsets are the same in every correct run: their median is that value)."""
    by_pass: dict[int, list[dict]] = {}
    for m in metas:
        for p in m.get("passes") or []:
            if isinstance(p, dict) and isinstance(p.get("pass"), int):
                by_pass.setdefault(p["pass"], []).append(p)
    out = []
    for k in sorted(by_pass):
        recs = by_pass[k]
        row: dict[str, Any] = {"pass": k, "runs": len(recs)}
        for f in PASS_FIELDS[1:] + PASS_PROFILE_FIELDS:
            vals = [r[f] for r in recs if isinstance(r.get(f), (int, float))]
            if vals:
                row[f] = statistics.median(vals)
        out.append(row)
    return out


def _pass_record(p: dict) -> dict:
    """One pass line as sample metadata: the fields every version prints, the profile when present."""
    rec = {k: p.get(k) for k in PASS_FIELDS}
    rec.update({k: p[k] for k in PASS_PROFILE_FIELDS if k in p})
    return rec


def _json_or_empty(line: str) -> dict:
    try:
        rec = json.loads(line)
        return rec if isinstance(rec, dict) else {}
    except (json.JSONDecodeError, TypeError):
        return {}
