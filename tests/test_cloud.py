"""The cloud driver against moto's stand-alone EC2 server (a real HTTP endpoint on a loopback port,
started here): boot phases, tags, volumes, snapshots, teardown, cleanup after a killed run, the cost
guard, faults, and credentials kept out of everything stored. moto starts no machines, so the SSH
side of an instance is a testbed host (ssh_override; results say backend "moto+testbed")."""

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from motokit import moto_server

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

from virtbench import shapes  # noqa: E402
from virtbench.drivers.cloud import ec2 as api  # noqa: E402
from virtbench.drivers import DriverContext  # noqa: E402
from virtbench.drivers.cloud.driver import CloudDriver, StartFailed, parse_console_keys  # noqa: E402
from virtbench.errors import UserError  # noqa: E402
from virtbench.machines import Pool  # noqa: E402
from virtbench.model import EnvSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEY_ID, SECRET = "AKIAVBCLOUDTESTKEY01", "vbSecretNeverStored+9f3c2e"
REGION = "us-east-1"


@pytest.fixture(scope="module")
def moto_url():
    with moto_server(KEY_ID, SECRET, REGION) as url:
        yield url


@pytest.fixture
def ec2(moto_url):
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"), timeout=10)
    return boto3.client("ec2", region_name=REGION, endpoint_url=moto_url)


@pytest.fixture
def image(ec2):
    return ec2.describe_images()["Images"][0]["ImageId"]


def _live(ec2, run_id=None):
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
    if run_id:
        filters.append({"Name": "tag:virtbench:run", "Values": [run_id]})
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def _tagged(ec2, run_id):
    f = [{"Name": "tag:virtbench:run", "Values": [run_id]}]
    return {"instances": _live(ec2, run_id), "volumes": ec2.describe_volumes(Filters=f)["Volumes"],
            "snapshots": ec2.describe_snapshots(OwnerIds=["self"], Filters=f)["Snapshots"]}


def _driver(tmp_path, run_id="t-cloud", inventory=None):
    from virtbench.machines import pool_for

    return CloudDriver(DriverContext(run_id, tmp_path, None, pool_for(str(inventory)) if inventory else Pool()))


def _env(url, image, **options):
    opts = {k: o.default for k, o in CloudDriver.options.items()}
    opts.update(endpoint=url, image=image, **options)
    return EnvSpec("cloud", "cloud", shapes.resolve("m1.small"), opts)


