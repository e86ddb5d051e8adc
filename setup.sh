#!/usr/bin/env bash
# virtbench set-up for Debian 12, as root. Installs everything, then does one job:
#   bash setup.sh quick   -> builds the guest image and runs suites/quick.toml (host, container and VM)
#   bash setup.sh test    -> builds the guest image and the Kubernetes testbed's components, runs the test suite
#   bash setup.sh         -> installs only
set -euo pipefail
cd "$(dirname "$0")"
job="${1:-install}"

# Debian packages: build tools, the container engine, the image builder, the benchmark tools.
APT_PACKAGES=(
  build-essential make python3 python3-venv git ca-certificates
  podman runc crun runsc uidmap mmdebstrap e2fsprogs
  openmpi-bin libopenmpi-dev
  fio sysbench stress-ng iperf3 bonnie++ procps iproute2 systemd
  wrk nginx-light
  sockperf nbdkit libnbd-bin fuse3 qemu-utils qemu-block-extra tgt util-linux mount
  chromium librsvg2-bin
  qemu-system-x86 openssh-client openssh-server kmod
  nfs-ganesha nfs-ganesha-vfs rpcbind socat nfs-common
  liblapack-dev
  containerd containernetworking-plugins iptables curl
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
# pip is the last thing venv installs: without it an earlier attempt was cut short, so start again.
if [ ! -x .venv/bin/pip ]; then
  echo "==> python3 -m venv .venv"
  rm -rf .venv
  python3 -m venv .venv
fi
if ! cmp -s requirements.lock .venv/.requirements.lock; then
  echo "==> pip install -r requirements.lock"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.lock
  cp requirements.lock .venv/.requirements.lock
fi
.venv/bin/pip install -q --disable-pip-version-check --no-deps -e . >/dev/null

# Go builds the Kubernetes testbed (testbed/k8s, `virtbench testbed k8s up`); Debian 12's is too old.
# /usr/local/go when it is there, else the toolchain module from the Go module proxy, unpacked once
# into the user's cache (where virtbench looks for it). The proxy is the user's: GOPROXY, else what
# an installed go says (`go env GOPROXY`, which reads the user's go env file), else Go's own default.
GO_TOOLCHAIN=go1.26.8
go_dir="${XDG_CACHE_HOME:-$HOME/.cache}/virtbench/go/toolchain-$GO_TOOLCHAIN"
go_proxy() {
  local list="${GOPROXY:-}" entry
  if [ -z "$list" ] && command -v go >/dev/null; then list=$(go env GOPROXY 2>/dev/null || true); fi
  list="${list:-https://proxy.golang.org,direct}"  # the default Go documents for GOPROXY
  for entry in ${list//[,|]/ }; do
    case "$entry" in http://*|https://*|file://*) echo "${entry%/}"; return 0 ;; esac
  done
  echo "setup.sh: GOPROXY='$list' names no module proxy to fetch Go $GO_TOOLCHAIN from" >&2
  echo "  set GOPROXY to your proxy's URL, or install Go >= ${GO_TOOLCHAIN#go} as /usr/local/go" >&2
  return 1
}
if [ ! -x /usr/local/go/bin/go ] && [ ! -x "$go_dir/bin/go" ]; then
  proxy=$(go_proxy)
  echo "==> Go $GO_TOOLCHAIN from $proxy (golang.org/toolchain) into $go_dir"
  tmp=$(mktemp -d)
  curl -fsSL -o "$tmp/go.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$tmp/go.zip" "$tmp/x"
  mkdir -p "$(dirname "$go_dir")"
  mv "$tmp/x/golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" "$go_dir"
  chmod +x "$go_dir"/bin/* "$go_dir"/pkg/tool/*/*
  rm -rf "$tmp"
fi

echo "==> make -C native"
make -s -C native

case "$job" in
  install) echo "installed; try: .venv/bin/virtbench doctor" ;;
  quick)
    .venv/bin/virtbench image build
    .venv/bin/virtbench run suites/quick.toml ;;
  test)
    .venv/bin/virtbench image build
    # the live Kubernetes tests' cluster: built once per pin into the user's cache (minutes cold)
    .venv/bin/virtbench testbed k8s build
    # pytest exits 5 when it collected nothing: that is a failure here too. --durations: each run
    # leaves the slowest tests' times in its log (what the per-test timeout and the order rest on).
    .venv/bin/python -m pytest -q -ra --durations=20 ;;
  *) echo "setup.sh: unknown job '$job' (use: quick, test, or nothing)" >&2; exit 2 ;;
esac
