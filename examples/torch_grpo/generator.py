"""A generator (rollout) of examples/torch_grpo, a command role of `sluice run`
(docs/architecture.md, "Command roles"): samples responses with the PyTorch model, pulling each
new weight version through sluice's weight store, and reports to sluice's rollout manager.

    sluice run examples/torch_grpo/job.json   (which starts /usr/bin/python3 generator.py
                                               --config F for each rollout)

It does what `sluice rollout` does with engine model (rollout/worker.cpp): report every report_ms
(its version, running and queued sequences, what finished with rewards and behaviour log-probs,
what it exported, returned or refused, every partial_every reports the state of its running
sequences, and its time accounting), and do what the reply says: queue new sequences, continue
imported ones, export or abandon running ones, hand back queued ones, load a newer version. The
engine (engine.py) decodes a batch with one version from start to end; a new version is loaded
between batches (also when the manager allows loading under running sequences).
"""
from __future__ import annotations

import os
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import role  # noqa: E402
from engine import Engine, Seq  # noqa: E402
from learner import model_config, reward  # noqa: E402
from model import Gpt  # noqa: E402

import sluice  # noqa: E402


def to_seq(s) -> Seq:
    return Seq(s.trajectory_id, s.prompt_id, list(s.prompt_tokens), int(s.max_new_tokens),
               list(s.generated), list(s.logprobs), list(s.versions), int(s.rng_state))


def to_state(s: Seq):
    out = sluice.SequenceState()
    out.trajectory_id, out.prompt_id = s.trajectory_id, s.prompt_id
    out.prompt_tokens, out.generated = s.prompt_tokens, s.generated
    out.logprobs, out.versions = s.logprobs, s.versions
    out.max_new_tokens, out.rng_state = s.max_new_tokens, s.rng_state
    return out


def to_trajectory(d, rollout_id: str):
    t = sluice.to_trajectory(to_state(d.seq), d.reward, rollout_id)
    t.abandoned = d.abandoned
    return t


class Clock:
    """The rollout's time accounting, as sluice rollout reports it (rollout/worker.hpp):
    generating, loading weights, waiting at a barrier, idle; counted from the first version."""

    def __init__(self, max_sequences: int):
        self.max_sequences = max_sequences
        self.started = None
        self.t = dict(gen_s=0.0, load_s=0.0, barrier_s=0.0, idle_s=0.0, occupancy_s=0.0)
        self.n = dict(tokens=0, steps=0, loads=0, imported=0, exported=0, abandoned=0,
                      refused_version=0)

    def stats(self) -> dict:
        wall = time.time() - self.started if self.started else 0.0
        return {"wall_s": wall, **self.t, **self.n, "max_sequences": self.max_sequences}


