"""The learner of examples/torch_grpo in plain PyTorch: supervised warm start on gold solutions,
GRPO updates on trajectories, and held-out evaluation. It mirrors sluice's C++ learner
(actor/learner.cpp, src/rl/loss.cpp) and reads the same settings, the `learner` section of the
actor's configuration:

- warm start: `warmstart_steps` AdamW steps on `warmstart_batch` fresh training prompts each, the
  loss the mean negative log-likelihood of the gold response tokens, lr `warmstart_lr` on a cosine
  to `warmstart_lr_final` of it; its own optimizer, so RL starts with clean moments;
- GRPO: per trajectory A = (r - mean_g) / (std_g + eps) over its group (same prompt id;
  population std; `grpo.scale_by_std` false: r - mean_g), spread over its response tokens; the
  decoupled clipped surrogate with the proximal policy = the weights before this update,
  behaviour = the log-probs the generator recorded, w = min(exp(proximal - behaviour),
  clip.behaviour_cap) and the ratio exp(new - proximal) clipped to [1 - clip_low, 1 + clip_high];
  the loss a mean over the batch's response tokens, each trajectory scaled by its sample weight;
  `minibatch` sequences per forward/backward with gradients accumulated, one AdamW step per epoch
  (`epochs`), gradient norm clipped to adamw.max_grad_norm, lr adamw.lr on a cosine to `lr_final`
  of it over `lr_decay_steps`;
- evaluation: greedy decoding of the first `eval_prompts` held-out prompts, at most
  `eval_max_new_tokens` tokens each; accuracy = share fully right (task.correct), with the count
  per number of terms.

Nothing here knows sluice's transport: the task is any object with train_prompt, heldout_prompt,
solution, reward and correct (sluice.ArithmeticTask, or standin_task.StandinTask).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Sequence

import torch

from model import Gpt, GptConfig

PLUS = 13  # the '+' token: a prompt's number of terms is its count of '+' plus one


@dataclass
class Sample:
    """A finished trajectory as the learner trains on it."""
    prompt_id: str
    prompt: List[int]
    response: List[int]
    logprobs: List[float]  # behaviour log-probs, one per response token
    reward: float
    weight: float = 1.0


def in_vocabulary(task, tokens: Sequence[int]) -> bool:
    return all(0 <= t < task.vocab_size for t in tokens)


def reward(task, prompt: Sequence[int], response: Sequence[int]) -> float:
    """The task's reward; 0 for a response with a token the task has no character for (a model
    whose embedding is wider than the task's vocabulary may sample one), as sluice's engine
    scores it (such a response is not well formed)."""
    return task.reward(prompt, response) if in_vocabulary(task, response) else 0.0


def correct(task, prompt: Sequence[int], response: Sequence[int]) -> bool:
    return bool(task.correct(prompt, response)) if in_vocabulary(task, response) else False


def cosine(base: float, step: int, steps: int, final: float) -> float:
    if steps == 0:
        return base
    t = min(step, steps) / steps
    return base * (final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * t)))


def adamw(params, c: dict, lr: float) -> torch.optim.AdamW:
    # Decay on matrices only, as sluice's AdamW.
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": c.get("weight_decay", 0.0)},
         {"params": rest, "weight_decay": 0.0}],
        lr=lr, betas=(c.get("beta1", 0.9), c.get("beta2", 0.95)), eps=c.get("eps", 1e-8))


def model_config(gpt: dict) -> GptConfig:
    """The model's shape from a `gpt` section of sluice's configuration (value_head unused)."""
    keep = {k: gpt[k] for k in ("vocab", "context", "d_model", "n_layer", "n_head", "d_ff",
                                "init_seed") if k in gpt}
    return GptConfig.from_dict(keep)


class Learner:
    def __init__(self, config: dict, task):
        """`config`: the learner section (actor.learner) as sluice writes it."""
        self.c = config
        self.task = task
        self.model = Gpt(model_config(config.get("gpt", {})))
        if self.model.config.vocab < task.vocab_size:
            raise ValueError(f"learner: gpt.vocab {self.model.config.vocab} is below the task's "
                             f"{task.vocab_size} tokens")
        a = config.get("adamw", {})
        self.lr = a.get("lr", 5e-5)
        self.max_grad_norm = a.get("max_grad_norm", 1.0)
        self.optimizer = adamw(list(self.model.parameters()), a, self.lr)
        self.steps = 0            # RL optimizer steps
        self.next_prompt = 0      # the warm start's position in the training stream

    # ---- warm start ----

    def warm_start(self, progress=None) -> Dict[str, float]:
        steps = self.c.get("warmstart_steps", 250)
        batch = self.c.get("warmstart_batch", 32)
        base = self.c.get("warmstart_lr", 1e-3)
        final = self.c.get("warmstart_lr_final", 1.0)
        opt = adamw(list(self.model.parameters()), self.c.get("adamw", {}), base)
        first = last = float("nan")
        self.model.train()
        for step in range(1, steps + 1):
            prompts, gold = [], []
            for _ in range(batch):
                p = self.task.train_prompt(self.next_prompt)[-1]  # (id, text, tokens)
                self.next_prompt += 1
                prompts.append(list(p))
                gold.append(list(self.task.solution(p)))
            logp = self.model.response_logprobs(prompts, gold)
            loss = -torch.cat(logp).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if self.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            for g in opt.param_groups:
                g["lr"] = cosine(base, step - 1, steps, final)
            opt.step()
            last = float(loss)
            if step == 1:
                first = last
            if progress:
                progress(step, last)
        return {"steps": steps, "first_loss": first, "last_loss": last}

    # ---- GRPO ----

    def advantages(self, samples: Sequence[Sample]) -> List[float]:
        g = self.c.get("grpo", {})
        scale, eps = g.get("scale_by_std", True), g.get("eps", 1e-6)
        groups: Dict[str, List[int]] = {}
        for i, s in enumerate(samples):
            groups.setdefault(s.prompt_id, []).append(i)
        out = [0.0] * len(samples)
        for members in groups.values():
            r = torch.tensor([samples[i].reward for i in members], dtype=torch.float64)
            mean, std = r.mean(), r.std(unbiased=False)
            if len(members) < 2 or float(std) == 0.0:
                continue  # equal rewards: nothing to learn from this group
            a = (r - mean) / (std + eps) if scale else r - mean
            for i, v in zip(members, a.tolist()):
                out[i] = v
        return out

    def train(self, batch: Sequence[Sample]) -> Dict[str, float]:
        """One GRPO update. Samples of weight 0 are left out entirely."""
        samples = [s for s in batch if s.weight > 0]
        stats = {"samples": len(samples), "skipped": len(batch) - len(samples)}
        if not samples:
            return stats
        for s in samples:
            if len(s.logprobs) != len(s.response) or not s.response:
                raise ValueError(f"learner: trajectory of {s.prompt_id}: {len(s.logprobs)} "
                                 f"log-probs for {len(s.response)} response tokens")
        clip = self.c.get("clip", {})
        lo, hi = 1.0 - clip.get("clip_low", 0.2), 1.0 + clip.get("clip_high", 0.2)
        cap = clip.get("behaviour_cap", 2.0)
        mb = self.c.get("minibatch", 16)
        epochs = self.c.get("epochs", 1)
        adv = self.advantages(samples)
        n_tok = sum(len(s.response) for s in samples)
        proximal: List[torch.Tensor] = [None] * len(samples)
        self.model.train()
        for epoch in range(epochs):
            self.optimizer.zero_grad(set_to_none=True)
            total = clipped = kl = behaviour_kl = 0.0
            for b0 in range(0, len(samples), mb):
                part = samples[b0: b0 + mb]
                logp = self.model.response_logprobs([s.prompt for s in part],
                                                    [s.response for s in part])
                loss = 0.0
                for j, (s, lp) in enumerate(zip(part, logp)):
                    i = b0 + j
                    if proximal[i] is None:  # the first epoch's weights: this update's start
                        proximal[i] = lp.detach()
                    behaviour = torch.tensor(s.logprobs)
                    w = (proximal[i] - behaviour).exp().clamp(max=cap)
                    ratio = (lp - proximal[i]).exp()
                    a = adv[i]
                    surrogate = torch.minimum(ratio * a, ratio.clamp(lo, hi) * a)
                    loss = loss - (s.weight * w * surrogate).sum() / n_tok
                    with torch.no_grad():
                        clipped += float(((ratio.clamp(lo, hi) * a) < ratio * a).sum())
                        kl += float(((ratio - 1) - (lp - proximal[i])).sum())
                        if epoch == 0:
                            lw = proximal[i] - behaviour
                            behaviour_kl += float(((lw.exp() - 1) - lw).sum())
                loss.backward()
                total += float(loss)
            norm = torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), self.max_grad_norm if self.max_grad_norm > 0 else 1e30)
            for g in self.optimizer.param_groups:
                g["lr"] = cosine(self.lr, self.steps, self.c.get("lr_decay_steps", 0),
                                 self.c.get("lr_final", 0.1))
            self.optimizer.step()
            self.steps += 1
            stats.update(loss=total, clip_fraction=clipped / n_tok, approx_kl=kl / n_tok,
                         grad_norm=float(norm))
            if epoch == 0:
                stats["behaviour_kl"] = behaviour_kl / n_tok
        stats["tokens"] = n_tok
        stats["reward_mean"] = sum(s.reward for s in samples) / len(samples)
        return stats

    # ---- evaluation ----

    def evaluate(self) -> Dict[str, object]:
        n = self.c.get("eval_prompts", 200)
        prompts = [list(self.task.heldout_prompt(i)[-1]) for i in range(n)]
        self.model.eval()
        out = self.model.generate(prompts, self.c.get("eval_max_new_tokens", 48), temperature=0.0)
        n_right = total_reward = length = 0.0
        by_terms: Dict[int, List[int]] = {}
        for p, g in zip(prompts, out):
            right = correct(self.task, p, g.tokens)
            n_right += right
            total_reward += reward(self.task, p, g.tokens)
            length += len(g.tokens)
            k = by_terms.setdefault(p.count(PLUS) + 1, [0, 0])
            k[0] += 1
            k[1] += right
        return {"accuracy": n_right / n, "eval_reward": total_reward / n,
                "eval_response_tokens": length / n, "eval_prompts": n,
                "accuracy_by_terms": [[t, k[0], k[1]] for t, k in sorted(by_terms.items())]}
