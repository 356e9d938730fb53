"""An environment program that misbehaves ends only its own episodes, and the rollout that runs it
keeps heartbeating: the first program stops reading with its stdin pipe full (the rollout never
waits on it, kills it after env_timeout_ms and starts another), the second writes a 10 MiB line in
pieces with no newline for a while (over env_max_line_bytes: dropped as it comes, its pending
episodes ended, counted) and then behaves. The job ends with every trajectory once and the
manager never declares the rollout dead."""

import os
import sys

from _harness import check, env_job, run_job, workdir

ENV = r'''
import os, sys, time
from sluice.env import serve

starts = 1 + (int(open("starts").read()) if os.path.exists("starts") else 0)
with open("starts", "w") as f:
    f.write(str(starts))
if starts == 1:
    # Stops reading, its stdin pipe full (filled through /proc/self/fd/0): the rollout's next
    # line finds no room.
    w = os.open("/proc/self/fd/0", os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            os.write(w, b"x" * 4096)
    except BlockingIOError:
        pass
    time.sleep(1000)
if starts == 2:
    for _ in range(10):
        sys.stdout.write("z" * (1 << 20))
        sys.stdout.flush()
        time.sleep(0.05)
    sys.stdout.write("\n")
    sys.stdout.flush()


class Env:
    def reset(self, prompt):
        return ""

    def step(self, action):
        return "", 1.0 if action.endswith("$") else 0.0, True


serve(Env)
'''

work = workdir()
prompts, group = 24, 2
# The default heartbeat time-out (2 s): what a rollout that waited on its environment missed.
# Work released a batch at a time: some of it comes after the first program is replaced.
job = env_job(work, ENV, "python-env-faults", prompts, group,
              manager={"batch_trajectories": 8, "admission": "budget", "ahead_batches": 1,
                       "heartbeat_timeout_ms": 2000},
              rollout={"env_timeout_ms": 5000})
summary = run_job(work, job)
actor, manager = summary["actor"], summary["manager"]
ids = actor["accepted_ids"]
check(len(ids) == len(set(ids)) == prompts * group, "every episode reached the actor once")
check(manager["dead_rollouts"] == 0, "the rollout was never declared dead")
stats = manager["rollouts"][0]["stats"]
check(stats["env_stalled"] >= 1, f"the program that stopped reading was killed ({stats['env_stalled']})")
check(stats["env_overlong_lines"] >= 1,
      f"the over-long line was dropped and counted ({stats['env_overlong_lines']})")
check(stats["env_failed"] >= 1, "their episodes ended, counted")
starts = int(open(os.path.join(work, "starts")).read())
check(starts >= 2, f"the rollout started another program after the stall ({starts} starts)")
log = open(os.path.join(work, "run", "rollout-0.log")).read()
check("took nothing written to it" in log, "the stall was reported")
check("over env_max_line_bytes" in log, "the long line was reported")
print("ok")
