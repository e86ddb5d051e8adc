"""Puts the kernel sources (native/), the suites (suites/) and the study files (studies/) inside the
package, as virtbench/native, virtbench/suites and virtbench/study_files (virtbench/studies is a Python
package): an installed virtbench builds its kernels from them and finds its suites and studies there
(a study file names its suites as ../suites/NAME, which holds in both places). A clone uses them where they are (paths.is_clone). Everything else is in
pyproject.toml; MANIFEST.in puts the same directories into the sdist."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TREES = {"native": "native", "suites": "suites", "studies": "study_files"}


class BuildPy(build_py):
    def run(self):
        super().run()
        for tree, inside in TREES.items():
            for path in sorted((ROOT / tree).rglob("*")):
                rel = path.relative_to(ROOT / tree)
                if path.is_file() and "build" not in rel.parts and path.suffix != ".o":
                    target = Path(self.build_lib, "virtbench", inside, rel)
                    self.mkpath(str(target.parent))
                    self.copy_file(str(path), str(target))


setup(cmdclass={"build_py": BuildPy})
