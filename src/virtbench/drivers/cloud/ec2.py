"""The EC2 API through boto3: one client per target (provider, region, endpoint), tags, errors.

Credentials come only from boto3's own chain (environment, ~/.aws/credentials and config, a
profile name, instance roles); virtbench never reads, stores or prints them. Retries are
botocore's: its "standard" mode retries throttling (RequestLimitExceeded, Throttling ...),
5xx answers and connection errors with exponential backoff and jitter, up to `attempts` tries;
then `CloudApiError` says which call failed where, after how many tries, and why.
"""

from __future__ import annotations

import getpass
import socket
import threading
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ...errors import UserError

TAG_RUN = "virtbench:run"
TAG_OWNER = "virtbench:owner"
PROVIDERS = ("ec2",)  # EC2 and EC2-compatible APIs (Eucalyptus, OpenStack ec2-api, moto) via endpoint


class CloudApiError(UserError):
    """An EC2 call that failed after the library's retries."""

    def __init__(self, message: str, hint: str | None = None, code: str | None = None):
        super().__init__(message, hint)
        self.code = code


def owner() -> str:
    """Who made a resource: this machine's host name and user (the `virtbench:owner` tag)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in the environment or passwd
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Target:
    """Which EC2 API: never holds credentials."""

    provider: str = "ec2"
    region: str = "us-east-1"
    endpoint: str = ""   # an EC2 API URL; empty: AWS's endpoint for the region
    profile: str = ""    # a profile of ~/.aws/credentials; empty: boto3's default chain
    attempts: int = 5    # tries per call, botocore's retries included

    @property
    def endpoint_host(self) -> str:
        """host[:port] of the API, without any user:password@ part (what results may record)."""
        if not self.endpoint:
            return f"ec2.{self.region}.amazonaws.com"
        parts = urlsplit(self.endpoint)
        host = parts.hostname or self.endpoint
        return f"{host}:{parts.port}" if parts.port else host

    @classmethod
    def from_options(cls, opts: dict[str, Any]) -> "Target":
        provider = str(opts.get("provider") or "ec2")
        if provider not in PROVIDERS:
            raise UserError(f"cloud provider '{provider}' is not supported",
                            "use provider = \"ec2\" (AWS, or an EC2-compatible cloud with endpoint = URL)")
        endpoint = str(opts.get("endpoint") or "")
        if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
            raise UserError(f"cloud endpoint {endpoint!r} is not an http(s) URL",
                            "e.g. https://ec2.example.org:8773/services/compute")
        return cls(provider, str(opts.get("region") or "us-east-1"), endpoint, str(opts.get("profile") or ""),
                   max(1, int(opts.get("api_attempts") or 5)))


def tag_spec(kind: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    """TagSpecifications: the tags are set by the call that creates the resource, so a crash right
    after it never leaves an untagged (unfindable) resource behind."""
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


class Ec2:
    """A thread-safe boto3 EC2 client for one target; calls raise CloudApiError."""

    def __init__(self, target: Target):
        import boto3
        from botocore.config import Config

        self.target = target
        session = boto3.session.Session(profile_name=target.profile or None, region_name=target.region)
        config = Config(retries={"mode": "standard", "total_max_attempts": target.attempts},
                        connect_timeout=10, read_timeout=60, max_pool_connections=64)
        self.client = session.client("ec2", endpoint_url=target.endpoint or None, config=config)

    def __call__(self, op: str, **kwargs) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        where = self.target.endpoint_host
        try:
            return getattr(self.client, op)(**kwargs)
        except NoCredentialsError:
            raise CloudApiError(f"EC2 {op} at {where}: no credentials found",
                                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in "
                                "~/.aws/credentials (option profile = NAME)", "NoCredentials") from None
        except ClientError as exc:
            err = exc.response.get("Error", {})
            tries = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
            code = err.get("Code", "?")
            raise CloudApiError(f"EC2 {op} at {where} failed after {tries} attempt(s): {code}: "
                                f"{err.get('Message', '')}".rstrip(": "), _hint(code), code) from None
        except BotoCoreError as exc:
            raise CloudApiError(f"EC2 {op} at {where} failed: {type(exc).__name__}: {exc}",
                                "check the endpoint URL, the network, and the region") from None


def _hint(code: str) -> str | None:
    if "Throttl" in code or code in ("RequestLimitExceeded", "SlowDown"):
        return "the API kept throttling after botocore's retries with backoff; start fewer instances at once " \
               "or raise api_attempts"
    if code in ("AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch"):
        return "check the credentials in the environment or ~/.aws/credentials, and their permissions"
    if code.startswith("InvalidAMIID"):
        return "check the image option: an image id of this region"
    return None


_clients: dict[Target, Ec2] = {}
_lock = threading.Lock()


def client(target: Target) -> Ec2:
    with _lock:
        if target not in _clients:
            _clients[target] = Ec2(target)
        return _clients[target]


_backends: dict[str, str] = {}


def backend(target: Target) -> str:
    """What answers the API: "moto" for moto's server (it serves /moto-api/), else the endpoint's
    host. Recorded with every result."""
    if not target.endpoint:
        return target.endpoint_host
    if target.endpoint not in _backends:
        found = target.endpoint_host
        try:
            # moto's configuration: a small JSON object (its state dump, data.json, takes seconds to
            # make once EC2 holds its images, and a busy machine then mistook moto for a cloud)
            url = target.endpoint.rstrip("/") + "/moto-api/config"
            with urllib.request.urlopen(url, timeout=3) as resp:  # noqa: S310 - the user's endpoint
                if 200 <= resp.status < 300 and resp.read(1) == b"{":
                    found = "moto"
        except Exception:  # noqa: BLE001 - not moto
            pass
        _backends[target.endpoint] = found
    return _backends[target.endpoint]


def filters(**tags: str) -> list[dict[str, Any]]:
    """Filters on virtbench's tags, e.g. filters(run=RUN_ID) or filters(owner=owner())."""
    keys = {"run": TAG_RUN, "owner": TAG_OWNER}
    return [{"Name": f"tag:{keys[k]}", "Values": [v]} for k, v in tags.items()]
