"""Shared fixtures. `guest_image` is built once into the user's normal data dir, so CI (which runs
`virtbench image build` first) and repeated local runs reuse it instead of building per test."""

import os
import shutil
import signal

import pytest

from virtbench import image, kernels, paths, procs
from virtbench.errors import MissingTool

# instkit's fixtures (`driver`, a container driver; `host`, a bare-host instance), for the modules that
# ask for them by name; a module's own fixture of the same name wins.
pytest_plugins = ["instkit"]

# The Ctrl-C tests act as a user at a terminal, where SIGINT raises KeyboardInterrupt. A test run
# started as a background job of a non-interactive shell (`cmd &`) inherits SIGINT ignored, and an
# ignored signal stays ignored across exec, so neither this process nor the virtbench children the
# tests interrupt would ever see it. Python's own handler here is reset to the default at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def guest_image():
    """The guest image for the current native kernels (built if missing), imported into podman."""
    if not (kernels.native_bin_dir() / "vb-system").exists() and "VIRTBENCH_BIN" not in os.environ:
        procs.run(["make", "-s", "-C", str(paths.PROJECT_ROOT / "native")], timeout=900)
    try:
        image.native_files()
        info = image.find()
    except MissingTool as exc:  # no mmdebstrap (or another build tool) here: nothing to test with
        pytest.skip(f"no guest image: {exc}")
    # any other error (the kernels did not build, a broken image) fails the tests that need the image
    if info is None:
        if os.environ.get("VIRTBENCH_SKIP_IMAGE_BUILD"):
            pytest.skip("guest image not built and VIRTBENCH_SKIP_IMAGE_BUILD is set")
        info = image.build()  # a failing build is a test error, not a skip
    if shutil.which("podman") and procs.run(["podman", "info"], timeout=60).ok:
        from virtbench.drivers.container import engine

        engine.ensure_image("podman", info)
    return info


@pytest.fixture(scope="session")
def testbed2(tmp_path_factory):
    """A local testbed of 2 SSH hosts (network namespaces "vbts-1", "vbts-2", subnet 10.216.0.0/24);
    yields its inventory file and removes it at the end. Skips only where namespaces cannot be made."""
    from testbedkit import own_testbed

    # One testbed "vbts" per machine: a second pytest session (a developer's beside CI's) waits for
    # the first instead of tearing its hosts down under it.
    import fcntl

    lock = open("/run/virtbench-testbed-vbts.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        with own_testbed(2, tmp_path_factory.mktemp("testbed") / "inventory.yml", "vbts",
                         subnet="10.216.0.0/24") as inventory:
            yield inventory
    finally:
        lock.close()
