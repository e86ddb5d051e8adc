"""Package sources come from the machine's own configuration: the guest image from the host's apt
sources and proxies (read by the real apt under a configuration of the test's own), setup.sh's Go
toolchain from the user's GOPROXY or `go env`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from virtbench import aptsources, image

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt (Debian)")


@pytest.fixture
def apt_config(tmp_path, monkeypatch):
    """An apt configuration of the test's own (APT_CONFIG): a one-line sources.list with a mirror
    for the suite, a deb-src line and another suite, a deb822 part for security, and a proxy."""
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (tmp_path / "sources.list").write_text(
        "deb http://mirror.invalid/debian bookworm main contrib\n"
        "deb-src http://mirror.invalid/debian bookworm main\n"
        "deb http://mirror.invalid/debian trixie main\n"
        "deb http://mirror.invalid/debian bookworm-updates main\n")
    (parts / "security.sources").write_text(
        "Types: deb\nURIs: http://security.invalid/debian-security/\nSuites: bookworm-security\n"
        "Components: main\n")
    conf = tmp_path / "apt.conf"
    conf.write_text(f'Dir::Etc::sourcelist "{tmp_path / "sources.list"}";\n'
                    f'Dir::Etc::sourceparts "{parts}";\n'
                    'Acquire::http::Proxy "http://proxy.invalid:3128/";\n')
    monkeypatch.setenv("APT_CONFIG", str(conf))
    monkeypatch.setenv("VIRTBENCH_DATA", str(tmp_path / "data"))  # the kept answer: the test's own
    aptsources.sources.cache_clear()
    aptsources.proxies.cache_clear()
    yield
    aptsources.sources.cache_clear()
    aptsources.proxies.cache_clear()


def test_the_image_takes_the_hosts_sources_for_its_suite(apt_config):
    assert aptsources.sources("bookworm") == (
        "deb http://mirror.invalid/debian bookworm main contrib",
        "deb http://mirror.invalid/debian bookworm-updates main",
        "deb http://security.invalid/debian-security bookworm-security main",
    )
    assert aptsources.sources("bullseye") == ()  # none: mmdebstrap's own default


def test_the_sources_are_kept_until_a_source_file_changes(apt_config, tmp_path):
    first = aptsources.sources("bookworm")
    kept = tmp_path / "data" / "images" / "apt-sources.json"
    assert json.loads(kept.read_text())["sources"] == list(first)
    # a kept answer is read, not asked again: a marker put in it comes back
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "sources": ["deb marker bookworm main"]}))
    aptsources.sources.cache_clear()
    assert aptsources.sources("bookworm") == ("deb marker bookworm main",)
    # a changed source file changes the key: apt is asked again
    (tmp_path / "sources.list").write_text("deb http://other.invalid/debian bookworm main\n")
    aptsources.sources.cache_clear()
    assert aptsources.sources("bookworm") == ("deb http://other.invalid/debian bookworm main",
                                              "deb http://security.invalid/debian-security bookworm-security main")


def test_the_hosts_apt_proxy_is_passed_on(apt_config):
    assert aptsources.proxies() == ('Acquire::http::Proxy "http://proxy.invalid:3128/";',)


def test_the_image_hash_follows_the_hosts_mirror(apt_config):
    if not (ROOT / "native" / "build" / "bin" / "vb-system").exists():
        pytest.skip("native kernels not built")
    assert image.inputs()["mirrors"] == list(aptsources.sources(image.SUITE))


def test_no_package_host_is_written_into_the_image_builder():
    assert "://" not in (ROOT / "src" / "virtbench" / "image.py").read_text()


def go_proxy(env: dict[str, str]) -> subprocess.CompletedProcess:
    """setup.sh's go_proxy function, run on its own."""
    script = ('GO_TOOLCHAIN=go1.26.8; eval "$(sed -n \'/^go_proxy() {/,/^}/p\' setup.sh)"; go_proxy')
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=30)


def test_setup_fetches_go_through_the_users_proxy(tmp_path):
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    res = go_proxy({**base, "GOPROXY": "https://goproxy.invalid/mod/,direct"})
    assert (res.returncode, res.stdout.strip()) == (0, "https://goproxy.invalid/mod")
    res = go_proxy({**base, "GOPROXY": "off"})
    assert res.returncode == 1 and "set GOPROXY" in res.stderr


def test_setup_asks_go_env_when_goproxy_is_not_set(tmp_path):
    go = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None)
    if go is None:
        pytest.skip("no go installed")
    goenv = tmp_path / "go.env"
    goenv.write_text("GOPROXY=https://goproxy.invalid|direct\n")
    env = {"PATH": f"{Path(go).parent}:/usr/bin:/bin", "HOME": str(tmp_path), "GOENV": str(goenv)}
    res = go_proxy(env)
    assert (res.returncode, res.stdout.strip()) == (0, "https://goproxy.invalid")
