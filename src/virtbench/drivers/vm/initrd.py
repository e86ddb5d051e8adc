"""A minimal initramfs built from the guest image's own files: busybox, its libraries, driver modules.

Written as a plain (uncompressed) cpio "newc" archive by Python, so building it needs no tools and
the result is byte-for-byte reproducible (fixed mtimes, sorted entries).
"""

from __future__ import annotations

import os
import posixpath
import stat
import struct
from pathlib import Path

from . import guest

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib")


def resolve_in_root(root: Path, path: str, depth: int = 0) -> Path:
    """`path` inside the unpacked root `root`, following symlinks as a chroot would."""
    if depth > 40:
        raise OSError(f"too many symlinks resolving {path}")
    parts = [p for p in path.split("/") if p and p != "."]
    cur = "/"
    for i, part in enumerate(parts):
        if part == "..":
            cur = posixpath.dirname(cur.rstrip("/")) or "/"
            continue
        nxt = posixpath.join(cur, part)
        host = root / nxt.lstrip("/")
        if host.is_symlink():
            target = os.readlink(host)
            base = target if target.startswith("/") else posixpath.join(cur, target)
            rest = "/".join(parts[i + 1:])
            return resolve_in_root(root, posixpath.join(base, rest) if rest else base, depth + 1)
        cur = nxt
    return root / cur.lstrip("/")


def elf_info(path: Path) -> tuple[str | None, list[str]]:
    """(PT_INTERP, DT_NEEDED names) of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    e_phoff, = struct.unpack_from("<Q", data, 0x20)
    e_phentsize, e_phnum = struct.unpack_from("<HH", data, 0x36)
    interp, dyn, loads = None, None, []
    for i in range(e_phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data,
                                                                                  e_phoff + i * e_phentsize)
        if p_type == 3:  # PT_INTERP
            interp = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()
        elif p_type == 2:  # PT_DYNAMIC
            dyn = (p_offset, p_filesz)
        elif p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))
    if dyn is None:
        return interp, []
    entries, strtab = [], None
    for off in range(dyn[0], dyn[0] + dyn[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == 1:  # DT_NEEDED
            entries.append(val)
        elif tag == 5:  # DT_STRTAB (a virtual address)
            strtab = next((o + val - v for v, o, sz in loads if v <= val < v + sz), None)
    if strtab is None:
        return interp, []
    names = [data[strtab + e:data.index(b"\0", strtab + e)].decode() for e in entries]
    return interp, names


def _find_lib(root: Path, name: str) -> tuple[str, Path]:
    for d in LIB_DIRS:
        host = resolve_in_root(root, f"{d}/{name}")
        if host.is_file():
            return f"/lib/x86_64-linux-gnu/{name}", host
    raise FileNotFoundError(f"library {name} not found in the guest image")


def _stem(rel: str) -> str:
    return Path(rel).name.split(".ko")[0]


def module_order(moddir: Path, wanted: tuple[str, ...]) -> tuple[list[str], dict[str, list[str]]]:
    """The wanted modules that exist plus their dependencies, dependencies first, as paths relative
    to `moddir`; and each one's direct dependencies by file stem (e.g. virtio-rng: [virtio, ...])."""
    deps: dict[str, list[str]] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        deps[mod.strip()] = rest.split()
    by_name = {_stem(m).replace("-", "_"): m for m in deps}
    order: list[str] = []

    def visit(mod: str, stack: tuple[str, ...] = ()) -> None:
        if mod in order or mod in stack:
            return
        for dep in deps.get(mod, []):
            visit(dep, stack + (mod,))
        order.append(mod)

    for name in wanted:
        mod = by_name.get(name.replace("-", "_"))
        if mod:
            visit(mod)
    return order, {_stem(m): [_stem(d) for d in deps.get(m, [])] for m in order}


def load_list(order: list[str], deps: dict[str, list[str]], wanted: list[str]) -> list[str]:
    """Module stems to insmod, in load order, for the wanted ones (names with - or _); unknown
    names are left out (the caller decides whether that is an error)."""
    norm = {m.replace("-", "_"): m for m in order}
    need: set[str] = set()
    todo = [norm[w.replace("-", "_")] for w in wanted if w.replace("-", "_") in norm]
    while todo:
        m = todo.pop()
        if m not in need:
            need.add(m)
            todo.extend(deps.get(m, []))
    return [m for m in order if m in need]


