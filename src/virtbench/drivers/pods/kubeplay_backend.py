"""The kube-play backend: `podman kube play` runs the manifests on a machine (this one or an SSH
host), through that machine's executor, with the engine settings the container driver probed.

Two things kube play cannot take as flags come from a containers.conf made for each call (handed to
podman as CONTAINERS_CONF, which replaces the system's files for that call only): the probed ulimits
(`default_ulimits`; the defaults are refused on some machines) and the infra image. Podman's own
infra image is built from catatonit, which may be missing; ours is the guest image with
`CMD sleep infinity`, built once per machine and guest image (PAUSE_REPO:<hash>).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ... import image
from ..container import engine as engines
from ...errors import UserError
from ...machines import Machine, ledger
from . import CONTAINER, manifests, phases

PAUSE_REPO = "localhost/virtbench-pause"
TIMEOUT = 300.0
# $1 = containers.conf text; the rest is the podman command. The file lives only for the call.
_WITH_CONF = ('f=$(mktemp) && printf %s "$1" > "$f" || exit 125; shift; '
              'CONTAINERS_CONF="$f" "$@"; rc=$?; rm -f "$f"; exit $rc')
_BUILD = 'd=$(mktemp -d) || exit 125; "$@" "$d"; rc=$?; rmdir "$d"; exit $rc'

_paused: set[tuple[str, str]] = set()  # (machine, pause tag) known to exist


def _index(pod: str) -> int:
    m = re.search(r"-pod-(\d+)$", pod)
    return int(m.group(1)) if m else 0


class KubePlay:
    def __init__(self, machine: Machine, engine: engines.Engine, info: image.ImageInfo):
        if engine.cmd != "podman":
            raise UserError("the pods driver's kube-play backend needs podman (docker has no kube play)",
                            hint="apt-get install podman runc, or use backend = \"kubernetes\"")
        self.machine, self.engine, self.info = machine, engine, info
        self.pause_tag = f"{PAUSE_REPO}:{info.hash}"

    def _run(self, argv: list[str], timeout: float, stdin: bytes | None = None):
        """Every podman call of this backend, from the engine's private directory: kube play starts the
        pods' conmons, which drop their `oom` marker in the working directory (engine.cwd_for)."""
        return self.machine.run(argv, timeout=timeout, stdin=stdin, cwd=engines.cwd_for(self.machine))

    def _cli(self, *args: str, timeout: float = engines.CLI_TIMEOUT, stdin: bytes | None = None):
        return self._run([*self.engine.cli(), *args], timeout=timeout, stdin=stdin)

    def _pause_image(self) -> None:
        key = (self.machine.name, self.pause_tag)
        if key in _paused or self._cli("image", "exists", self.pause_tag, timeout=60).ok:
            _paused.add(key)
            return
        containerfile = f'FROM {self.info.tag}\nCMD ["sleep", "infinity"]\n'
        res = self._run(["sh", "-c", _BUILD, "sh", *self.engine.cli(), "build", "--pull=never",
                         "-t", self.pause_tag, "-f", "-"], timeout=600, stdin=containerfile.encode())
        if not res.ok:
            raise UserError(f"building the pods' infra image {self.pause_tag} failed: {engines.tail(res)}")
        _paused.add(key)

    def conf(self) -> str:
        ulimits = ", ".join(json.dumps(u) for u in self.engine.ulimits)
        return (f"[containers]\ndefault_ulimits = [{ulimits}]\n"
                f"[engine]\ninfra_image = {json.dumps(self.pause_tag)}\n")

    def play(self, docs: list[dict[str, Any]]) -> None:
        """Create and start everything in docs; a failure raises with podman's own reason."""
        self._pause_image()
        res = self._run(["sh", "-c", _WITH_CONF, "sh", self.conf(), *self.engine.cli(), "kube", "play", "-"],
                        timeout=TIMEOUT, stdin=manifests.to_yaml(playable(docs)).encode())
        if not res.ok:
            text = (res.stderr + "\n" + res.stdout).splitlines()
            lines = [ln.strip() for ln in text if ln.strip() and (
                ln.lstrip("[").startswith(("Error", "starting container")) or "error" in ln.lower())]
            errors = [ln for ln in lines if ln.startswith("Error")]  # podman's own summary, when it gave one
            reason = errors[-1] if errors else " | ".join(dict.fromkeys(lines[-3:])) or engines.tail(res)
            if re.search(r"initializing source|pull|image not known|manifest unknown", reason, re.I):
                reason = f"image pull failed: {reason}"
            raise UserError(f"podman kube play failed: {reason}")

    def pods(self, group: str) -> list[str]:
        res = self._cli("pod", "ps", "--filter", f"label=virtbench.group={group}", "--format", "{{.Name}}", timeout=60)
        return sorted(res.stdout.split(), key=_index)

    def _inspect(self, *what: str) -> Any:
        res = self._cli(*what, timeout=60)
        if not res.ok:
            raise UserError(f"podman {' '.join(what)} failed: {engines.tail(res)}")
        out = json.loads(res.stdout)
        return out[0] if isinstance(out, list) else out

    def describe(self, pod: str) -> dict[str, Any]:
        """Phases, address and image of one pod."""
        p = self._inspect("pod", "inspect", pod)
        infra = self._inspect("inspect", p["InfraContainerID"])
        main = self._inspect("inspect", container_name(pod))
        nets = (infra.get("NetworkSettings") or {}).get("Networks") or {}
        address = next((n.get("IPAddress") for n in nets.values() if n.get("IPAddress")), None)
        return {"phases": phases.from_podman(p, infra, main), "address": address, "image_id": main.get("Image"),
                "networks": sorted(nets)}

    def remove_pod(self, pod: str) -> None:
        res = self._cli("pod", "rm", "-f", "-t", "0", pod)
        if not res.ok and "no pod with name" not in (res.stderr + res.stdout).lower():
            raise UserError(f"podman pod rm {pod} failed: {engines.tail(res)}")

    def remove_group(self, group: str, claims: list[str]) -> None:
        """Every pod of the group and the volumes of its claims; safe when some are gone already."""
        for pod in self.pods(group):
            self.remove_pod(pod)
        for name in claims:
            self.remove_volume(name)

    def remove_volume(self, name: str) -> None:
        res = self._cli("volume", "rm", "-f", name)
        if not res.ok and "no such volume" not in (res.stderr + res.stdout).lower():
            raise UserError(f"podman volume rm {name} failed: {engines.tail(res)}")


