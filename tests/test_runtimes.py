"""OCI runtimes per container environment (runc, crun, gVisor's runsc, a path): the suite loader's
checks, the versions and failures as the runtimes print them (captured in tests/data/runtimes/),
an explicit runtime that fails, doctor's rows, and the Bar: runc against runsc on syscall and pipe."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from virtbench.drivers.container import engine, ociruntime
from virtbench import suite
from virtbench.errors import SuiteError, UserError
from virtbench.machines import local

DATA = Path(__file__).parent / "data" / "runtimes"


def _load(tmp_path, envs: str):
    path = tmp_path / "s.toml"
    path.write_text('[suite]\nname = "s"\n\n' + envs + '\n[[workloads]]\nname = "system"\nparams = { test = "syscall" }\n')
    return path


def test_loader_names_file_line_and_key_of_each_wrong_runtime_option(tmp_path):
    path = _load(tmp_path, '[environments.a]\ndriver = "container"\nruntime = "runc"\nplatform = "ptrace"\n\n'
                           '[environments.b]\ndriver = "container"\nruntime = "runsc"\nnetwork = "bridge"\n\n'
                           '[environments.c]\ndriver = "container"\nruntime = "youki"\n')
    with pytest.raises(SuiteError) as got:
        suite.load(str(path))
    text = str(got.value)
    assert f"{path}:7: key 'environments.a.platform'" in text and "option of gVisor's runsc" in text
    assert f"{path}:12: key 'environments.b.network'" in text and "sandbox, host, none" in text
    assert f"{path}:16: key 'environments.c.runtime'" in text and "absolute path" in text


def test_loader_takes_runtimes_and_gvisor_options(tmp_path):
    path = _load(tmp_path, '[environments.a]\ndriver = "container"\nruntime = "runsc"\nplatform = "ptrace"\n'
                           'network = "host"\n\n[environments.b]\ndriver = "container"\nruntime = "/opt/rt/runsc"\n'
                           'platform = "systrap"\n\n[environments.c]\ndriver = "container"\nruntime = "crun"\n')
    envs = {e.name: e for e in suite.load(str(path)).environments}
    assert envs["a"].options["runtime"] == "runsc" and envs["a"].options["network"] == "host"
    assert ociruntime.Choice.of(envs["b"].options).gvisor  # a path to runsc takes gVisor's options
    assert ociruntime.Choice.of(envs["c"].options).options("") == {}


def test_versions_as_the_runtimes_print_them():
    got = {p.stem: ociruntime.parse_version(p.read_text()) for p in DATA.glob("*-version.txt")}
    assert got == {"runc-version": "1.1.5+ds1", "crun-version": "1.8.1", "runsc-version": "0.0~20221219.0"}


def test_hints_from_the_runtimes_own_failures():
    crun = (DATA / "crun-hybrid.txt").read_text()
    assert 'use runtime = "runc"' in ociruntime.hint("crun", crun, "1.8.1")
    netns = (DATA / "runsc-root-netns.txt").read_text()
    assert 'network = "host"' in ociruntime.hint("runsc", netns)
    systrap = (DATA / "runsc-systrap.txt").read_text()
    assert 'platform = "ptrace"' in ociruntime.hint("runsc", systrap, "0.0~20221219.0")


def test_what_the_tried_runsc_cannot_run_is_said_before_it_runs():
    meta = {"runtime": "/usr/bin/runsc", "runtime_version": ociruntime.TRIED_RELEASE,
            "runtime_options": {"platform": "ptrace", "network": "host"}}
    assert "unable to receive parameters from client" in ociruntime.cannot_run(meta, "iperf3 server")
    assert "errno=22" in ociruntime.cannot_run(meta, "sockperf server")
    assert "hwloc" in ociruntime.cannot_run(meta, "MPI") and 'runtime = "runc"' in ociruntime.cannot_run(meta, "MPI")
    assert ociruntime.cannot_run(meta, "nginx server") == ""
    # its own network stack: iperf3 ran there (docs/runtimes.md); MPI fails under any network
    sandbox = {**meta, "runtime_options": {"network": "sandbox"}}
    assert ociruntime.cannot_run(sandbox, "iperf3 server") == "" and ociruntime.cannot_run(sandbox, "MPI")
    # another release or runtime: nobody tried, so it runs and fails (or not) in its own words
    assert ociruntime.cannot_run({**meta, "runtime_version": "0.0~20240101.0"}, "MPI") == ""
    assert ociruntime.cannot_run({"runtime": "runc", "runtime_version": "1.1.5+ds1"}, "MPI") == ""


def test_labels():
    assert ociruntime.label("runsc", {"platform": "ptrace", "network": "host"}) == "gVisor runsc, ptrace, network host"
    assert ociruntime.label("runc", {}) == "runc"


def test_an_explicit_runtime_that_fails_is_the_error_never_another_runtime(guest_image, tmp_path):
    fake = tmp_path / "vbtest-rt"
    fake.write_text("#!/bin/sh\necho 'vbtest-rt: this runtime refuses every container' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(UserError) as got:
        engine.probe("podman", guest_image.tag, str(fake))
    assert "vbtest-rt: this runtime refuses every container" in got.value.message
    assert "runtime=runc" not in got.value.message  # nothing else was tried
    with pytest.raises(UserError, match="not an executable file"):
        engine.probe("podman", guest_image.tag, "/nonexistent/runsc")


def test_gvisor_kvm_platform_only_where_kvm_runs_guests(guest_image):
    from virtbench.drivers.vm.site import accelerator_of

    if accelerator_of(local())["accel"] == "kvm":  # the vm driver's probe boot says KVM works here
        eng = engine.probe("podman", guest_image.tag, "runsc", platform="kvm", network="none")
        assert eng.options == {"platform": "kvm", "network": "none"}
    else:  # no container is tried: a runsc sandbox on broken nested KVM hangs in start-up
        with pytest.raises(UserError, match="kvm platform needs KVM that runs guests") as got:
            engine.probe("podman", guest_image.tag, "runsc", platform="kvm", network="none")
        assert 'platform = "ptrace"' in got.value.hint


@pytest.fixture(scope="module")
def runsc_engine(guest_image):
    assert shutil.which("runsc"), "runsc is not installed: setup.sh installs it (apt-get install runsc)"
    return engine.probe("podman", guest_image.tag, "runsc")


def test_runsc_records_its_version_options_and_why_not_its_own_network(runsc_engine):
    meta = runsc_engine.describe()
    assert meta["runtime"] == "runsc" and meta["runtime_path"].endswith("runsc")
    assert meta["runtime_version"] == ociruntime.version(local(), meta["runtime_path"]) != ""
    assert meta["runtime_options"]["platform"] == "ptrace"
    assert meta["runtime_options"]["network"] in ("sandbox", "host")
    if meta["runtime_options"]["network"] == "host":  # auto took host: the sample says why
        assert "network sandbox did not start" in meta["runtime_note"]


def test_doctor_lists_runsc_as_working(runsc_engine):
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "doctor", "--json"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["runtime runsc"]["ok"], rows["runtime runsc"]
    assert rows["runtime runsc"]["version"] == runsc_engine.runtime_version
    assert rows["runtime runc"]["ok"]
    if "runtime crun" in rows and not rows["runtime crun"]["ok"]:  # it says why and what to use
        assert rows["runtime crun"]["detail"].startswith("does not start a container: ")
        assert rows["runtime crun"]["fix"]


BAR = """[suite]
name = "runtimes-bar"
baseline = "runc"
warmup = 0
min_repetitions = 3
max_repetitions = 3

