"""The generation engine of examples/torch_grpo's generators, in plain PyTorch: sequences queued,
decoded in batches (model.DecodeBatch) by one weight version, and handed out finished, exported
(moved to another generator with their state) or abandoned. Nothing here knows sluice's
transport; generator.py feeds it what the rollout manager says.

Trajectory-level asynchrony (the design's): a batch is decoded by one version from its first token
to its last. A new version is loaded only between batches, so every trajectory records exactly the
version that generated it, and the manager's load request waits for the running batch.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional

import torch

from model import DecodeBatch, Generated, Gpt


@dataclass
class Seq:
    """A sequence to generate (sluice's SequenceState)."""
    trajectory_id: str
    prompt_id: str
    prompt_tokens: List[int]
    max_new_tokens: int
    generated: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    versions: List[int] = field(default_factory=list)  # versions that generated its tokens
    rng_state: int = 0


@dataclass
class Done:
    """A finished (or abandoned) sequence with its reward."""
    seq: Seq
    reward: float
    abandoned: bool = False


class Engine:
    def __init__(self, model: Gpt, max_sequences: int, temperature: float,
                 scorer: Callable[[List[int], List[int]], float], seed: int = 1):
        self.model = model
        self.max_sequences = max_sequences
        self.temperature = temperature
        self.scorer = scorer
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0  # the weights loaded (0: none yet)
        self.queue: Deque[Seq] = deque()
        self.batch: Optional[DecodeBatch] = None
        self.batch_seqs: List[Optional[Seq]] = []  # by row of the batch (None: taken out)
        self.tokens = 0

    # ---- what the manager asks ----

    def assign(self, s: Seq) -> None:
        self.queue.append(s)

    def active(self) -> List[Seq]:
        """The running sequences with what they have generated so far."""
        out = []
        for row, s in enumerate(self.batch_seqs):
            if s is not None and self.batch.live[row]:
                out.append(self._state(row, s))
        return out

    def export(self, trajectory_id: str) -> Optional[Seq]:
        """Takes a sequence out, queued or running, with its state; None if it is not here."""
        for s in list(self.queue):
            if s.trajectory_id == trajectory_id:
                self.queue.remove(s)
                return s
        for row, s in enumerate(self.batch_seqs):
            if s is not None and s.trajectory_id == trajectory_id and self.batch.live[row]:
                self.batch.stop(row)
                self.batch_seqs[row] = None
                return self._state(row, s)
        return None

    def abandon(self, trajectory_id: str) -> Optional[Done]:
        s = self.export(trajectory_id)
        return Done(s, 0.0, abandoned=True) if s is not None else None

    def abandon_before(self, version: int) -> List[Done]:
        """Running sequences whose first token came from a version older than `version`."""
        out = []
        for row, s in enumerate(self.batch_seqs):
            if s is None or not self.batch.live[row]:
                continue
            first = s.versions[0] if s.versions else self.version
            if first < version:
                out.append(self.abandon(s.trajectory_id))
        return out

    def queued_ids(self) -> List[str]:
        return [s.trajectory_id for s in self.queue]

    def unqueue(self) -> List[Seq]:
        """Hands back what has not started (to start on a newer version elsewhere)."""
        out = list(self.queue)
        self.queue.clear()
        return out

    def running(self) -> int:
        return self.batch.running() if self.batch is not None else 0

    def drop_all(self) -> None:
        self.queue.clear()
        self.batch, self.batch_seqs = None, []

    # ---- weights ----

    def idle(self) -> bool:
        return self.batch is None

    def weights(self) -> Dict[str, torch.Tensor]:
        """The model's tensors, to load a version into in place."""
        return {k: v for k, v in self.model.state_dict().items()}

    def loaded(self, version: int) -> None:
        self.version = version

    # ---- generation ----

    def step(self) -> List[Done]:
        """One decode step of the running batch, or a new batch from the queue; returns what
        finished."""
        if self.batch is None:
            if not self.queue or self.version == 0:
                return []
            seqs = [self.queue.popleft() for _ in range(min(self.max_sequences, len(self.queue)))]
            for s in seqs:
                if s.versions and s.versions[-1] != self.version:
                    s.versions.append(self.version)  # not expected: imports match the version
                elif not s.versions and s.generated:
                    s.versions.append(self.version)
            self.batch = DecodeBatch(
                self.model, [s.prompt_tokens for s in seqs], [s.max_new_tokens for s in seqs],
                self.temperature, self.generator,
                starts=[Generated(list(s.generated), list(s.logprobs)) for s in seqs])
            self.batch_seqs = list(seqs)
            done = [row for row in range(len(seqs)) if not self.batch.live[row]]
        else:
            done = self.batch.step()
            self.tokens += self.batch.running() + len(done)
        out = []
        for row in done:
            s = self.batch_seqs[row]
            if s is None:
                continue
            self.batch_seqs[row] = None
            s = self._state(row, s)
            out.append(Done(s, self.scorer(s.prompt_tokens, s.generated)))
        if self.batch.running() == 0:
            self.batch, self.batch_seqs = None, []
        return out

    def _state(self, row: int, s: Seq) -> Seq:
        g = self.batch.out[row]
        versions = list(s.versions)
        if len(g.tokens) > len(s.generated) and (not versions or versions[-1] != self.version):
            versions.append(self.version)
        return Seq(s.trajectory_id, s.prompt_id, list(s.prompt_tokens), s.max_new_tokens,
                   list(g.tokens), list(g.logprobs), versions, s.rng_state)