def _vb(*args, timeout=600, **kw):
    return subprocess.run([sys.executable, "-m", "virtbench.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, **kw)


def _no_secrets(*texts):
    for text in texts:
        assert KEY_ID not in text and SECRET not in text


# -- units ---------------------------------------------------------------------------------------

def test_console_host_keys_best_type_first():
    console = ("boot...\n-----BEGIN SSH HOST KEY KEYS-----\nssh-rsa AAAAB3rsa root@i-1\n"
               "ecdsa-sha2-nistp256 AAAAE2ecdsa root@i-1\nssh-ed25519 AAAAC3ed root@i-1\n"
               "-----END SSH HOST KEY KEYS-----\nlogin:")
    assert parse_console_keys(console) == ["ssh-ed25519 AAAAC3ed", "ecdsa-sha2-nistp256 AAAAE2ecdsa",
                                           "ssh-rsa AAAAB3rsa"]
    assert parse_console_keys("no keys yet") == []


def test_settings_map_shapes_and_images(tmp_path):
    d = _driver(tmp_path)
    assert d.settings(_env("http://x:1", "ami-1")).instance_type == "m1.small"  # EC2's own name
    s = d.settings(_env("http://x:1", "", images="2G=ami-2,5G=ami-5", image_size="5G",
                        shape_map="m1.small=t3.small"))
    assert (s.image, s.instance_type) == ("ami-5", "t3.small")
    with pytest.raises(UserError, match="no image for size 9G"):
        d.settings(_env("http://x:1", "", images="2G=ami-2", image_size="9G"))
    native = EnvSpec("cloud", "cloud", shapes.resolve("native"), _env("http://x:1", "ami-1").options)
    with pytest.raises(UserError, match="no instance type"):
        d.settings(native)
    assert api.Target.from_options({"endpoint": "https://u:p@ec2.example.org:8773/x"}).endpoint_host == \
        "ec2.example.org:8773"  # never the user:password part


def test_cloud_boot_suite_maps_sizes_to_images(tmp_path):
    from virtbench.run import boot

    g = boot.load_suite(ROOT / "suites" / "nii-boot-cloud.toml")
    assert (g.driver, g.image_sizes, g.concurrency) == ("cloud", ["2G", "5G", "10G", "20G"], [1, 4, 8])
    d = _driver(tmp_path)
    images = [d.settings(boot.env_for(g, c["params"], d)).image for c in g.cells()]
    assert images[0] == "ami-REPLACE-2G" and images[-1] == "ami-REPLACE-20G"


# -- the API path (no SSH) ---------------------------------------------------------------------

def test_boot_refuses_more_than_max_instances(ec2, moto_url, image, tmp_path):
    res = _vb("boot", "--driver", "cloud", "-c", "4", "-r", "1", "-o", f"endpoint={moto_url}", "-o", f"image={image}",
              "-o", "max_instances=2", "--db", str(tmp_path / "g.sqlite"))
    assert res.returncode == 2 and "more than max_instances = 2" in " ".join(res.stderr.split())
    assert _live(ec2) == []


def test_cost_guard_refuses_before_any_call(ec2, moto_url, image, tmp_path):
    d = _driver(tmp_path)
    env = _env(moto_url, image, max_instances=2)
    with pytest.raises(UserError, match="max_instances = 2"):
        d.plan(env, 3)
    with pytest.raises(UserError, match="exceed max_instances = 2"):
        d.provision(env, 3)
    assert _live(ec2) == []
    (line,) = d.plan(env, 2)
    assert "up to 2 instance(s) of m1.small" in line and "virtbench:run=t-cloud" in line and "moto" in line


def test_never_running_is_a_failure_with_its_last_state_and_torn_down(ec2, moto_url, image, tmp_path):
    d = _driver(tmp_path, "t-timeout")
    with pytest.raises(StartFailed) as info:
        d.provision(_env(moto_url, image, running_timeout=0), 1)
    assert "did not reach running within 0 s (last state: pending)" in str(info.value)
    assert {"requested", "created", "teardown_end"} <= set(info.value.lifecycle)
    assert "running" not in info.value.lifecycle
    left = _tagged(ec2, "t-timeout")
    assert left["instances"] == [] and left["volumes"] == []
    (inst,) = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert inst["State"]["Name"] == "terminated"
    assert {t["Key"] for t in inst["Tags"]} >= {"virtbench:run", "virtbench:owner", "Name"}


class _Throttling(http.server.BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self):  # noqa: N802
        type(self).calls += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>'
                b"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>vb</RequestID></Response>")
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_throttling_is_retried_by_botocore_then_a_clear_error(moto_url, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Throttling)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(StartFailed) as info:
            _driver(tmp_path).provision(_env(url, "ami-1", api_attempts=3), 1)
    finally:
        server.shutdown()
    assert _Throttling.calls == 3  # botocore's standard retry mode, with its backoff
    msg = str(info.value)
    assert "RunInstances" in msg or "run_instances" in msg
    assert "after 3 attempt(s): RequestLimitExceeded" in msg and "127.0.0.1" in msg


def test_cleanup_removes_what_a_run_tagged_and_nothing_else(ec2, moto_url, image, tmp_path):
    tags = lambda kind, run: [{"ResourceType": kind, "Tags": [{"Key": "virtbench:run", "Value": run},  # noqa: E731
                                                             {"Key": "virtbench:owner", "Value": "x@y"}]}]
    for run in ("dead-run", "other-run"):
        ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, TagSpecifications=tags("instance", run))
        vol = ec2.create_volume(Size=1, AvailabilityZone="us-east-1a", TagSpecifications=tags("volume", run))
        ec2.create_snapshot(VolumeId=vol["VolumeId"], TagSpecifications=tags("snapshot", run))
    dry = _vb("cleanup", "--run", "dead-run", "--endpoint", moto_url, "--region", REGION, "--dry-run",
              "--db", str(tmp_path / "c.sqlite"))
    assert dry.returncode == 0, dry.stderr
    assert "would remove 4" in dry.stdout and len(_tagged(ec2, "dead-run")["instances"]) == 2
    res = _vb("cleanup", "--run", "dead-run", "--endpoint", moto_url, "--region", REGION, "--json",
              "--db", str(tmp_path / "c.sqlite"))
    assert res.returncode == 0, res.stderr
    (out,) = json.loads(res.stdout)
    assert out["backend"] == "moto" and len(out["removed"]) == 4
    assert _tagged(ec2, "dead-run") == {"instances": [], "volumes": [], "snapshots": []}
    other = _tagged(ec2, "other-run")
    assert len(other["instances"]) == 2 and other["volumes"] and other["snapshots"]
    _no_secrets(res.stdout, res.stderr)


