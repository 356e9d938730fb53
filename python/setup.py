"""pip install ./python (from the source tree, no network: pip install --no-build-isolation).

Builds the extension with the project's CMake (the C++ library and sluice._sluice), then packages
it with the pure-Python files. SLUICE_BUILD_DIR=DIR reuses an existing build folder (configured
with the same interpreter); otherwise one is made under build/ beside this file.
"""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("SLUICE_BUILD_DIR") or os.path.join(HERE, "build", "cmake")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                            "-DSLUICE_BUILD_TESTS=OFF", "-DSLUICE_BUILD_PYTHON=ON",
                            "-DPython3_EXECUTABLE=" + sys.executable], check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", build, "-j", jobs, "--target", "sluice_python"],
                       check=True)
        built = os.path.join(build, "python", "sluice", os.path.basename(self.get_ext_filename(ext.name)))
        if not os.path.exists(built):
            raise RuntimeError(f"the build made no {built} (was {build} configured for "
                               f"{sys.executable}?)")
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(built, out)


setup(
    name="sluice",
    version="0.1.0",
    description="Asynchronous RL post-training runtime: weight versions and trajectories from Python",
    packages=["sluice"],
    package_data={"sluice": ["__init__.pyi", "py.typed"]},
    ext_modules=[Extension("sluice._sluice", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
