"""Guest image: the content hash, the cache layout, errors, and (slow) one real build."""

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from virtbench import image, procs
from virtbench.drivers.container import engine as container
from virtbench.errors import MissingTool, UserError


@pytest.fixture
def fake_env(tmp_path, monkeypatch):
    """Fake native kernels and an empty data dir; mmdebstrap's version pinned so hashing is hermetic."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "vb-system").write_bytes(b"#!/bin/sh\necho system\n")
    (bindir / "vb-other").write_bytes(b"other")
    monkeypatch.setenv("VIRTBENCH_BIN", str(bindir))
    monkeypatch.setenv("VIRTBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(image, "find_mmdebstrap", lambda: "/usr/bin/mmdebstrap")
    monkeypatch.setattr(image, "mmdebstrap_version", lambda exe: "mmdebstrap 1.3.5")
    return bindir


def current_hash():
    return image.input_hash(image.inputs())


def test_hash_is_stable_and_short(fake_env):
    h = current_hash()
    assert h == current_hash()
    assert len(h) == 16 and int(h, 16) >= 0


def test_hash_changes_with_a_native_binary(fake_env):
    before = current_hash()
    (fake_env / "vb-system").write_bytes(b"#!/bin/sh\necho changed\n")
    changed = current_hash()
    assert changed != before
    (fake_env / "vb-new").write_bytes(b"new kernel")
    assert current_hash() not in (before, changed)


def test_hash_changes_with_the_package_list_not_its_order(fake_env, monkeypatch):
    before = current_hash()
    monkeypatch.setattr(image, "PACKAGES", tuple(reversed(image.PACKAGES)))
    assert current_hash() == before
    monkeypatch.setattr(image, "PACKAGES", image.PACKAGES + ("htop",))
    assert current_hash() != before


def test_hash_changes_with_the_format_version(fake_env, monkeypatch):
    before = current_hash()
    monkeypatch.setattr(image, "IMAGE_FORMAT_VERSION", image.IMAGE_FORMAT_VERSION + 1)
    assert current_hash() != before


@pytest.mark.parametrize("make_dir", [True, False])
def test_missing_native_kernels(tmp_path, monkeypatch, make_dir):
    bindir = tmp_path / "empty"
    if make_dir:
        bindir.mkdir()
        (bindir / "vb-other").write_text("not the one we need")
    monkeypatch.setenv("VIRTBENCH_BIN", str(bindir))
    with pytest.raises(UserError) as err:
        image.inputs()
    assert "native kernels are not built" in err.value.message
    assert err.value.hint == "run: build the kernels into $VIRTBENCH_BIN, or unset it"


def test_require_without_a_built_image(fake_env):
    assert image.find() is None
    with pytest.raises(UserError) as err:
        image.require()
    assert err.value.message == "guest image not built for these kernels"
    assert err.value.hint == "run: virtbench image build"


def _fake_image(h, epoch):
    d = image.images_dir() / h
    d.mkdir(parents=True)
    (d / "rootfs.tar").write_bytes(b"tar")
    (d / "manifest.json").write_text(json.dumps({"hash": h, "built_at_epoch": epoch}))
    return d


def test_find_needs_both_tarball_and_manifest(fake_env):
    d = image.images_dir() / current_hash()
    d.mkdir(parents=True)
    (d / "rootfs.tar").write_bytes(b"tar")
    assert image.find() is None  # no manifest: an interrupted build
    (d / "manifest.json").write_text(json.dumps({"hash": d.name}))
    info = image.find()
    assert info.hash == d.name and info.tarball == d / "rootfs.tar"
    assert info.tag == f"localhost/virtbench-guest:{d.name}"


def test_prune_keeps_the_two_newest_tarballs(fake_env):
    dirs = [_fake_image(f"{i:016x}", epoch) for i, epoch in enumerate([30.0, 10.0, 20.0])]
    image.prune(keep=2, log=lambda line: None)
    assert (dirs[0] / "rootfs.tar").exists() and (dirs[2] / "rootfs.tar").exists()
    assert not (dirs[1] / "rootfs.tar").exists()
    assert (dirs[1] / "manifest.json").exists()  # the record of what it held stays


def _target(argv):
    return next(a for a in argv if a.endswith(f"rootfs.tar.partial-{os.getpid()}"))


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), UserError("mmdebstrap failed")])
def test_interrupted_build_leaves_no_partial_files(fake_env, monkeypatch, exc):
    def fake_mmdebstrap(argv, log, timeout):
        with open(_target(argv), "wb") as f:
            f.write(b"half a tarball")
        raise exc

    monkeypatch.setattr(image, "run_streaming", fake_mmdebstrap)
    with pytest.raises(type(exc)):
        image.build()
    d = image.images_dir() / current_hash()
    assert sorted(p.name for p in d.iterdir()) == []
    assert image.find() is None


def test_build_passes_packages_kernels_and_hook(fake_env, monkeypatch):
    seen = {}

    def fake_mmdebstrap(argv, log, timeout):
        seen["argv"] = argv
        hook = next(a for a in argv if a.startswith("--customize-hook="))
        stage = next(p for p in (image.images_dir() / current_hash()).iterdir() if p.name.startswith("stage."))
        seen["staged"] = sorted(p.name for p in stage.iterdir())
        assert str(stage) in hook and "/opt/virtbench/bin" in hook
        pkgout = hook.rsplit(" ", 1)[1]
        with open(pkgout, "w") as f:
            f.write("fio\t3.33-3\nsysbench\t1.0.20+ds-5\n")
        with open(_target(argv), "wb") as f:
            f.write(b"x" * 1000)

    monkeypatch.setattr(image, "run_streaming", fake_mmdebstrap)
    lines = []
    info = image.build(log=lines.append)
    assert "--include=" + ",".join(sorted(image.PACKAGES)) in seen["argv"]
    assert seen["staged"] == ["vb-other", "vb-system"]
    assert info.manifest["packages"] == {"fio": "3.33-3", "sysbench": "1.0.20+ds-5"}
    assert info.manifest["size_bytes"] == 1000 and info.manifest["hash"] == info.hash
    assert image.find() == info
    assert any("built guest image" in line for line in lines)
    # cached: a second build does not run mmdebstrap again
    monkeypatch.setattr(image, "run_streaming", lambda *a: pytest.fail("rebuilt a cached image"))
    assert image.build() == info


def test_missing_mmdebstrap(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MissingTool) as err:
        image.build()
    assert err.value.tool == "mmdebstrap" and err.value.package == "mmdebstrap"


@pytest.mark.slow
def test_real_image_holds_kernels_and_tools(guest_image):
    """Built once per machine by the guest_image fixture (or `virtbench image build`), then reused."""
    manifest = guest_image.manifest
    assert "vb-system" in manifest["inputs"]["native"]
    wanted = {"./usr/bin/fio", "./opt/virtbench/manifest.txt"}
    wanted |= {f"./opt/virtbench/bin/{name}" for name in manifest["inputs"]["native"]}
    with tarfile.open(guest_image.tarball, "r|") as tar:
        for member in tar:
            wanted.discard(member.name)
            if not wanted:
                break
    assert not wanted, f"missing from the image: {wanted}"
    assert manifest["packages"]["fio"] and manifest["packages"]["linux-image-cloud-amd64"]
    assert manifest["size_bytes"] == guest_image.tarball.stat().st_size


def _tiny_image(h, epoch):
    """An image directory whose tarball is a real (one-file) root podman can import."""
    d = image.images_dir() / h
    d.mkdir(parents=True)
    marker = d.parent / f"{h}.txt"
    marker.write_text(h)
    with tarfile.open(d / "rootfs.tar", "w") as tar:
        tar.add(marker, arcname="marker")
    (d / "manifest.json").write_text(json.dumps({"hash": h, "built_at_epoch": epoch}))
    return next(i for i in image.installed() if i.hash == h)


def _podman_has(tag):
    return procs.run(["podman", "image", "inspect", tag], timeout=60).ok


HOLDER = """
import sys, time
from virtbench import image
from virtbench.machines import owners
info = next(i for i in image.installed() if i.hash == sys.argv[1])
with owners.running("run-holding-it"):
    assert image.hold(info)
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.podman
def test_pruning_spares_an_image_a_live_process_uses(fake_env):
    """A second process (another checkout's run) holds the oldest image while a build prunes: its
    tarball and its podman copy stay, and the build says why; once that process is gone, both go."""
    if not (shutil.which("podman") and procs.run(["podman", "info"], timeout=60).ok):
        pytest.skip("podman is not installed or 'podman info' fails (apt-get install podman runc)")
    salt = os.urandom(4).hex()  # tags of our own in the user's podman store
    old, mid, new = (_tiny_image(f"{salt}{n:08x}", epoch) for n, epoch in ((1, 10.0), (2, 20.0), (3, 30.0)))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, old.hash], stdout=subprocess.PIPE, text=True)
    try:
        container.ensure_image("podman", old)
        assert holder.stdout.readline().strip() == "held"
        lines = []
        image.prune(keep=2, log=lines.append)
        assert old.tarball.is_file()
        assert lines == [f"kept old guest image tarball {old.hash} (older than the newest 2): "
                         f"in use by run run-holding-it (pid {holder.pid})"]
        container.ensure_image("podman", new)  # the import that used to drop the pruned images' copies
        assert container.remove_pruned_images("podman") == []
        assert _podman_has(old.tag), "an image a live run uses was removed from podman"

        holder.kill()
        holder.wait()
        lines.clear()
        image.prune(keep=2, log=lines.append)
        assert lines == [f"removed old guest image tarball {old.hash} (manifest kept)"]
        assert not old.tarball.exists() and mid.tarball.is_file() and new.tarball.is_file()
        assert container.remove_pruned_images("podman") == [old.tag]
        assert not _podman_has(old.tag) and _podman_has(new.tag)
    finally:
        holder.kill()
        holder.wait()
        for info in (old, mid, new):
            procs.run(["podman", "rmi", info.tag], timeout=120)


def test_a_pruned_image_cannot_be_held(fake_env):
    info = _tiny_image("0" * 16, 10.0)
    info.tarball.unlink()
    assert not image.hold(info)
    assert image.pruned(info.hash)
    assert not image.pruned("f" * 16)  # never built in this data directory: not ours to judge