# -- API + SSH: moto instances mapped to testbed hosts -------------------------------------------

@pytest.mark.slow
def test_boot_four_concurrent_records_api_phases(ec2, moto_url, image, testbed2, tmp_path):
    db = tmp_path / "b.sqlite"
    res = _vb("boot", "--driver", "cloud", "-c", "4", "-r", "1", "-o", f"endpoint={moto_url}", "-o", f"image={image}",
              "-o", "ssh_override=all", "--inventory", str(testbed2), "--db", str(db), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["backend"] == "moto+testbed" and data["driver"] == "cloud"
    (cell,) = data["cells"]
    assert cell["succeeded"] == 4 and cell["failed"] == 0
    for inst in cell["instances"]:
        ts = inst["timestamps"]
        assert ts["requested"] <= ts["created"] <= ts["running"] <= ts["ssh_ready"] <= ts["ready"]
    for phase in ("created", "running", "ssh_ready", "ready", "teardown"):
        assert cell["phases"][phase]["n"] == 4
    assert "cloud plan for cloud: up to 4 instance(s)" in " ".join(res.stderr.split())  # before creating
    from virtbench.store import Store

    samples = Store(db).samples(data["run_id"])
    meta = json.loads(samples[0]["metadata_json"])
    assert meta["poll_resolution_s"] == 0.1 and meta["instance_id"].startswith("i-")
    assert meta["backend"] == "moto+testbed" and meta["ssh_host"] in ("vbtsh1", "vbtsh2")
    assert _tagged(ec2, data["run_id"])["instances"] == []  # all terminated
    _no_secrets(db.read_bytes().decode("latin-1"), res.stdout, res.stderr)


def _suite(path: Path, url: str, image: str, inventory: Path, duration: float, storage: bool = True) -> Path:
    text = f"""
[suite]
name = "cloud-e2e"
baseline = "cloud"
min_repetitions = 1
max_repetitions = 1
warmup = 0
monitor = false
inventory = "{inventory}"

[environments.cloud]
driver = "cloud"
shape = "m1.small"
endpoint = "{url}"
image = "{image}"
ssh_override = "all"
max_instances = 2

[[workloads]]
name = "system"
params = {{ test = "dhrystone", copies = "1", duration = {duration} }}
"""
    if storage:
        text += """
[[workloads]]
name = "dd"
params = { file_size_mb = 8, block_mb = 1 }
condition = { storage = "cloud-volume" }
"""
    path.write_text(text)
    return path


@pytest.mark.slow
def test_run_flow_workload_volume_and_no_secrets(ec2, moto_url, image, testbed2, tmp_path):
    db = tmp_path / "r.sqlite"
    suite = _suite(tmp_path / "cloud.toml", moto_url, image, testbed2, 0.3)
    res = _vb("run", str(suite), "--db", str(db), "--json")
    assert res.returncode == 0, res.stderr
    assert "cloud plan for cloud: up to 1 instance(s)" in " ".join(res.stderr.split())
    data = json.loads(res.stdout)
    rows = {r["metric"]: r for r in data["results"]}
    assert rows["dhrystone"]["n"] == 1 and rows["dhrystone"]["metadata"]["backend"] == "moto+testbed"
    disk = [r for r in data["results"] if r["workload"] == "dd"]
    assert disk and all(r["n"] == 1 for r in disk)
    cond = disk[0]["condition"]
    assert cond.get("storage_mechanism", "").startswith("stand-in") and cond["volume_id"].startswith("vol-")
    assert _tagged(ec2, data["run_id"]) == {"instances": [], "volumes": [], "snapshots": []}
    exported = _vb("export", data["run_id"], "--format", "json", "--db", str(db))
    _no_secrets(db.read_bytes().decode("latin-1"), res.stdout, res.stderr, exported.stdout)


def _kill_marked(run_id: str) -> None:
    """Processes of the run's instances (marked VIRTBENCH_INSTANCE=<run id>-...; testbed hosts share
    this machine's process table)."""
    mark = f"VIRTBENCH_INSTANCE={run_id}-".encode()
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in env.read_bytes():
                os.kill(int(env.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _run_until_instance(ec2, suite: Path, db: Path) -> tuple[subprocess.Popen, dict, str]:
    proc = subprocess.Popen([sys.executable, "-m", "virtbench.cli", "run", str(suite), "--db", str(db)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not _live(ec2) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    (inst,) = _live(ec2)
    time.sleep(3)  # into the workload
    return proc, inst, next(t["Value"] for t in inst["Tags"] if t["Key"] == "virtbench:run")


@pytest.mark.slow
def test_cleanup_after_a_killed_run(ec2, moto_url, image, testbed2, tmp_path):
    db = tmp_path / "k.sqlite"
    suite = _suite(tmp_path / "long.toml", moto_url, image, testbed2, 30, storage=False)
    proc, inst, run_id = _run_until_instance(ec2, suite, db)
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    _kill_marked(run_id)  # its workload on the stand-in host (a real instance dies with its termination)
    assert len(_live(ec2, run_id)) == 1  # the killed run could not tear down
    res = _vb("cleanup", "--run", run_id, "--db", str(db))  # the API comes from the stored run
    assert res.returncode == 0, res.stderr
    assert f"instance {inst['InstanceId']}" in res.stdout
    assert _tagged(ec2, run_id) == {"instances": [], "volumes": [], "snapshots": []}


@pytest.mark.slow
def test_ctrl_c_tears_down_the_cloud_instances(ec2, moto_url, image, testbed2, tmp_path):
    suite = _suite(tmp_path / "long.toml", moto_url, image, testbed2, 30, storage=False)
    proc, inst, run_id = _run_until_instance(ec2, suite, tmp_path / "i.sqlite")
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert _tagged(ec2, run_id) == {"instances": [], "volumes": [], "snapshots": []}


@pytest.mark.slow
def test_lifecycle_checks_on_the_cloud_driver(ec2, moto_url, image, testbed2, tmp_path):
    from virtbench.run import checks

    out = checks.run_checks("cloud", count=2, options={"endpoint": moto_url, "image": image, "ssh_override": "all"},
                            inventory=str(testbed2))
    by = {c["name"]: c for c in out["checks"]}
    assert list(by) == ["start_many", "reboot_many", "attach_disk", "snapshot_boot", "terminate"]
    assert out["passed"], out["checks"]
    assert out["backend"] == "moto+testbed"
    assert "API path only" in by["reboot_many"]["detail"] and "API path only" in by["snapshot_boot"]["detail"]
    assert "dd wrote and read 32 MiB" in by["attach_disk"]["detail"]
    assert "terminated" in by["terminate"]["detail"]
    ours = [{"Name": "tag-key", "Values": ["virtbench:run"]}]  # moto's own AMIs have volumes too
    assert _live(ec2) == [] and ec2.describe_volumes(Filters=ours)["Volumes"] == []
    assert ec2.describe_snapshots(OwnerIds=["self"], Filters=ours)["Snapshots"] == []
