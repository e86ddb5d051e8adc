"""Removing cloud resources: one instance's at teardown, and tagged leftovers after a crash
(`virtbench cleanup --run ID` / `--all-of-mine`). Everything virtbench creates carries the tags
virtbench:run and virtbench:owner from the call that creates it, so the tags find all of it."""

from __future__ import annotations

from typing import Any

from . import ec2 as api
from .ec2 import CloudApiError, Ec2

LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


def wait_for(ec2: Ec2, waiter: str, delay: int = 2, attempts: int = 150, **kwargs) -> None:
    from botocore.exceptions import WaiterError

    try:
        ec2.client.get_waiter(waiter).wait(WaiterConfig={"Delay": delay, "MaxAttempts": attempts}, **kwargs)
    except WaiterError as exc:
        raise CloudApiError(f"EC2 at {ec2.target.endpoint_host}: waiting for {waiter} failed: {exc}") from None


def terminate(ec2: Ec2, instance_ids: list[str], wait: bool = True) -> None:
    if not instance_ids:
        return
    ec2("terminate_instances", InstanceIds=instance_ids)
    if wait:
        wait_for(ec2, "instance_terminated", InstanceIds=instance_ids)


def delete_volumes(ec2: Ec2, volume_ids: list[str]) -> None:
    """Detach (forcibly: the instance is going away) and delete; volumes already gone are fine."""
    if not volume_ids:
        return
    vols = ec2("describe_volumes", Filters=[{"Name": "volume-id", "Values": volume_ids}])["Volumes"]
    attached = [v["VolumeId"] for v in vols if v.get("Attachments")]
    for v in vols:
        for a in v.get("Attachments", []):
            try:  # naming the instance too: moto needs it, EC2 accepts it
                ec2("detach_volume", VolumeId=v["VolumeId"], InstanceId=a["InstanceId"], Force=True)
            except CloudApiError as exc:
                if exc.code not in ("IncorrectState", "InvalidAttachment.NotFound"):
                    raise
    if attached:
        wait_for(ec2, "volume_available", VolumeIds=attached)
    for v in vols:
        try:
            ec2("delete_volume", VolumeId=v["VolumeId"])
        except CloudApiError as exc:
            if exc.code != "InvalidVolume.NotFound":
                raise


def delete_snapshots(ec2: Ec2, snapshot_ids: list[str]) -> None:
    for sid in snapshot_ids:
        try:
            ec2("delete_snapshot", SnapshotId=sid)
        except CloudApiError as exc:
            if exc.code != "InvalidSnapshot.NotFound":
                raise


def find(ec2: Ec2, run_id: str | None = None, mine: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Live instances, volumes and snapshots tagged with the run id (or with this owner)."""
    if bool(run_id) == bool(mine):
        raise ValueError("give a run id or mine=True")
    tags = api.filters(run=run_id) if run_id else api.filters(owner=api.owner())
    reservations = ec2("describe_instances", Filters=tags + [{"Name": "instance-state-name",
                                                               "Values": LIVE_STATES}])["Reservations"]
    instances = [i for r in reservations for i in r["Instances"]]
    volumes = ec2("describe_volumes", Filters=tags)["Volumes"]
    snapshots = ec2("describe_snapshots", OwnerIds=["self"], Filters=tags)["Snapshots"]
    return {"instances": instances, "volumes": volumes, "snapshots": snapshots}


def _run_of(resource: dict[str, Any]) -> str:
    return next((t["Value"] for t in resource.get("Tags", []) if t["Key"] == api.TAG_RUN), "?")


def remove(ec2: Ec2, found: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Remove what `find` found: instances first (volumes attached to them detach), then volumes,
    then snapshots. Returns one line per resource removed."""
    done = []
    ids = [i["InstanceId"] for i in found["instances"]]
    terminate(ec2, ids)
    done += [f"instance {i['InstanceId']} (run {_run_of(i)}, was {i['State']['Name']})" for i in found["instances"]]
    delete_volumes(ec2, [v["VolumeId"] for v in found["volumes"]])
    done += [f"volume {v['VolumeId']} (run {_run_of(v)})" for v in found["volumes"]]
    delete_snapshots(ec2, [s["SnapshotId"] for s in found["snapshots"]])
    done += [f"snapshot {s['SnapshotId']} (run {_run_of(s)})" for s in found["snapshots"]]
    return done


def cleanup(target: api.Target, run_id: str | None = None, mine: bool = False,
            dry_run: bool = False) -> dict[str, Any]:
    ec2 = api.client(target)
    found = find(ec2, run_id, mine)
    listed = {k: [r.get("InstanceId") or r.get("VolumeId") or r.get("SnapshotId") for r in v] for k, v in found.items()}
    removed = [] if dry_run else remove(ec2, found)
    return {"backend": api.backend(target), "region": target.region, "run": run_id,
            "owner": api.owner() if mine else None, "found": listed, "removed": removed}


def targets(flags: dict[str, Any], suite: str | None = None,
            stored_envs: list[dict[str, Any]] | None = None) -> list[api.Target]:
    """Which APIs to clean: the cloud environments of a suite file (or of the stored run), with
    flags (provider, region, endpoint, profile) overriding them; flags alone without either."""
    options = _suite_options(suite) if suite else [e.get("options", {}) for e in stored_envs or []
                                                   if e.get("driver") == "cloud"]
    out: list[api.Target] = []
    for opts in options or [{}]:
        t = api.Target.from_options({**opts, **{k: v for k, v in flags.items() if v}})
        if t not in out:
            out.append(t)
    return out


def _suite_options(path: str) -> list[dict[str, Any]]:
    import tomllib
    from pathlib import Path

    from ...errors import UserError

    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"cannot read the suite {path}: {exc}") from None
    boot = doc.get("boot", {})
    found = [boot.get("options", {})] if boot.get("driver") == "cloud" else []
    found += [e for e in doc.get("environments", {}).values() if isinstance(e, dict) and e.get("driver") == "cloud"]
    if not found:
        raise UserError(f"the suite {path} has no cloud environment",
                        "name the API with --region/--endpoint instead")
    return found
