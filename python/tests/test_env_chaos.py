"""`sluice chaos` on a two-turn tool task whose environment runs in Python, with one misbehaving
environment beside good ones: rollout-2's program hangs on some episodes, answers garbage on
others, writes a line past env_max_line_bytes and exits mid-episode, while roles are killed with
SIGKILL. Nothing is lost or consumed twice, and only the bad environment's episodes end: the good
rollouts count no environment fault at all."""

import json
import os
import subprocess
import sys

from _harness import SLUICE, check, env_job, workdir

# Every episode takes two turns: the first call gets a calculator's answer (the prompt's first
# sum), the second is scored. The program run by rollout-2 misbehaves on one episode in 20: it
# hangs or answers garbage (then hangs), after 3 s it writes one over-long line, after 4.5 s it
# exits; the rollout then starts another, which does the same.
ENV = r'''
import asyncio, os, sys, time
from sluice.env import serve

BAD = os.environ.get("SLUICE_ROLLOUT_ID") == "rollout-2"
started = [0]
wrote_long = [False]
T0 = time.monotonic()


def sums(prompt):
    terms = [int(t) for t in prompt.lstrip("^").rstrip("=").split("+") if t.isdigit()]
    out, total = [], terms[0] if terms else 0
    for t in terms[1:]:
        total += t
        out.append(str(total))
    return out


class Env:
    def __init__(self):
        started[0] += 1
        self.n = started[0]
        self.turns = 0
        self.want = []

    def reset(self, prompt):
        self.want = sums(prompt)
        return ""

    async def step(self, action):
        self.turns += 1
        await asyncio.sleep(0.2)  # a tool's latency: the job lasts through the kills
        if BAD and self.n % 20 == 0 and self.turns == 1:
            age = time.monotonic() - T0
            if age > 4.5 and wrote_long[0]:
                sys.stdout.flush()
                os._exit(3)  # its pending episodes end; the rollout starts another program
            if age > 3 and not wrote_long[0]:
                wrote_long[0] = True
                sys.stdout.write("z" * (2 << 20) + "\n")  # past env_max_line_bytes
                sys.stdout.flush()
            elif self.n % 40 == 20:
                await asyncio.sleep(1000)  # hangs past env_timeout_ms
            else:
                sys.stdout.write("{not json\n")
                sys.stdout.flush()
                await asyncio.sleep(1000)
        if self.turns == 1:
            return (self.want[0] + "," if self.want else ""), 0.0, False
        return "", 1.0 if action.rstrip().endswith(",".join(self.want) + "$") else 0.0, True


serve(Env)
'''

work = workdir()
prompts, group, kills = 1440, 4, 4
job = env_job(work, ENV, "python-env-chaos", prompts, group, rollouts=3,
              manager={"batch_trajectories": 32, "heartbeat_timeout_ms": 2000},
              rollout={"env_timeout_ms": 2000, "env_max_line_bytes": 1 << 20},
              actor={"checkpoint_every_steps": 2},
              timeout_s=300, restart={"backoff_ms": 100})
del job["out_dir"]  # sluice chaos places its runs (--out)
path = os.path.join(work, "job.json")
with open(path, "w") as f:
    json.dump(job, f)
out = os.path.join(work, "runs")
# Kills from 3 s after the first trained version on, one a second, of any role (a rollout killed starts
# again with its faults counted from 0: the bad one's counts below are at least what came after).
r = subprocess.run([SLUICE, "chaos", path, "--kills", str(kills), "--every", "1", "--seed", "3",
                    "--no-baseline", "--json", "--out", out],
                   capture_output=True, text=True, timeout=400)
print(r.stdout[-3000:])
check(r.returncode == 0, "sluice chaos exits 0: " + r.stderr[-3000:])
result = json.loads(r.stdout.strip().splitlines()[-1])
print(json.dumps(result)[:2000])
with open(os.path.join(out, "with-kills", "summary.json")) as f:
    summary = json.load(f)
manager = summary["manager"]
ids = summary["actor"]["accepted_ids"]
check(len(ids) == len(set(ids)) == prompts * group, "every episode reached the actor once")
check(sum(1 for ro in manager["rollouts"]) >= 3, "the three rollouts reported")

faults = ("env_failed", "env_garbage", "env_stalled", "env_overlong_lines")
by_id = {}
for ro in manager["rollouts"]:
    stats = by_id.setdefault(ro["id"], dict.fromkeys(faults, 0))
    for k in faults:
        stats[k] += ro["stats"].get(k, 0)
print("faults by rollout:", json.dumps(by_id))
for rid in ("rollout-0", "rollout-1"):
    check(all(by_id.get(rid, {}).get(k, 0) == 0 for k in faults),
          f"{rid}'s good environment ended no episode ({by_id.get(rid)})")
bad = by_id.get("rollout-2", {})
check(bad.get("env_failed", 0) >= 3, f"rollout-2's bad environment ended its episodes ({bad})")
check(bad.get("env_garbage", 0) >= 1, "its garbage was counted")
check(bad.get("env_overlong_lines", 0) >= 1, "its over-long line was counted")
log = open(os.path.join(out, "with-kills", "rollout-2.log")).read()
env_lines = "\n".join(l for l in log.splitlines() if "environment" in l and "ending its" in l)
check("exited with status 3" in log, "its exit was reported:\n" + env_lines[-3000:])
check("no answer in 2000 ms" in log, "its hang was timed out")
print("ok")
