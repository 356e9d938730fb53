"""The actor of examples/torch_grpo, a command role of `sluice run` (docs/architecture.md,
"Command roles"): a PyTorch GRPO trainer that takes trajectories from sluice's rollout manager and
publishes each new version of its weights through sluice's weight store.

    sluice run examples/torch_grpo/job.json   (which starts /usr/bin/python3 actor.py --config F)

It does what `sluice actor` does with policy gpt (actor/trainer.cpp), in PyTorch:
warm start, held-out evaluation, version 1 published; then collect trajectories, keep them in an
experience buffer (whole GRPO groups, the staleness bound), train on each full batch, publish the
next version and tell the manager; evaluate every eval_every steps; at the end the final weights
(safetensors), metrics.jsonl and the summary, in the run folder.

Surviving kill -9 (checkpoint_dir, which sluice run sets): every checkpoint_every_steps steps, when
idle for checkpoint_idle_s with consumed trajectories not yet in a checkpoint, and at the end, it
saves its weights, optimizer, counters and consumed ids atomically (torch-actor.pt); only then does
it acknowledge those trajectories to the manager. A restarted actor resumes from the checkpoint
(no warm start), refuses ids it consumed, gets from the manager everything not acknowledged, and
publishes above the store's latest version. Without checkpoint_dir, trajectories are acknowledged
on receipt and a restarted actor starts over from its warm start.
"""
from __future__ import annotations

import os
import sys
import time
from collections import OrderedDict
from typing import Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import role  # noqa: E402
from learner import Learner, Sample  # noqa: E402
from model import state_dict_for_publish  # noqa: E402

import sluice  # noqa: E402


class ExperienceBuffer:
    """Finished trajectories, handed out as whole groups of `group_size` (same prompt id), oldest
    first, under the staleness bound (actor/experience_buffer.hpp): an id is accepted once; a
    group's staleness is its stalest member's (actor version - behaviour version, the oldest
    version it was generated with); beyond max_staleness a group is dropped (policy drop) or
    handed out at stale_weight (downweight); a group with an abandoned member is dropped."""

    def __init__(self, group_size: int, max_staleness: int, policy: str, stale_weight: float):
        self.group_size, self.max_staleness = group_size, max_staleness
        self.policy, self.stale_weight = policy, stale_weight
        self.seen = set()
        self.groups: "OrderedDict[str, list]" = OrderedDict()
        self.counts = dict(accepted=0, duplicates=0, dropped_stale=0, downweighted=0, abandoned=0)

    def add(self, t) -> bool:
        if t.id in self.seen:
            self.counts["duplicates"] += 1
            return False
        self.seen.add(t.id)
        self.counts["accepted"] += 1
        self.counts["abandoned"] += bool(t.abandoned)
        self.groups.setdefault(t.prompt_id, []).append(t)
        return True

    def held(self) -> int:
        return sum(len(g) for g in self.groups.values())

    def take(self, n: int, version: int) -> Tuple[List[Tuple[object, float, int]], List[str]]:
        """Up to n trajectories in whole groups, as (trajectory, weight, staleness); and the ids
        dropped on the way."""
        out, dropped = [], []
        for key in list(self.groups):
            group = self.groups[key]
            if len(group) < self.group_size:
                continue
            stale = max(version - behaviour_version(t) for t in group)
            if any(t.abandoned for t in group) or (stale > self.max_staleness
                                                   and self.policy == "drop"):
                del self.groups[key]
                self.counts["dropped_stale"] += len(group)
                dropped += [t.id for t in group]
                continue
            if len(out) + len(group) > n:
                break
            weight = 1.0
            if stale > self.max_staleness:
                weight = self.stale_weight
                self.counts["downweighted"] += len(group)
            del self.groups[key]
            out += [(t, weight, stale) for t in group]
        return out, dropped


def behaviour_version(t) -> int:
    return min(t.versions) if t.versions else t.version


def store_latest(a: dict, security: dict, wait_s: float = 30.0) -> int:
    """The store's newest committed version of the model (0: none), asked for a while: a
    restarting store answers once its holders have registered again."""
    deadline = time.time() + wait_s
    while True:
        try:
            probe = sluice.Reader(a["store"], a["model"], holder_id=a["actor_id"],
                                  security=security, serve=False)
            try:
                return probe.latest()
            finally:
                probe.close()
        except sluice.Error as e:
            if time.time() >= deadline:
                raise
            role.log(f"actor: asking the store for its latest version: {e}")
            time.sleep(0.5)


