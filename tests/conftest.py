"""Shared fixtures. `guest_image` is built once into the user's normal data dir, so CI (which runs
`virtbench image build` first) and repeated local runs reuse it instead of building per test."""

import os
import shutil

import pytest

from virtbench import image, paths, procs
from virtbench.errors import MissingTool, UserError


@pytest.fixture(scope="session")
def guest_image():
    """The guest image for the current native kernels (built if missing), imported into podman."""
    if not (paths.native_bin_dir() / "vb-system").exists() and "VIRTBENCH_BIN" not in os.environ:
        procs.run(["make", "-s", "-C", str(paths.PROJECT_ROOT / "native")], timeout=900)
    try:
        image.native_files()
        info = image.find()
    except (MissingTool, UserError) as exc:  # kernels not built, or no mmdebstrap: nothing to test with
        pytest.skip(f"no guest image: {exc}")
    if info is None:
        if os.environ.get("VIRTBENCH_SKIP_IMAGE_BUILD"):
            pytest.skip("guest image not built and VIRTBENCH_SKIP_IMAGE_BUILD is set")
        info = image.build()  # a failing build is a test error, not a skip
    if shutil.which("podman") and procs.run(["podman", "info"], timeout=60).ok:
        from virtbench.drivers import container

        container.ensure_image("podman", info)
    return info
