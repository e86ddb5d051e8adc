"""Puts the kernel sources (native/) and the suites (suites/) inside the package, as
virtbench/native and virtbench/suites: an installed virtbench builds its kernels from them and finds
its suites there. A clone uses them where they are (paths.is_clone). Everything else is in
pyproject.toml; MANIFEST.in puts the same directories into the sdist."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TREES = ("native", "suites")


class BuildPy(build_py):
    def run(self):
        super().run()
        for tree in TREES:
            for path in sorted((ROOT / tree).rglob("*")):
                rel = path.relative_to(ROOT / tree)
                if path.is_file() and "build" not in rel.parts and path.suffix != ".o":
                    target = Path(self.build_lib, "virtbench", tree, rel)
                    self.mkpath(str(target.parent))
                    self.copy_file(str(path), str(target))


setup(cmdclass={"build_py": BuildPy})
