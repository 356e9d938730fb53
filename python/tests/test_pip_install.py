"""The package installs into a virtual environment with pip from the source tree, without
network (--no-build-isolation, --no-index), and imports there from another folder."""

import os
import subprocess
import sys
import tempfile

import _harness as h

HERE = os.path.dirname(os.path.abspath(__file__))
PY_DIR = os.path.dirname(HERE)


def main():
    build = os.path.dirname(os.environ["PYTHONPATH"].split(os.pathsep)[0])  # build/python -> build
    venv = os.path.join(h.workdir(), "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    pip = os.path.join(venv, "bin", "pip")
    env = dict(os.environ, SLUICE_BUILD_DIR=build, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([pip, "install", "--no-build-isolation", "--no-index", PY_DIR],
                       env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
    h.check(r.returncode == 0, "pip install --no-build-isolation --no-index ./python")
    out = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                          "import sluice, os; print(sluice.__file__); print(sluice.ArithmeticTask.vocab_size)"],
                         env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, timeout=60)
    lines = out.stdout.split()
    h.check(out.returncode == 0 and lines[0].startswith(venv) and lines[1] == "20",
            f"the venv imports its own copy ({lines[:1]})")
    # The build folder pip left beside the sources must not linger in the tree.
    for leftover in ("build/lib", "sluice.egg-info"):
        p = os.path.join(PY_DIR, leftover)
        if os.path.exists(p):
            subprocess.run(["rm", "-rf", p])


if __name__ == "__main__":
    main()
