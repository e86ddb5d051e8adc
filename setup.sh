#!/usr/bin/env bash
# virtbench set-up for Debian 12, as root. Installs everything, then does one job:
#   bash setup.sh quick   -> builds the guest image and runs suites/quick.toml (host vs container table)
#   bash setup.sh test    -> builds the guest image and runs the test suite
#   bash setup.sh         -> installs only
set -euo pipefail
cd "$(dirname "$0")"
job="${1:-install}"

# Debian packages: build tools, the container engine, the image builder, the benchmark tools.
APT_PACKAGES=(
  build-essential make python3 python3-venv git ca-certificates
  podman runc uidmap mmdebstrap e2fsprogs
  openmpi-bin libopenmpi-dev
  fio sysbench stress-ng iperf3 bonnie++ procps iproute2 systemd
  wrk nginx-light
  sockperf nbdkit libnbd-bin fuse3 qemu-utils qemu-block-extra tgt util-linux mount
  chromium librsvg2-bin
  qemu-system-x86 openssh-client openssh-server kmod
  nfs-ganesha nfs-ganesha-vfs rpcbind socat nfs-common
  liblapack-dev
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: these Debian packages are missing: ${missing[*]}" >&2
    echo "  run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "==> apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python environment with pinned dependencies.
if [ ! -x .venv/bin/python ]; then
  echo "==> python3 -m venv .venv"
  python3 -m venv .venv
fi
if ! cmp -s requirements.lock .venv/.requirements.lock; then
  echo "==> pip install -r requirements.lock"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.lock
  cp requirements.lock .venv/.requirements.lock
fi
.venv/bin/pip install -q --disable-pip-version-check --no-deps -e . >/dev/null

echo "==> make -C native"
make -s -C native

case "$job" in
  install) echo "installed; try: .venv/bin/virtbench doctor" ;;
  quick)
    .venv/bin/virtbench image build
    .venv/bin/virtbench run suites/quick.toml ;;
  test)
    .venv/bin/virtbench image build
    # pytest exits 5 when it collected nothing: that is a failure here too.
    .venv/bin/python -m pytest -q -ra ;;
  *) echo "setup.sh: unknown job '$job' (use: quick, test, or nothing)" >&2; exit 2 ;;
esac
