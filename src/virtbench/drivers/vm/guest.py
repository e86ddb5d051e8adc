"""What runs inside a virtbench VM before the benchmark tools: the boot glue.

The guest image is a plain Debian root without an init system (mmdebstrap --variant=apt). The VM
driver adds a few files to the VM's disk, never changing a file of the image itself:

- a minimal initramfs (`INITRD_INIT`, busybox and the image's own driver modules for the disk and
  NIC) that mounts the root disk and switches to it; the Debian initramfs works too but spends
  ~10 s in udev under TCG;
- `ROOT_INIT`, the guest's PID 1: prints the init marker on the serial console first thing, mounts
  the API filesystems, sets up the network, writes the run's SSH public key from the kernel
  command line, starts sshd, prints a second marker, and hands PID 1 to busybox init (reaps
  orphans, handles `reboot`);
- an sshd configuration and host key (the host key's public half is pinned on the host side).

Markers are single lines `VIRTBENCH-<WHAT> key=value ...` on the console; the host's console
reader timestamps each line on arrival.
"""

from __future__ import annotations

import hashlib

GLUE_DIR = "/opt/virtbench/vm"
ROOT_INIT_PATH = f"{GLUE_DIR}/init"
SSHD_CONFIG_PATH = f"{GLUE_DIR}/sshd_config"
HOST_KEY_PATH = f"{GLUE_DIR}/ssh_host_ed25519_key"
INITTAB_PATH = "/etc/inittab"  # busybox init reads only this path; the image has no such file

MARK_INITRD = "VIRTBENCH-INITRD"
MARK_INIT = "VIRTBENCH-INIT"
MARK_SSHD = "VIRTBENCH-SSHD"
MARK_FAIL = "VIRTBENCH-FAIL"

# QEMU user-mode networking: the guest is 10.0.2.15 behind a NAT whose gateway is 10.0.2.2.
GUEST_IP = "10.0.2.15"
GATEWAY = "10.0.2.2"

# Modules the initramfs loads, with what they need first (resolved from the image's modules.dep).
# The host names the ones a VM's devices need on the kernel command line (vb.mods=a,b,c).
INITRD_MODULES = ("virtio_pci", "virtio_mmio", "virtio_blk", "virtio_net", "virtio_rng", "virtio_scsi",
                  "sd_mod", "ata_piix", "ata_generic", "e1000", "e1000e", "8139cp", "8139too")

INITRD_INIT = r"""#!/bin/busybox sh
# virtbench initramfs: load the disk and NIC drivers, mount the root disk, switch to it.
B=/bin/busybox
$B mount -t devtmpfs dev /dev
$B mount -t proc proc /proc
exec </dev/console >/dev/console 2>&1
echo "VIRTBENCH-INITRD uptime=$($B cut -d' ' -f1 /proc/uptime)"
mods="$($B cat /modules.list)" root=/dev/vda init=/opt/virtbench/vm/init wait=60 fstype=ext4
for arg in $($B cat /proc/cmdline); do
  case "$arg" in
    vb.mods=*) mods="$(echo "${arg#vb.mods=}" | $B tr , ' ')" ;;
    root=*) root="${arg#root=}" ;;
    init=*) init="${arg#init=}" ;;
    rootwait=*) wait="${arg#rootwait=}" ;;
    rootfstype=*) fstype="${arg#rootfstype=}" ;;
  esac
done
for m in $mods; do $B insmod "/modules/$m.ko" || echo "virtbench initramfs: cannot load module $m"; done
n=0
while [ ! -b "$root" ]; do
  [ "$n" = 1 ] && echo "virtbench initramfs: waiting for root device $root"
  n=$((n + 1))
  if [ "$n" -gt $((wait * 100)) ]; then
    echo "VIRTBENCH-FAIL root device $root did not appear within $wait s"
    while :; do $B sleep 3600; done
  fi
  $B usleep 10000
done
if ! $B mount -t "$fstype" -o rw "$root" /root; then
  echo "VIRTBENCH-FAIL cannot mount root device $root"
  while :; do $B sleep 3600; done
fi
$B mount --move /dev /root/dev
$B mount --move /proc /root/proc
exec $B switch_root /root "$init"
"""

ROOT_INIT = r"""#!/bin/sh
# PID 1 of a virtbench VM. The marker comes first: the host times "guest init started" by it.
# Shell builtins and busybox only (one binary): under TCG every new binary costs translation time.
read -r up _ < /proc/uptime
echo "VIRTBENCH-INIT uptime=$up"
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
B=/usr/bin/busybox
read -r CMDLINE < /proc/cmdline
arg() { for a in $CMDLINE; do case "$a" in "$1"=*) echo "${a#*=}"; return;; esac; done; }
[ -d /sys/kernel ] || $B mount -t sysfs sys /sys
$B mount -t tmpfs -o mode=0755,nosuid,nodev run /run
$B mkdir -p /dev/pts /dev/shm /run/sshd /run/vb
$B mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
$B mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm
[ -e /dev/fd ] || $B ln -s /proc/self/fd /dev/fd
h="$(arg vb.hostname)"
$B hostname "${h:-vbguest}"
key="$(arg vb.key)"
[ -n "$key" ] && echo "ssh-ed25519 $key virtbench" > /run/vb/authorized_keys
$B chmod 600 /run/vb/authorized_keys 2>/dev/null
# With the image's own initramfs, nothing has loaded the NIC and RNG drivers (no udev here).
nicmod="$(arg vb.nicmod)"
[ -n "$nicmod" ] && modprobe -a -q "$nicmod" virtio_rng
# sshd forks at once, then binds 0.0.0.0:22 and writes its pid file (= listening); the network
# comes up meanwhile.
/usr/sbin/sshd -r -f /opt/virtbench/vm/sshd_config
$B ip link set lo up
# eth0 with virtbench's initramfs; a udev-renamed one (ens3 ...) with the image's own.
nic=""
for d in /sys/class/net/*; do [ "${d##*/}" = lo ] || { nic="${d##*/}"; break; }; done
if [ -n "$nic" ] && $B ip link set "$nic" up; then
  $B ip addr add 10.0.2.15/24 dev "$nic" && $B ip route add default via 10.0.2.2
else
  echo "VIRTBENCH-FAIL no network interface (no driver for the NIC?)"
fi
n=0
while [ ! -s /run/sshd.pid ] && [ $n -lt 6000 ]; do $B usleep 10000; n=$((n + 1)); done
if [ -s /run/sshd.pid ]; then
  read -r up _ < /proc/uptime
  echo "VIRTBENCH-SSHD uptime=$up"
else
  echo "VIRTBENCH-FAIL sshd did not start"
fi
exec $B init
"""

INITTAB = """# virtbench VM: busybox init only reaps orphans and handles reboot/poweroff (setup ran before it).
::ctrlaltdel:/usr/bin/busybox reboot
::shutdown:/usr/bin/busybox sync
"""

SSHD_CONFIG = f"""# virtbench VM sshd: key login for root only, with the run's key from the kernel command line.
Port 22
HostKey {HOST_KEY_PATH}
AuthorizedKeysFile /run/vb/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
PidFile /run/sshd.pid
MaxStartups 200:30:400
MaxSessions 200
Subsystem sftp internal-sftp
"""


def glue_hash() -> str:
    """Changes whenever a file the driver adds to the VM's disk changes (part of the disk cache key)."""
    h = hashlib.sha256()
    for part in (INITRD_INIT, ROOT_INIT, INITTAB, SSHD_CONFIG, GLUE_DIR, " ".join(INITRD_MODULES)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]
