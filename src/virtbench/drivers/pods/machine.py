"""A pod's container as a `Machine`: every command through the API server's exec subresource.

No node shell and no kubectl: the official client opens the exec websocket (v5.channel.k8s.io,
so stdin can be closed and a command that reads to EOF ends), stdout and stderr come back as
channels and the exit status from the error channel. put/get stream file bytes over stdin and
stdout; spawn starts a process group in the pod with setsid and returns its id, as on SSH hosts.
"""

from __future__ import annotations

import base64
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...model import ExecResult
from ...machines.base import Machine, MachineUnreachable, Process

EXEC_SLACK = 30.0  # seconds the client waits past a command's own timeout (which runs in the pod)
CHUNK = 1 << 20


class KubePodMachine(Machine):
    kind = "kubernetes-pod"

    def __init__(self, api: Any, namespace: str, pod: str, container: str, address: str | None = None):
        super().__init__(f"{namespace}/{pod}", address)
        self.api, self.namespace, self.pod, self.container = api, namespace, pod, container

    def _command(self, argv: Sequence[str], timeout: float | None, env: Mapping[str, str] | None,
                 cwd: str | None) -> list[str]:
        cmd = [str(a) for a in argv]
        if timeout is not None:  # coreutils timeout in the pod, so the command dies there too
            cmd = ["timeout", "-k", "5", f"{timeout:.3f}".rstrip("0").rstrip("."), *cmd]
        if env:
            cmd = ["env", *(f"{k}={v}" for k, v in env.items()), *cmd]
        if cwd:
            cmd = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, *cmd]
        return cmd

    def run(self, argv: Sequence[str], timeout: float | None = None, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        from kubernetes import client

        argv = [str(a) for a in argv]
        started = time.time()
        # A client of its own per command: stream() swaps the client's request function for the
        # websocket's while it connects, which breaks any other call on a shared client meanwhile.
        own = client.ApiClient(self.api.configuration)
        try:
            ws = stream(client.CoreV1Api(own).connect_get_namespaced_pod_exec, self.pod, self.namespace,
                        command=self._command(argv, timeout, env, cwd), container=self.container,
                        stdin=stdin is not None, stdout=True, stderr=True, tty=False,
                        _preload_content=False, binary=True)
        except ApiException as exc:  # the pod is gone, or not running, or the server refused
            own.close()
            return ExecResult(argv, 126, "", f"exec in {self.name} refused: {exc.status} {exc.reason}: "
                              f"{_status_message(exc)}", started, time.time())
        except Exception as exc:  # the websocket did not open (API server down, TLS)
            own.close()
            return ExecResult(argv, 255, "", f"exec in {self.name} failed: {exc}", started, time.time())
        out, err = bytearray(), bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout + EXEC_SLACK
        timed_out = False
        try:
            if stdin is not None:
                for i in range(0, len(stdin), CHUNK):
                    ws.write_stdin(stdin[i:i + CHUNK])
                ws.close_channel(0)
            while ws.is_open():
                ws.update(timeout=1.0)
                out += ws.read_stdout(timeout=0) or b""
                err += ws.read_stderr(timeout=0) or b""
                if deadline is not None and time.monotonic() > deadline:
                    timed_out = True
                    break
            out += ws.read_stdout(timeout=0) or b""
            err += ws.read_stderr(timeout=0) or b""
            code, why = (124, "") if timed_out else _exit_status(ws)
            if why:  # the command never ran: the API server's or kubelet's reason
                err += f"exec in {self.name} failed: {why}".encode()
        except Exception as exc:  # connection lost mid-command (node or API server gone)
            err += f"\nexec stream to {self.name} broke: {exc}".encode()
            code = 255
        finally:
            ws.close()
            own.close()
        ended = time.time()
        # the in-pod timeout's own exit statuses
        timed_out = timed_out or (timeout is not None and ended - started >= timeout and code in (124, 137))
        return ExecResult(argv, code, out.decode(errors="replace"), err.decode(errors="replace"), started, ended,
                          timed_out)

    def put(self, src: Path, dest: str, mode: int | None = None) -> None:
        script = 'cat > "$1"' + (f' && chmod {mode:o} "$1"' if mode is not None else "")
        res = self.run(["sh", "-c", script, "sh", dest], timeout=600, stdin=Path(src).read_bytes())
        if not res.ok:
            raise OSError(f"copy of {src} to {self.name}:{dest} failed: {res.describe_failure()}")

    def get(self, src: str, dest: Path) -> None:
        res = self.run(["base64", src], timeout=600)  # the channel is binary, but keep the bytes exact
        if not res.ok:
            raise OSError(f"copy of {self.name}:{src} to {dest} failed: {res.describe_failure()}")
        Path(dest).write_bytes(base64.b64decode(res.stdout))

    def spawn(self, argv: Sequence[str], log: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> Process:
        inner = " ".join(shlex.quote(a) for a in self._command(argv, None, env, cwd))
        # setsid: a group of its own whose id is the printed pid (a background job is no group leader)
        script = f"setsid sh -c {shlex.quote('exec ' + inner)} > {shlex.quote(log)} 2>&1 < /dev/null & echo $!"
        res = self.run(["sh", "-c", script], timeout=60)
        if not res.ok or not res.stdout.strip().isdigit():
            raise MachineUnreachable(self.name, f"could not start {argv[0]}: {res.describe_failure()}")
        return Process(self, int(res.stdout.strip()), log, [str(a) for a in argv])

    def kill_group(self, pgid: int, grace: float = 2.0) -> None:
        script = ('kill -TERM -"$1" 2>/dev/null; i=0; while [ "$i" -lt "$2" ] && kill -0 -"$1" 2>/dev/null; '
                  'do sleep 0.1; i=$((i+1)); done; kill -KILL -"$1" 2>/dev/null; true')
        self.run(["sh", "-c", script, "sh", str(pgid), str(max(1, int(grace * 10)))], timeout=grace + 30)

    def connect(self) -> None:
        res = self.run(["true"], timeout=30)
        if not res.ok:
            raise MachineUnreachable(self.name, res.describe_failure())


def _exit_status(ws: Any) -> tuple[int, str]:
    """(exit status, why it never ran) from the error channel: Success, NonZeroExitCode with the code
    as a cause, or a failure to start it (not found, kubelet unreachable: its message)."""
    import yaml

    raw = ws.read_channel(3)
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    if not raw:
        return 255, "the stream closed without an exit status (connection cut)"
    status = yaml.safe_load(raw)
    if status.get("status") == "Success":
        return 0, ""
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message")), ""
    return 126, str(status.get("message") or raw).strip()


def _status_message(exc: Any) -> str:
    import json

    try:
        return json.loads(exc.body).get("message", "")
    except Exception:
        return str(exc.body or "")[:200]
