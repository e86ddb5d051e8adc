"""Pod start phases and the reason a pod is not running, from either backend's objects (pure).

Kubernetes: the pod object (as the API returns it, camelCase JSON): created = metadata
.creationTimestamp, then the times the PodScheduled, Initialized, ContainersReady and Ready
conditions became True, and the container's own start. The API stores these times in whole
seconds (RFC 3339 without a fraction), so they are recorded with RESOLUTION["kubernetes"].

kube-play: podman has no scheduler and no conditions; its inspect output gives the pod's creation,
the infra (sandbox) container's start and the main container's creation and start, in nanoseconds.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from . import CONTAINER

CONDITIONS = (("PodScheduled", "scheduled"), ("Initialized", "initialized"),
              ("ContainersReady", "containers_ready"), ("Ready", "ready"))
RESOLUTION = {"kubernetes": 1.0, "kube-play": 1e-9}  # seconds
# The instance lifecycle phases (drivers/base.py) a pod's own timestamps give: these carry the
# backend's resolution; requested and ready are this machine's clock.
LIFECYCLE = {"created": "created", "running": "container_started"}


def timestamp(text: str) -> float:
    """RFC 3339 (Z or an offset, any fraction up to ns) -> epoch seconds."""
    m = re.match(r"^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:\.(\d+))?\s*(Z|[+-]\d\d:?\d\d)$", str(text).strip())
    if not m:
        raise ValueError(f"unreadable timestamp {text!r}")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    base = datetime.fromisoformat(m.group(1).replace(" ", "T") + zone)
    return int(base.timestamp()) + int((m.group(2) or "0")[:9].ljust(9, "0")) / 1e9


def _container_status(pod: dict[str, Any]) -> dict[str, Any]:
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        if st.get("name") == CONTAINER:
            return st
    return {}


def from_pod_object(pod: dict[str, Any]) -> dict[str, float]:
    """Phases of a Kubernetes pod object, in the order they happened (only those that did)."""
    out: dict[str, float] = {}
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if created:
        out["created"] = timestamp(created)
    conds = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    for ctype, phase in CONDITIONS:
        c = conds.get(ctype)
        if c and c.get("status") == "True" and c.get("lastTransitionTime"):
            out[phase] = timestamp(c["lastTransitionTime"])
    running = ((_container_status(pod).get("state") or {}).get("running") or {}).get("startedAt")
    if running:
        out["container_started"] = timestamp(running)
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def waiting_reason(pod: dict[str, Any]) -> str | None:
    """The main container's waiting reason (ErrImagePull, ImagePullBackOff, ContainerCreating ...)."""
    return ((_container_status(pod).get("state") or {}).get("waiting") or {}).get("reason")


def not_running_reason(pod: dict[str, Any], events: list[dict[str, Any]] = ()) -> str:
    """Why a pod is not running: its phase, unmet conditions, the container's waiting state and the
    last warning events (what `kubectl describe pod` shows)."""
    status = pod.get("status") or {}
    parts = [f"phase {status.get('phase') or 'unknown'}"]
    for c in status.get("conditions") or []:
        if c.get("status") != "True" and (c.get("reason") or c.get("message")):
            parts.append(f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip())
    waiting = (_container_status(pod).get("state") or {}).get("waiting") or {}
    if waiting:
        parts.append(f"container {waiting.get('reason') or 'waiting'}: {waiting.get('message') or ''}".strip(": "))
    warned = [e for e in events if e.get("type") == "Warning"] or list(events)
    for e in warned[-3:]:
        parts.append(f"event {e.get('reason')}: {e.get('message')}")
    return "; ".join(dict.fromkeys(parts))


def from_podman(pod: dict[str, Any], infra: dict[str, Any], main: dict[str, Any]) -> dict[str, float]:
    """Phases of a kube-play pod from `podman pod inspect`, and `podman inspect` of its infra and
    main containers."""
    out = {"created": timestamp(pod["Created"])}
    for phase, obj, key in (("sandbox_started", infra, "StartedAt"), ("container_created", main, "Created"),
                            ("container_started", main, "StartedAt")):
        value = (obj.get("State") or {}).get(key) if key == "StartedAt" else obj.get(key)
        if value and not str(value).startswith("0001-"):
            out[phase] = timestamp(value)
    return dict(sorted(out.items(), key=lambda kv: kv[1]))
