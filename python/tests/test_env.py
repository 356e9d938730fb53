"""An environment in Python (sluice.env.serve) run by a rollout as rollout.env_command: episodes
of one and two turns reach the actor once each, and an environment that raises, hangs past the
time-out or answers garbage ends that episode only, counted, while the job goes on."""

import os
import sys

from _harness import check, env_job, run_job, workdir

ENV = r'''
import asyncio, sys
from sluice.env import serve

seen = {}  # prompt text -> the order it was first seen in


class Env:
    def __init__(self):
        self.mode = 0
        self.turns = 0

    def reset(self, prompt):
        # The first episode of each of the first five prompts misbehaves or takes two turns; its
        # sibling (the same prompt) is an ordinary one.
        if prompt not in seen:
            seen[prompt] = len(seen) + 1
            self.mode = seen[prompt]
        return ""

    async def step(self, action):
        self.turns += 1
        await asyncio.sleep(0.01)
        if self.mode == 1:
            raise RuntimeError("the tool broke")
        if self.mode == 2:
            await asyncio.sleep(1000)  # hangs past the rollout's env_timeout_ms
        if self.mode == 3:
            sys.stdout.write("{not json\n")  # garbage: its episode is never answered
            sys.stdout.flush()
            await asyncio.sleep(1000)
        if self.mode in (4, 5) and self.turns == 1:
            return "12 ", 0.0, False  # a second turn, after the tool's answer
        return "", 1.0 if action.endswith("$") else 0.0, True


serve(Env)
'''

work = workdir()
prompts, group = 8, 2
job = env_job(work, ENV, "python-env", prompts, group,
              manager={"batch_trajectories": prompts * group, "heartbeat_timeout_ms": 5000},
              rollout={"env_timeout_ms": 15000})
summary = run_job(work, job)
actor, manager = summary["actor"], summary["manager"]
ids = actor["accepted_ids"]
check(len(ids) == len(set(ids)) == prompts * group, "every episode reached the actor once")
stats = manager["rollouts"][0]["stats"]
check(stats["env_failed"] == 3,
      f"the raising, hanging and garbled episodes were ended and counted ({stats['env_failed']})")
check(actor["abandoned"] >= 3, "and the actor counted them abandoned")
check(stats["env_calls"] >= prompts * group + 2, "each episode reset and stepped, two of them twice")
log = open(os.path.join(work, "run", "rollout-0.log")).read()
check("it raised: RuntimeError: the tool broke" in log, "the raise was reported")
check(log.count("no answer in 15000 ms") == 2, "the hang and the garbage timed out")
check("dropped an answer (not a JSON object" in log, "the garbage was dropped and logged")
print("ok")