def main() -> int:
    stop, cfg, opts = role.start()
    a = cfg["actor"]
    torch.manual_seed(int(opts.get("seed", 1)))
    lc = a["learner"]
    security = a["security"]

    task = sluice.ArithmeticTask(lc["task"])
    learner = Learner(lc, task)
    publisher = sluice.Publisher(a["store"], a["model"], holder_id=a["actor_id"],
                                 security=security, chunk_bytes=a["chunk_bytes"],
                                 lease_ttl=a["store_lease_ttl_ms"] / 1000.0,
                                 timeout=a["store_timeout_ms"] / 1000.0)
    ckpt_dir = a.get("checkpoint_dir") or ""
    ckpt_path = os.path.join(ckpt_dir, "torch-actor.pt") if ckpt_dir else ""
    # Without checkpoints nothing survives this process: trajectories are acknowledged on receipt
    # (auto_ack), as sluice actor does without checkpoint_dir.
    manager = sluice.TrainerClient(a["manager"], security=security,
                                   timeout=a["manager_call_ms"] / 1000.0, auto_ack=not ckpt_dir)
    buffer = ExperienceBuffer(a["group_size"], a["max_staleness"], a["staleness_policy"],
                              a["stale_weight"])
    role.say(f"actor {a['actor_id']}")

    metrics = open(a["metrics_path"], "a") if a.get("metrics_path") else None
    offset = a.get("start_offset_s", 0.0)

    def write_metrics(line: Dict) -> None:
        if metrics:
            metrics.write(json_line(line) + "\n")
            metrics.flush()

    s = dict(version=0, steps=0, trained_tokens=0, trained_samples=0, taken=0, idle_s=0.0,
             train_s=0.0, publish_s=0.0, staleness_sum=0.0, staleness_max=0, mixed=0,
             initial_accuracy=-1.0, final_accuracy=-1.0, initial_by_terms=None,
             final_by_terms=None, restarts=0, resumed_from_step=None, checkpoints=0,
             warmstart_s=0.0)
    consumed_ids: List[str] = []
    trained_ids: List[str] = []
    unsynced: List[str] = []  # consumed, not in a checkpoint yet (checkpoint_dir only)
    durable = set()           # consumed and in a checkpoint: a copy sent again is acknowledged
    ckpt = dict(steps=0, at=time.time())

    resumed = bool(ckpt_path) and os.path.exists(ckpt_path)
    if resumed:
        state = torch.load(ckpt_path)
        learner.model.load_state_dict(state["model"])
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.steps, learner.next_prompt = state["learner_steps"], state["next_prompt"]
        s.update(state["counters"])
        s["restarts"] += 1
        s["resumed_from_step"] = s["steps"]
        consumed_ids, trained_ids = state["consumed_ids"], state["trained_ids"]
        buffer.counts = state["buffer_counts"]
        buffer.seen = set(consumed_ids)
        durable = set(consumed_ids)
        ckpt["steps"] = s["steps"]
        role.log(f"actor: resumed from {ckpt_path} at step {s['steps']}, version {s['version']} "
                 f"(restart {s['restarts']})")
    else:
        t_ws = time.time()
        ws = learner.warm_start(lambda i, l: i % 50 == 0 and role.log(
            f"actor: warm start step {i}: loss {l:.3f}"))
        s["warmstart_s"] = time.time() - t_ws
        role.log(f"actor: warm start done in {s['warmstart_s']:.1f} s: {ws['steps']} steps, loss "
                 f"{ws['first_loss']:.3f} -> {ws['last_loss']:.3f}")

    # Not the job's first actor, maybe: one that died published versions the generators now run.
    # Publishing at or below them would leave every trajectory "from the future" and the job
    # stalled, so this one publishes above the store's latest (as sluice actor does).
    floor = store_latest(a, security)
    if floor > s["version"]:
        role.log(f"actor: the store has version {floor}: publishing above it")
        s["version"] = floor
    started = time.time()
    last_progress = time.time()  # the last arrival or step

    def consume(tid: str, trained: bool) -> None:
        consumed_ids.append(tid)
        if trained:
            trained_ids.append(tid)
        if ckpt_dir:
            unsynced.append(tid)
        else:
            durable.add(tid)

    def checkpoint() -> None:
        """Weights, optimizer, counters and consumed ids, atomically; then the consumed ids are
        durable and are acknowledged (with the next collect)."""
        nonlocal unsynced
        t0 = time.time()
        s["checkpoints"] += 1
        os.makedirs(ckpt_dir, exist_ok=True)
        tmp = ckpt_path + ".tmp"
        torch.save({"model": learner.model.state_dict(),
                    "optimizer": learner.optimizer.state_dict(),
                    "learner_steps": learner.steps, "next_prompt": learner.next_prompt,
                    "counters": dict(s), "consumed_ids": consumed_ids,
                    "trained_ids": trained_ids, "buffer_counts": dict(buffer.counts)}, tmp)
        os.replace(tmp, ckpt_path)
        durable.update(unsynced)
        if unsynced:
            manager.ack(unsynced)
        unsynced = []
        ckpt.update(steps=s["steps"], at=time.time())
        role.log(f"actor: checkpoint {s['checkpoints']} at step {s['steps']}, version "
                 f"{s['version']} ({len(consumed_ids)} consumed ids, {time.time() - t0:.2f} s)")

    def maybe_checkpoint(idle: bool) -> None:
        if not ckpt_dir:
            return
        every_steps, every_s = a.get("checkpoint_every_steps", 10), a.get("checkpoint_every_s", 0)
        idle_s = a.get("checkpoint_idle_s", 1.0)
        due = (every_steps > 0 and s["steps"] - ckpt["steps"] >= every_steps) or \
            (every_s > 0 and time.time() - ckpt["at"] >= every_s) or \
            (idle and idle_s > 0 and unsynced and time.time() - last_progress >= idle_s)
        if due:
            checkpoint()

    def evaluate(extra: Dict) -> Dict:
        ev = learner.evaluate()
        s["final_accuracy"], s["final_by_terms"] = ev["accuracy"], ev["accuracy_by_terms"]
        if s["initial_accuracy"] < 0:
            s["initial_accuracy"], s["initial_by_terms"] = ev["accuracy"], ev["accuracy_by_terms"]
        role.log(f"actor: held-out accuracy after {s['steps']} steps: "
                 f"{100 * ev['accuracy']:.1f}%")
        return {**ev, **extra}

    def consumed() -> int:
        return s["taken"] + buffer.counts["dropped_stale"]

    def publish_next() -> None:
        s["version"] += 1
        t0 = time.time()
        publisher.publish(s["version"], state_dict_for_publish(learner.model))
        s["publish_s"] += time.time() - t0
        try:
            manager.published(s["version"], consumed())
        except sluice.Error as e:  # the manager hears of it with the next collect anyway
            role.log(f"actor: telling the manager about version {s['version']} failed: {e}")

    eval_every = a.get("eval_every", 0)
    if eval_every > 0 and not resumed:
        write_metrics(evaluate({"t": offset, "step": 0, "version": s["version"], "samples": 0}))
    publish_next()

    batch: List[Tuple[object, float, int]] = []
    done = False
    last_heard = time.time()

    def train(batch) -> None:
        samples = [Sample(t.prompt_id, list(t.prompt_tokens), list(t.response_tokens),
                          list(t.logprobs), t.reward, w) for t, w, _ in batch]
        t0 = time.time()
        st = learner.train(samples)
        s["train_s"] += time.time() - t0
        s["steps"] += 1
        tokens = sum(len(x.response) for x in samples if x.weight > 0)
        s["trained_tokens"] += tokens
        s["trained_samples"] += len(batch)
        for t, w, _ in batch:
            consume(t.id, w > 0)
        line = {"loss": st.get("loss", 0.0), "reward_mean": st.get("reward_mean", 0.0),
                "clip_fraction": st.get("clip_fraction", 0.0),
                "behaviour_kl": st.get("behaviour_kl", 0.0),
                "grad_norm": st.get("grad_norm", 0.0)}
        if eval_every > 0 and s["steps"] % eval_every == 0:
            line = evaluate(line)
        since = max(1e-9, time.time() - started)
        line.update(t=since + offset, step=s["steps"], version=s["version"] + 1,
                    tokens_per_s=s["trained_tokens"] / since,
                    staleness_mean=sum(x[2] for x in batch) / max(1, len(batch)),
                    samples=s["trained_samples"])
        write_metrics(line)

    while not stop.requested:
        if a.get("steps", 0) > 0 and s["steps"] >= a["steps"]:
            break
        wait0 = time.time()
        try:
            got = manager.collect(max=512, consumed=consumed())
            last_heard = time.time()
        except sluice.Error as e:
            if (time.time() - last_heard) * 1000 > a["manager_timeout_ms"]:
                raise RuntimeError(f"actor: manager {a['manager']} silent for "
                                   f"{a['manager_timeout_ms']} ms: {e}") from e
            got = None
        if got is not None:
            done = got.done
            if got.trajectories:
                last_progress = time.time()
            for t in got.trajectories:
                # A copy of one already durable (its acknowledgement was lost, or this actor
                # restarted before it was delivered): acknowledged again.
                if not buffer.add(t) and t.id in durable:
                    manager.ack([t.id])
        taken, dropped = buffer.take(a["batch_trajectories"] - len(batch), s["version"])
        for tid in dropped:
            consume(tid, False)
        for t, w, stale in taken:
            s["taken"] += 1
            s["staleness_sum"] += stale
            s["staleness_max"] = max(s["staleness_max"], stale)
            s["mixed"] += len(set(t.versions)) > 1
        batch += taken
        if len(batch) < a["batch_trajectories"]:
            if done and buffer.held() == 0:
                break
            if not batch:
                maybe_checkpoint(idle=True)
            time.sleep(a["collect_ms"] / 1000.0)
            s["idle_s"] += time.time() - wait0
            continue
        s["idle_s"] += time.time() - wait0
        train(batch)
        last_progress = time.time()
        batch = []
        publish_next()
        maybe_checkpoint(idle=False)
    # A last partial batch is trained on too, so every trajectory is used.
    if batch and not stop.requested:
        train(batch)
        publish_next()
    if eval_every > 0 and s["steps"] % eval_every != 0:
        since = time.time() - started
        write_metrics(evaluate({"t": since + offset, "step": s["steps"], "version": s["version"],
                                "samples": s["trained_samples"]}))
    if a.get("weights_path"):
        role.write_safetensors(a["weights_path"], state_dict_for_publish(learner.model),
                               {"format": "examples/torch_grpo gpt"})
    if ckpt_dir:
        checkpoint()
        # The last acknowledgements go with a collect of nothing: a few bounded tries.
        for i in range(3):
            try:
                manager.collect(max=0, consumed=consumed())
                break
            except sluice.Error as e:
                role.log(f"actor: final acknowledgement (try {i + 1} of 3): {e}")

    wall = time.time() - started
    summary = {
        "wall_s": wall, "steps": s["steps"], "version": s["version"],
        "trained_tokens": s["trained_tokens"], "trained_samples": s["trained_samples"],
        "tokens_per_s": s["trained_tokens"] / wall if wall > 0 else 0.0,
        "idle_s": s["idle_s"], "train_s": s["train_s"], "publish_s": s["publish_s"],
        "actor_idle_frac": s["idle_s"] / wall if wall > 0 else 0.0,
        "staleness_mean": s["staleness_sum"] / s["taken"] if s["taken"] else 0.0,
        "staleness_max": s["staleness_max"], "max_staleness_bound": a["max_staleness"],
        "mixed_version_consumed": s["mixed"],
        "initial_accuracy": s["initial_accuracy"], "final_accuracy": s["final_accuracy"],
        "initial_accuracy_by_terms": s["initial_by_terms"],
        "final_accuracy_by_terms": s["final_by_terms"],
        **buffer.counts, "restarts": s["restarts"], "resumed_from_step": s["resumed_from_step"],
        "checkpoints": s["checkpoints"], "warmstart_s": s["warmstart_s"],
        "accepted_ids": consumed_ids, "trained_ids": trained_ids,
    }
    if a.get("summary_path"):
        with open(a["summary_path"], "w") as f:
            f.write(json_line(summary) + "\n")
    publisher.close()
    del summary["accepted_ids"], summary["trained_ids"]  # the stdout line stays short
    role.say("summary " + json_line(summary))
    return 0


def json_line(d: Dict) -> str:
    import json
    return json.dumps(d, separators=(",", ":"))


if __name__ == "__main__":
    sys.exit(main())