[environments.runc]
driver = "container"
runtime = "runc"

[environments.runsc]
driver = "container"
runtime = "runsc"

[[workloads]]
name = "system"
params = { test = ["syscall", "pipe"], copies = "1", duration = 0.2 }

[[workloads]]
name = "web"
params = { balancer = "none", connections = 4, duration = 1, tcp_nopush = [true, false] }
"""


def test_bar_runsc_beside_runc_on_syscall_and_pipe(runsc_engine, tmp_path):
    from virtbench.api import open_store

    (tmp_path / "bar.toml").write_text(BAR)
    db = tmp_path / "r.sqlite"
    res = subprocess.run([sys.executable, "-m", "virtbench.cli", "run", str(tmp_path / "bar.toml"), "--db", str(db),
                          "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    store = open_store(db)
    (run_id,) = store.runs()["id"]
    samples = store.samples(run_id)
    meta = samples["metadata"].map(lambda m: m if isinstance(m, dict) else json.loads(m))
    runtimes = {env: set(meta[samples["environment"] == env].map(lambda m: m["runtime"]))
                for env in ("runc", "runsc")}
    assert runtimes == {"runc": {"runc"}, "runsc": {"runsc"}}
    # gVisor's /tmp is its own tmpfs: scratch stays on the root file system, as under runc
    system = (samples["environment"] == "runsc") & samples["metric"].isin(["syscall", "pipe"])
    assert "tmpfs" not in set(meta[system].map(lambda m: m["scratch_fs"])) != set()
    med = samples[samples["metric"] == "syscall"].groupby("environment")["value"].median()
    assert med["runc"] / med["runsc"] > 1.5, med  # a sandbox that intercepts system calls shows it
    assert set(samples[samples["environment"] == "runsc"]["metric"]) >= {"syscall", "pipe"}
    # memory per container, by holder: gVisor's sentry and gofer stay, runc is gone once the container runs
    from virtbench.store import Store

    pss = {i["environment"]: i["metadata"]["host_pss_kb"] for i in Store(str(db)).instances(run_id)}
    assert pss["runsc"]["runtime"] > 1024 and pss["runc"]["runtime"] == 0 and pss["runc"]["workload"] > 0
    assert pss["runsc"]["total"] > pss["runc"]["total"]
    # The monitor: runsc's CPU and memory from its sandbox's cgroup on this machine, labelled so; runc's inside
    results = json.loads(res.stdout)["results"]
    mon = {(r["environment"], r["metric"]): r for r in results if r["workload"] == "system"}
    for m in ("main.cpu_util_mean", "main.mem_used_peak", "main.net_peak"):
        assert mon[("runsc", m)]["n"] and mon[("runc", m)]["n"], m
    assert mon[("runsc", "main.cpu_util_mean")]["metadata"]["scope"] == "host side (the sandbox's cgroup) + inside"
    assert mon[("runc", "main.cpu_util_mean")]["metadata"]["scope"] == "cgroup"
    assert mon[("runsc", "main.mem_used_peak")]["median"] > 10  # gVisor's sentry and gofer are in it
    # nginx's tcp_nopush under runsc (network host): TCP_CORK is not passed on, each keep-alive response
    # waits for wrk's delayed ACK, and the rows say so; without tcp_nopush it does not wait
    web = {(r["environment"], r["params"]["tcp_nopush"], r["metric"]): r for r in results if r["workload"] == "web"}
    warned = {k for k, r in web.items() if any("delayed ACK" in w for w in r["warnings"])}
    assert {k[:2] for k in warned} == {("runsc", True)}, warned
    assert web[("runsc", True, "latency_p50_ms")]["median"] > 30
    assert web[("runsc", True, "latency_p50_ms")]["median"] > 3 * web[("runsc", False, "latency_p50_ms")]["median"]
    # the report puts them side by side
    out = subprocess.run([sys.executable, "-m", "virtbench.cli", "report", run_id, "--db", str(db), "--format", "md",
                          "-o", str(tmp_path / "r.md")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "r.md").read_text()
    part = text[text.index("### OCI runtimes side by side"):]
    assert "| runsc | gVisor runsc, ptrace, network " in part and "| runc | runc | " in part
    assert "Each runtime against runc" in part and "| system copies=1 · test=syscall | syscall | " in part
    # the monitor's scope beside the series: runsc's CPU and memory read on this machine, not inside
    series = text[text.index("**Series read outside their instance**"):]
    assert "-runsc-" in series.split("_Scope")[0] and "-runc-" not in series.split("_Scope")[0]
