"""Custom roles in Python talk to the rollout manager: a generator asks for work, reports
progress and finished trajectories (rewards from the C++ arithmetic task); the trainer collects
every one of them exactly once, acknowledges them and announces a version; a generator's key
cannot collect; the manager refuses nonsense with an error."""

import time

import _harness as h

import sluice


def main():
    work = h.workdir()
    keys = h.make_keys(work, rollouts=1)
    prompts, group = 6, 2
    manager = h.start_manager(work, keys, "manager.mode=stream", "manager.prompt_source=task",
                              f"manager.prompts={prompts}", f"manager.group_size={group}",
                              "manager.batch_trajectories=4", "manager.max_new_tokens=40")
    task = sluice.ArithmeticTask()
    h.check(task.vocab_size == 20 and task.decode(task.solution(task.train_prompt(0)[2]))[-1] == "$",
            "the task's solution ends with EOS")

    gen = sluice.Generator(manager, "rollout-0", security=h.security(keys, "rollout-0"),
                           max_sequences=4)
    trainer = sluice.TrainerClient(manager, security=h.security(keys, "actor"))
    h.check(trainer.published(1) >= 1, "the trainer announced version 1")

    running, finished, reported = {}, [], set()
    collected = []
    deadline = time.time() + 60
    done = False
    while not done and time.time() < deadline:
        work_ = gen.report(version=1, active=list(running.values()), finished=finished)
        finished = []
        for s in list(work_.assign) + list(work_.imported):
            running[s.trajectory_id] = s
        for tid in work_.abandon:
            running.pop(tid, None)
        # "Generate": the gold answer, one token per report, so that progress is streamed.
        for tid, s in list(running.items()):
            gold = task.solution(s.prompt_tokens)
            if len(s.generated) < min(len(gold), s.max_new_tokens):
                s.generated = s.generated + [gold[len(s.generated)]]
                s.logprobs = s.logprobs + [-0.1]
                s.versions = [1]
            else:
                reward = task.reward(s.prompt_tokens, s.generated)
                finished.append(sluice.to_trajectory(s, reward, "rollout-0"))
                reported.add(tid)
                del running[tid]
        batch = trainer.collect(max=64, consumed=len(collected))
        collected += batch.trajectories
        done = batch.done
    ids = [t.id for t in collected]
    h.check(len(ids) == prompts * group, f"the trainer collected {len(ids)} trajectories")
    h.check(len(set(ids)) == len(ids) and set(ids) == reported, "each reported one exactly once")
    h.check(all(t.reward == 1.0 and t.version == 1 for t in collected), "with its reward and behaviour version")
    h.check(done, "and the manager said done once all were acknowledged")

    thief = sluice.TrainerClient(manager, security=h.security(keys, "rollout-0"))
    e = h.raises(sluice.Error, lambda: thief.collect(), "a generator's key cannot collect trajectories")
    h.check(e.code == "permission_denied", f"its code is {e.code}")
    bad = sluice.Trajectory()
    bad.id = "not-a-trajectory-id"
    h.raises(sluice.Error, lambda: gen.report(version=1, finished=[bad]), "a malformed trajectory is refused")


if __name__ == "__main__":
    main()
