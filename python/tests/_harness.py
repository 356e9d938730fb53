"""Test helpers: a job's keys, a weight store and a rollout manager as child processes of the
sluice binary (SLUICE_BIN), cleaned up at exit."""

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SLUICE = os.environ.get("SLUICE_BIN", "sluice")
_procs = []
_dirs = []


def _cleanup():
    for p in _procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
    for d in _dirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


def need_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skip: torch is not installed for", sys.executable)
        sys.exit(77)


def workdir():
    d = tempfile.mkdtemp(prefix="sluice-py-")
    _dirs.append(d)
    return d


def make_keys(work, rollouts=2, relays=0):
    keys = os.path.join(work, "keys")
    subprocess.run([SLUICE, "keys", keys, "--rollouts", str(rollouts), "--relays", str(relays)],
                   check=True, stdout=subprocess.DEVNULL)
    return keys


def job_with_publisher(script, test_file, rollouts=2):
    """A job's keys and store, and ``script`` (a publisher) in another process, run as
    ``python -c script TEST_DIR STORE KEYS`` with its stdin and stdout piped: (keys, store, child)."""
    work = workdir()
    keys = make_keys(work, rollouts=rollouts)
    store = start_store(work, keys)
    child = subprocess.Popen([sys.executable, "-c", script, os.path.dirname(os.path.abspath(test_file)), store, keys],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return keys, store, child


def security(keys, identity):
    return {"mode": "curve", "key_file": os.path.join(keys, identity + ".key"),
            "members_file": os.path.join(keys, "members.json")}


def _start(args, out, ready=r"^endpoint (\S+)", timeout=20.0):
    f = open(out, "w")
    p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT)
    _procs.append(p)
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(out) as g:
            m = re.search(ready, g.read(), re.M)
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    with open(out) as g:
        raise RuntimeError(f"{args[1]} did not start: {g.read()}")


def start_store(work, keys):
    return _start([SLUICE, "--log-level", "warn", "weightstore",
                   "--set", "store.listen=tcp://127.0.0.1:*",
                   "--set", "store.security.key_file=" + os.path.join(keys, "weightstore.key"),
                   "--set", "store.security.members_file=" + os.path.join(keys, "members.json")],
                  os.path.join(work, "store.out"))[1]


def start_manager(work, keys, *settings):
    args = [SLUICE, "--log-level", "warn", "rollout-manager",
            "--set", "manager.listen=tcp://127.0.0.1:*",
            "--set", "manager.security.key_file=" + os.path.join(keys, "rollout-manager.key"),
            "--set", "manager.security.members_file=" + os.path.join(keys, "members.json")]
    for s in settings:
        args += ["--set", s]
    return _start(args, os.path.join(work, "manager.out"))[1]


def env_job(work, env_source, name, prompts, group, rollouts=1, manager=None, rollout=None,
            actor=None, **top):
    """A small job of the default task (the reference model, a short warm start) whose rollouts
    run `env_source`, written to WORK/env.py, as their environment program. `manager`, `rollout`,
    `actor` and `top` add to or replace the fields of those sections and of the job itself."""
    with open(os.path.join(work, "env.py"), "w") as f:
        f.write(env_source)
    job = {
        "name": name, "mode": "sluice", "rollouts": rollouts, "relays": 1, "log_level": "warn",
        "timeout_s": 150, "progress_s": 0, "out_dir": os.path.join(work, "run"),
        "manager": {"prompt_source": "task", "prompts": prompts, "group_size": group,
                    **(manager or {})},
        "rollout": {"engine": "model", "report_ms": 20, "gpt": {"max_sequences": 8},
                    "env_command": [sys.executable, "env.py"], **(rollout or {})},
        "actor": {"policy": "gpt", "weight_bytes": 16,
                  "learner": {"warmstart_steps": 5, "eval_prompts": 4}, **(actor or {})},
    }
    job.update(top)
    return job


def run_job(work, job):
    """Writes `job` to WORK/job.json, runs it with `sluice run` (its out_dir under WORK), checks
    that it ended with exit 0 and returns its summary.json."""
    path = os.path.join(work, "job.json")
    with open(path, "w") as f:
        json.dump(job, f)
    r = subprocess.run([SLUICE, "run", path], capture_output=True, text=True, timeout=200)
    check(r.returncode == 0, "the job ends (exit 0): " + r.stdout[-2000:] + r.stderr[-2000:])
    with open(os.path.join(job["out_dir"], "summary.json")) as f:
        return json.load(f)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


def raises(exc, fn, what):
    try:
        fn()
    except exc as e:
        print("ok:", what, "->", type(e).__name__, str(e)[:160])
        return e
    raise AssertionError(what + ": nothing raised")
