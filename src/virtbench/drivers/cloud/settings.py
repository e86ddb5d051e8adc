"""What a cloud environment's options mean: the cloud driver's options, and the Settings one
environment's options give (image per boot-grid size, instance type from the shape, SSH and the
cost guard), checked once before anything is started."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import UserError
from ..base import OptionSpec
from ...model import EnvSpec
from . import ec2 as api
from .ec2 import Target

STUDY_TYPES = ("m1.small", "c1.medium", "m1.large", "m1.xlarge", "c1.xlarge")  # EC2's own names

OPTIONS = {
    "provider": OptionSpec(str, "ec2", "cloud API: ec2 (AWS, or any EC2-compatible cloud with endpoint)",
                           choices=api.PROVIDERS),
    "region": OptionSpec(str, "us-east-1", "region name"),
    "endpoint": OptionSpec(str, "", "EC2 API URL of an EC2-compatible cloud (Eucalyptus, OpenStack ec2-api, "
                                    "moto); empty: AWS's endpoint of the region"),
    "profile": OptionSpec(str, "", "a profile of ~/.aws/credentials; empty: boto3's default credential chain"),
    "image": OptionSpec(str, "", "image id (ami-..., emi-...)"),
    "images": OptionSpec(str, "", "image per boot-grid image size: 1G=ami-a,2G=ami-b (virtbench boot)"),
    "image_size": OptionSpec(str, "auto", "set by virtbench boot: which of `images` (auto: `image`)"),
    "instance_type": OptionSpec(str, "", "instance type; empty: from the shape (shape_map, or the study's "
                                         "m1.small ... c1.xlarge, which EC2-compatible clouds name alike)"),
    "shape_map": OptionSpec(str, "", "shape -> instance type, e.g. m1.small=t3.small,c1.xlarge=c5.2xlarge"),
    "key_name": OptionSpec(str, "", "key pair name the instances get (its private key: key_file)"),
    "security_group": OptionSpec(str, "", "security group id (sg-...) or name; must let SSH in"),
    "subnet": OptionSpec(str, "", "subnet id (subnet-...); empty: the default VPC's"),
    "ssh_user": OptionSpec(str, "admin", "user name the image logs in as (Debian: admin, Ubuntu: ubuntu)"),
    "key_file": OptionSpec(str, "", "private key for SSH; empty: your ssh agent and ~/.ssh/config"),
    "address": OptionSpec(str, "public", "which address SSH dials", choices=("public", "private")),
    "host_keys": OptionSpec(str, "console", "how the instance's SSH host key is checked: from its console "
                                            "output (cloud-init prints it), or a known_hosts file",
                            choices=("console", "known_hosts")),
    "known_hosts": OptionSpec(str, "", "known_hosts file for host_keys = known_hosts (empty: your own)"),
    "max_instances": OptionSpec(int, 8, "cost guard: most instances of this environment at once"),
    "poll_interval": OptionSpec(float, 0.1, "seconds between state polls (the resolution of 'running')"),
    "running_timeout": OptionSpec(float, 600.0, "seconds an instance may take to reach running"),
    "ready_timeout": OptionSpec(float, 600.0, "seconds from running to ready (host key, SSH, kernels)"),
    "api_attempts": OptionSpec(int, 5, "tries per API call (botocore retries throttling with backoff)"),
    "ssh_override": OptionSpec(str, "", "tests only: inventory hosts SSH reaches instead of the instances "
                                        "(moto starts no machines); results say so in `backend`"),
}


@dataclass(frozen=True)
class Settings:
    target: Target
    image: str
    instance_type: str
    key_name: str
    security_group: str
    subnet: str
    ssh_user: str
    key_file: str
    address: str
    host_keys: str
    known_hosts: str
    max_instances: int
    poll_interval: float
    running_timeout: float
    ready_timeout: float
    ssh_override: str


def mapping(text: str, what: str) -> dict[str, str]:
    """"a=x,b=y" -> {a: x, b: y}."""
    out = {}
    for item in str(text or "").split(","):
        if item.strip():
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise UserError(f"{what} {item.strip()!r} is not KEY=VALUE", f"e.g. {what} = \"1G=ami-0abc,2G=ami-0def\"")
            out[key.strip()] = value.strip()
    return out


def from_env(env: EnvSpec) -> Settings:
    """The environment's options as the cloud driver uses them; UserError for a missing image or
    instance type."""
    o = env.options
    image = str(o.get("image") or "")
    size = str(o.get("image_size") or "auto")
    if size not in ("auto", ""):
        images = mapping(o.get("images", ""), "images")
        if size not in images:
            raise UserError(f"environment {env.name}: no image for size {size}",
                            f"set images = \"{size}=IMAGE_ID,...\" (sizes given: {', '.join(images) or 'none'})")
        image = images[size]
    if not image:
        raise UserError(f"environment {env.name}: the cloud driver needs an image",
                        "set image = \"ami-...\" (an image id of the region)")
    itype = str(o.get("instance_type") or "")
    if not itype:
        mapped = mapping(o.get("shape_map", ""), "shape_map")
        itype = mapped.get(env.shape.name) or (env.shape.name if env.shape.name in STUDY_TYPES else "")
    if not itype:
        raise UserError(f"environment {env.name}: shape {env.shape.name} has no instance type",
                        "set instance_type = \"...\", or shape_map = \"" + env.shape.name + "=TYPE\"")
    max_instances = int(o.get("max_instances") or 0)
    if max_instances < 1:
        raise UserError(f"environment {env.name}: max_instances must be at least 1")
    return Settings(Target.from_options(o), image, itype, str(o.get("key_name") or ""),
                    str(o.get("security_group") or ""), str(o.get("subnet") or ""), str(o.get("ssh_user") or ""),
                    str(o.get("key_file") or ""), str(o.get("address") or "public"),
                    str(o.get("host_keys") or "console"), str(o.get("known_hosts") or ""), max_instances,
                    float(o.get("poll_interval") or 0.1), float(o.get("running_timeout", 600.0)),
                    float(o.get("ready_timeout", 600.0)), str(o.get("ssh_override") or ""))
