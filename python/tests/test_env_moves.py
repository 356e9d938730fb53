"""Episodes of an environment program that move: two rollouts, one killed mid-run (chaos), its
episodes resumed on the other rollout (or its restarted process) from their partial states. The
program there never saw them: the rollout replays each (reset, then its recorded turns) before its
next step, so none fails ("never reset here"), and every trajectory reaches the actor once."""

import os
import sys

from _harness import check, env_job, run_job, workdir

ENV = r'''
import asyncio
from sluice.env import serve


class Env:
    def __init__(self):
        self.turns = 0

    def reset(self, prompt):
        return ""

    async def step(self, action):
        # Three turns, each a second: every episode is part-way when a rollout dies.
        await asyncio.sleep(1.0)
        self.turns += 1
        if self.turns < 3:
            return "12 ", 0.0, False
        return "", 1.0 if action.endswith("$") else 0.0, True


serve(Env)
'''

work = workdir()
prompts, group = 64, 2
job = env_job(work, ENV, "python-env-moves", prompts, group, rollouts=2,
              manager={"batch_trajectories": 16, "heartbeat_timeout_ms": 2000},
              rollout={"partial_every": 2, "env_timeout_ms": 15000},
              # Soon after the first version: the whole job takes a few seconds.
              chaos={"kills": 1, "every_s": 1, "first_s": 0.3, "roles": "rollout"})
summary = run_job(work, job)
run = os.path.join(work, "run")
events = " ".join(str(e) for e in summary.get("events", []))
check("chaos killed rollout" in events, "a rollout was killed mid-run: " + events[:300])
ids = summary["actor"]["accepted_ids"]
check(len(ids) == len(set(ids)) == prompts * group, "every episode reached the actor once")
manager = summary["manager"]
check(manager["resumed"] + manager["reclaimed"] > 0,
      f"the dead rollout's work went on elsewhere (resumed {manager['resumed']}, "
      f"reclaimed {manager['reclaimed']})")
logs = "".join(open(os.path.join(run, n)).read() for n in os.listdir(run)
               if n.startswith("rollout-") and n.endswith(".log"))
check("never reset here" not in logs and "KeyError" not in logs,
      "no step reached a program that never saw its episode")
failed = sum(r["stats"].get("env_failed", 0) for r in manager["rollouts"])
check(failed == 0, f"no episode failed in its environment ({failed})")
print("ok")
