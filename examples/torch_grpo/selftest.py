"""The PyTorch half of examples/torch_grpo on its own, without sluice's processes: warm start,
held-out evaluation, then GRPO steps on groups generated locally, and evaluation again. Shows that
the model, the update and the evaluation work (and how fast) before the job spreads them over
processes.

    /usr/bin/python3 examples/torch_grpo/selftest.py [--steps 60] [--json]

It reads the job's settings from examples/torch_grpo/job.json (the actor's learner section, the
manager's group and batch sizes, the rollouts' temperature). The task is sluice.ArithmeticTask
when the sluice package imports, else standin_task.StandinTask (same format and reward, its own
prompt streams).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from learner import Learner, Sample, reward  # noqa: E402


def load_task(config):
    try:
        import sluice  # noqa: F401
        return sluice.ArithmeticTask(config), "sluice.ArithmeticTask"
    except ImportError:
        from standin_task import StandinTask
        return StandinTask(config), "standin_task.StandinTask (sluice is not importable)"


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", default=os.path.join(here, "job.json"))
    ap.add_argument("--steps", type=int, default=60, help="GRPO steps")
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmstart-steps", type=int, help="instead of the job's (a quick check)")
    ap.add_argument("--eval-prompts", type=int, help="instead of the job's (a quick check)")
    ap.add_argument("--warm-cache", help="load the warm-started weights from this file if it "
                    "exists, else save them there (to compare RL settings from one warm start)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    with open(args.job) as f:
        job = json.load(f)
    lc = job["actor"]["learner"]
    if args.warmstart_steps is not None:
        lc["warmstart_steps"] = args.warmstart_steps
    if args.eval_prompts is not None:
        lc["eval_prompts"] = args.eval_prompts
    group = job["manager"]["group_size"]
    prompts_per_step = job["manager"]["batch_trajectories"] // group
    temperature = job["rollout"]["gpt"].get("temperature", 1.0)
    max_new = job["manager"].get("max_new_tokens", 64)
    task, which = load_task(lc.get("task", {}))
    learner = Learner(lc, task)
    n_params = sum(p.numel() for p in learner.model.parameters())
    print(f"selftest: task {which}; model {n_params} parameters; {torch.get_num_threads()} "
          f"threads", flush=True)

    t0 = time.time()
    if args.warm_cache and os.path.exists(args.warm_cache):
        learner.model.load_state_dict(torch.load(args.warm_cache))
        ws = {"steps": 0, "first_loss": float("nan"), "last_loss": float("nan")}
    else:
        ws = learner.warm_start(lambda s, l: s % 100 == 0 and print(
            f"  warm start step {s}: loss {l:.3f}", flush=True))
        if args.warm_cache:
            torch.save(learner.model.state_dict(), args.warm_cache)
    ev = learner.evaluate()
    start = ev["accuracy"]
    print(f"selftest: warm start {ws['steps']} steps in {time.time() - t0:.1f} s, loss "
          f"{ws['first_loss']:.3f} -> {ws['last_loss']:.3f}; held-out accuracy "
          f"{100 * start:.1f}%", flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    next_prompt = 10**6  # past the warm start's prompts
    t1 = time.time()
    for step in range(1, args.steps + 1):
        ids, prompts = [], []
        for _ in range(prompts_per_step):
            pid, _, p = task.train_prompt(next_prompt)
            next_prompt += 1
            ids += [pid] * group
            prompts += [list(p)] * group
        tg = time.time()
        learner.model.eval()
        out = learner.model.generate(prompts, max_new, temperature, gen)
        tg = time.time() - tg
        batch = [Sample(i, p, g.tokens, g.logprobs, reward(task, p, g.tokens))
                 for i, p, g in zip(ids, prompts, out)]
        tt = time.time()
        st = learner.train(batch)
        tt = time.time() - tt
        line = (f"  step {step}: reward {st['reward_mean']:.3f}, loss {st['loss']:+.4f}, "
                f"generate {tg:.2f} s, train {tt:.2f} s")
        if step % args.eval_every == 0 or step == args.steps:
            line += f", held-out accuracy {100 * learner.evaluate()['accuracy']:.1f}%"
        print(line, flush=True)
    end = learner.evaluate()["accuracy"]
    print(f"selftest: {args.steps} GRPO steps in {time.time() - t1:.1f} s; held-out accuracy "
          f"{100 * start:.1f}% -> {100 * end:.1f}% ({100 * (end - start):+.1f} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