def leftovers(machine: Machine) -> list[str]:
    """Remove the kube-play pods and volumes on the machine whose owner (by their labels) is gone: a
    killed run's. The ledger's finder of this kind (machines/ledger.py)."""
    try:
        if engines.pick_engine("auto", machine) != "podman":
            return []  # no kube play without podman
    except UserError:
        return []
    cli = engines.cli_for(machine, "podman")
    removed = []
    for kind, listing, rm in (("pod", "ps", ["pod", "rm", "-f", "-t", "0"]), ("volume", "ls", ["volume", "rm", "-f"])):
        res = machine.run([*cli, kind, listing, "--filter", "label=virtbench=1", "--format",
                           "{{.Name}} {{json .Labels}}"], timeout=60)
        for line in res.stdout.splitlines() if res.ok else []:
            name, _, text = line.partition(" ")
            try:
                labels = json.loads(text or "{}") or {}
            except ValueError:
                continue
            if "virtbench.cond" in labels or not ledger.gone(labels, manifests.label_value):
                continue  # a condition's volume is the conditions' finder's (conditions/hostres.py)
            if machine.run([*cli, *rm, name], timeout=engines.CLI_TIMEOUT).ok:
                removed.append(f"kube-play {kind} {name} (run {labels.get('virtbench.run', '?')})")
    return removed


def playable(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents kube play acts on: it has no PersistentVolumes (it ignores them; an NFS share's
    claim carries podman volume annotations for the same export instead)."""
    return [d for d in docs if d["kind"] != "PersistentVolume"]


def container_name(pod: str) -> str:
    return f"{pod}-{CONTAINER}"