class Cpio:
    """Writer of the newc cpio format the kernel unpacks as an initramfs."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ino = 1
        self.seen: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        name = name.lstrip("/")
        if name in self.seen:
            return
        self.seen.add(name)
        fields = (self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0)
        header = b"070701" + b"".join(f"{f:08x}".encode() for f in fields)
        self.ino += 1
        blob = header + name.encode() + b"\0"
        blob += b"\0" * (-len(blob) % 4)
        blob += data + b"\0" * (-len(data) % 4)
        self.parts.append(blob)

    def dir(self, name: str) -> None:
        parent = posixpath.dirname(name.rstrip("/"))
        if parent and parent != "/":
            self.dir(parent)
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self.dir(posixpath.dirname(name))
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self.dir(posixpath.dirname(name))
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int, mode: int = 0o600) -> None:
        self.dir(posixpath.dirname(name))
        self._entry(name, stat.S_IFCHR | mode, rdev=(major, minor))

    def getvalue(self) -> bytes:
        trailer = Cpio()
        trailer.ino = 0
        trailer._entry("TRAILER!!!", 0)
        out = b"".join(self.parts) + trailer.parts[0]
        return out + b"\0" * (-len(out) % 512)


def read_entries(data: bytes) -> list[tuple[str, int, bytes, tuple[int, int]]]:
    """(name, mode, data, rdev) of each entry of a newc cpio archive (the trailer left out)."""
    out, pos = [], 0
    while True:
        if data[pos:pos + 6] != b"070701":
            raise ValueError(f"not a newc cpio archive at byte {pos}")
        f = [int(data[pos + 6 + 8 * i:pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, rdev, namesize = f[1], f[6], (f[9], f[10]), f[11]
        pos += 110
        name = data[pos:pos + namesize - 1].decode()
        pos += namesize + (-(110 + namesize) % 4)
        if name == "TRAILER!!!":
            return out
        out.append((name, mode, data[pos:pos + size], rdev))
        pos += size + (-size % 4)


def rebuild(base: bytes, moddir: Path, modules: tuple[str, ...]) -> tuple[bytes, list[str], dict[str, list[str]]]:
    """The initramfs `base` (built by build()) with another kernel's modules from `moddir`: the same
    busybox and init, so only the kernel differs between the two."""
    cpio = Cpio()
    for name, mode, data, rdev in read_entries(base):
        if not (name.startswith("modules/") or name == "modules.list"):
            cpio._entry(name, mode, data, rdev)
    return _add_modules(cpio, moddir, modules)


def _add_modules(cpio: Cpio, moddir: Path, modules: tuple[str, ...]) -> tuple[bytes, list[str], dict[str, list[str]]]:
    mods, deps = module_order(moddir, modules)
    for rel in mods:
        if not rel.endswith(".ko"):
            raise ValueError(f"module {rel} is compressed; this initramfs loads plain .ko files only")
        cpio.file(f"/modules/{Path(rel).name}", (moddir / rel).read_bytes())
    order = [_stem(m) for m in mods]
    cpio.file("/modules.list", ("\n".join(order) + "\n").encode())
    return cpio.getvalue(), order, deps


def build(root: Path, kernel_version: str) -> tuple[bytes, list[str], dict[str, list[str]]]:
    """The initramfs for the unpacked image at `root`: (cpio bytes, module stems in load order,
    each module's dependencies)."""
    cpio = Cpio()
    for d in ("/dev", "/proc", "/sys", "/root", "/bin", "/modules"):
        cpio.dir(d)
    cpio.chardev("/dev/console", 5, 1)
    cpio.chardev("/dev/null", 1, 3, 0o666)
    busybox = resolve_in_root(root, "/usr/bin/busybox")
    cpio.file("/bin/busybox", busybox.read_bytes(), 0o755)
    cpio.symlink("/bin/sh", "busybox")
    interp, needed = elf_info(busybox)
    if interp:
        cpio.file(interp, resolve_in_root(root, interp).read_bytes(), 0o755)
    for name in needed:
        dest, src = _find_lib(root, name)
        cpio.file(dest, src.read_bytes(), 0o755)
    cpio.file("/init", guest.INITRD_INIT.encode(), 0o755)
    moddir = resolve_in_root(root, f"/usr/lib/modules/{kernel_version}")
    return _add_modules(cpio, moddir, guest.INITRD_MODULES)