def main() -> int:
    stop, cfg, opts = role.start()
    r = cfg["rollout"]
    rid = r["rollout_id"]
    eng_cfg = r["gpt"]
    task = sluice.ArithmeticTask(r["task"])
    model = Gpt(model_config(eng_cfg["gpt"]))
    model.eval()
    max_seq = eng_cfg["max_sequences"]
    kv = eng_cfg.get("max_kv_tokens", 0) or max_seq * model.config.context
    engine = Engine(model, max_seq, eng_cfg.get("temperature", 1.0),
                    lambda p, resp: reward(task, p, resp),
                    seed=int(opts.get("seed", 1)) * 7919 + zlib.crc32(rid.encode()))
    # Serving peers is off, as sluice rollout's "auto" decides with UCX 1.13 (rollout/worker.hpp).
    reader = sluice.Reader(r["store"], r["model"], holder_id=rid, security=r["security"],
                           serve=r.get("serve") == "on")
    manager = sluice.Generator(r["manager"], rid, security=r["security"], max_sequences=max_seq,
                               max_kv_tokens=kv,
                               timeout=max(1.0, r["report_ms"] * 40 / 1000.0))
    role.say(f"rollout {rid}")

    clock = Clock(max_seq)
    finished, exported, returned, refused = [], [], [], []
    report_every = r["report_ms"] / 1000.0
    partial_every = r.get("partial_every", 8)
    reports = 0
    want = 0          # the version the manager asked for
    state = "run"     # the manager's: run, barrier or idle
    unreachable = False
    last_heard = time.time()
    next_report = time.time()
    while not stop.requested:
        if time.time() >= next_report:
            running = engine.active()
            clock.n["tokens"] = engine.tokens
            partial = running if partial_every > 0 and reports % partial_every == 0 else []
            reports += 1
            try:
                work = manager.report(
                    version=engine.version, staged=max(reader.staged, engine.version),
                    active=[to_state(s) for s in running],
                    finished=[to_trajectory(d, rid) for d in finished],
                    exported=[to_state(s) for s in exported], queued=engine.queued_ids(),
                    partial=[to_state(s) for s in partial],
                    returned=[to_state(s) for s in returned],
                    refused=[to_state(s) for s in refused], stats=clock.stats())
                if unreachable:
                    role.log(f"rollout {rid}: the manager answers again")
                unreachable = False
                last_heard = time.time()
                finished, exported, returned, refused = [], [], [], []
            except sluice.Error as e:
                if (time.time() - last_heard) * 1000 > r["manager_timeout_ms"]:
                    role.log(f"rollout {rid}: manager {r['manager']} silent for "
                             f"{r['manager_timeout_ms']} ms: {e}")
                    return 1
                if not unreachable:
                    role.log(f"rollout {rid}: report failed (holding {len(finished)} finished "
                             f"trajectories until the manager answers): {e}")
                unreachable = True
                work = None
            # While the manager is away each try blocks up to its time-out: try less often.
            next_report = time.time() + (max(report_every, 1.0) if unreachable else report_every)
            if work is not None:
                if work.rejoin:
                    role.log(f"rollout {rid}: the manager declared it dead; rejoining")
                    engine.drop_all()
                    continue
                if work.done:
                    break
                state = work.state
                if work.unqueue:
                    returned += engine.unqueue()
                for e in work.abandon:
                    d = engine.abandon(e)
                    if d:
                        finished.append(d)
                        clock.n["abandoned"] += 1
                if work.abandon_before:
                    stale = engine.abandon_before(work.abandon_before)
                    clock.n["abandoned"] += len(stale)
                    finished += stale
                for e in work.export_ids:
                    s = engine.export(e)
                    if s:
                        exported.append(s)
                        clock.n["exported"] += 1
                for s in work.imported:
                    s = to_seq(s)
                    # A moved sequence continues only on the version that generated it.
                    if s.versions and s.versions[-1] != engine.version:
                        clock.n["refused_version"] += 1
                        refused.append(s)
                    else:
                        clock.n["imported"] += bool(s.generated)
                        engine.assign(s)
                for s in work.assign:
                    engine.assign(to_seq(s))
                want = max(want, work.load)
                if work.latest > max(engine.version, reader.staged, reader.current):
                    reader.prefetch(work.latest)
        # A newer version, between batches: every trajectory keeps the one version it began with.
        if want > engine.version and engine.idle():
            t0 = time.time()
            if reader.staged >= want and reader.ready():
                reader.swap(into=engine.weights())
            else:
                reader.pull(want, into=engine.weights())
            engine.loaded(reader.current)
            clock.n["loads"] += 1
            if clock.started is None:  # the accounting starts with the first weights
                clock.started = time.time()
            else:
                clock.t["load_s"] += time.time() - t0
        if not engine.idle() or (engine.queue and engine.version > 0):
            t0 = time.time()
            batch = engine.running()
            done = engine.step()
            took = time.time() - t0
            clock.t["gen_s"] += took
            clock.t["occupancy_s"] += took * max(batch, len(done)) / max_seq
            clock.n["steps"] += 1
            finished += done
            if done and engine.idle() and not engine.queue:
                next_report = time.time()  # the manager may be waiting for them
        else:
            t0 = time.time()
            time.sleep(max(0.0, min(next_report - time.time(), report_every)))
            if clock.started is not None:
                clock.t["barrier_s" if state == "barrier" else "idle_s"] += time.time() - t0
    reader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
