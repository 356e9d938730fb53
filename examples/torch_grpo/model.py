"""A small GPT in PyTorch for the arithmetic task: the policy of examples/torch_grpo.

The same shape as sluice's reference model (src/model/gpt.*): GPT-2 blocks (pre-LayerNorm,
causal self-attention, GELU MLP), learned positions, the output head tied to the token embedding.
Parameter names follow Hugging Face's GPT-2 ("wte.weight", "h.0.attn.c_attn.weight", ...), the
names sluice publishes a version under.

Generation batches prompts of different lengths by padding them on the left: every sequence's
last prompt token sits in the same column, so one decode step advances them all. A key-value
cache holds each layer's keys and values; padded positions are masked out of attention and do not
count for positions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2  # the task's special tokens (src/rl/tokenizer.hpp)


@dataclass
class GptConfig:
    vocab: int = 20       # the task's tokens
    context: int = 96     # positions per sequence (prompt + response)
    d_model: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_ff: int = 256
    init_seed: int = 1

    @staticmethod
    def from_dict(d: dict) -> "GptConfig":
        known = {f for f in GptConfig.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"model: unknown keys {sorted(unknown)} (known: {sorted(known)})")
        return GptConfig(**d)


class Attention(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.d_model, 3 * c.d_model)
        self.c_proj = nn.Linear(c.d_model, c.d_model)

    def forward(self, x, mask, cache: Optional[List[torch.Tensor]] = None):
        # x: (B, T, C); mask: (B, 1, T, S) True where a query may attend a key; cache: [k, v]
        # of earlier positions, (B, H, S - T, D), extended in place of the list's entries.
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        shape = (B, T, self.n_head, C // self.n_head)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            cache[0], cache[1] = k, v
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        # A padded query row sees no key at all: its NaNs are zeroed (its output is never used).
        att = torch.nan_to_num(att, nan=0.0)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.c_fc = nn.Linear(c.d_model, c.d_ff)
        self.c_proj = nn.Linear(c.d_ff, c.d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.d_model)
        self.attn = Attention(c)
        self.ln_2 = nn.LayerNorm(c.d_model)
        self.mlp = Mlp(c)

    def forward(self, x, mask, cache=None):
        x = x + self.attn(self.ln_1(x), mask, cache)
        return x + self.mlp(self.ln_2(x))


@dataclass
class Generated:
    tokens: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)


class Gpt(nn.Module):
    def __init__(self, c: GptConfig):
        super().__init__()
        self.config = c
        self.wte = nn.Embedding(c.vocab, c.d_model)
        self.wpe = nn.Embedding(c.context, c.d_model)
        self.h = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.d_model)
        g = torch.Generator().manual_seed(c.init_seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif "ln_" in name:
                    p.fill_(1.0)
                else:
                    std = 0.02
                    if name.endswith("c_proj.weight"):  # GPT-2: residual projections scaled down
                        std /= math.sqrt(2 * c.n_layer)
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def forward(self, tokens, valid, caches=None, positions=None):
        """Logits (B, T, V) of `tokens` (B, T). `valid` (B, S) marks the real (not padded) tokens
        among everything the model has seen, cached keys first (S = cached + T)."""
        B, T = tokens.shape
        S = valid.shape[1]
        if positions is None:
            positions = (valid.long().cumsum(dim=1) - 1).clamp(min=0)[:, S - T:]
        x = self.wte(tokens) + self.wpe(positions)
        causal = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
        mask = causal[None, None] & valid[:, None, None, :]
        for i, block in enumerate(self.h):
            x = block(x, mask, None if caches is None else caches[i])
        return F.linear(self.ln_f(x), self.wte.weight)

    def response_logprobs(self, prompts: List[List[int]], responses: List[List[int]]):
        """Per sequence, the log-probability of each response token given what precedes it (a
        tensor per sequence, with gradients). Sequences are padded on the right."""
        seqs = [p + r for p, r in zip(prompts, responses)]
        T = max(len(s) for s in seqs)
        tokens = torch.full((len(seqs), T), PAD, dtype=torch.long)
        valid = torch.zeros((len(seqs), T), dtype=torch.bool)
        for b, s in enumerate(seqs):
            tokens[b, : len(s)] = torch.tensor(s)
            valid[b, : len(s)] = True
        logp = self.forward(tokens, valid).log_softmax(dim=-1)
        # Position t predicts token t + 1.
        picked = logp[:, :-1].gather(2, tokens[:, 1:, None]).squeeze(2)
        out = []
        for b, (p, r) in enumerate(zip(prompts, responses)):
            out.append(picked[b, len(p) - 1: len(p) - 1 + len(r)])
        return out

    @torch.no_grad()
    def generate(self, prompts: List[List[int]], max_new_tokens, temperature: float = 1.0,
                 generator: Optional[torch.Generator] = None) -> List[Generated]:
        """One response per prompt, up to EOS, its max_new_tokens (an int, or one per prompt) or
        the context. temperature 0: greedy. logprobs are of the distribution sampled from (the
        model's at `temperature`, as sluice's engine reports them)."""
        batch = DecodeBatch(self, prompts, max_new_tokens, temperature, generator)
        while batch.running():
            batch.step()
        return batch.out


class DecodeBatch:
    """Sequences decoded together, one token each per step(): prefilled once, padded on the left
    so that every sequence's next token sits in the same column, then extended through the
    key-value cache. A sequence stops at EOS, at its limit of new tokens, at the context, or when
    stop() takes it out (exported, abandoned); a stopped sequence still rides along (its outputs
    are ignored): simpler than compacting the cache, and batches are small.

    `starts`, when given, continues sequences: starts[i] holds the tokens and log-probs generated
    so far (a sequence moved here from another generator); they count towards its limit."""

    def __init__(self, model: Gpt, prompts: List[List[int]], max_new_tokens, temperature: float,
                 generator: Optional[torch.Generator] = None,
                 starts: Optional[List[Generated]] = None):
        n = len(prompts)
        self.model, self.temperature, self.generator = model, temperature, generator
        self.limits = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * n
        self.out = [Generated(list(s.tokens), list(s.logprobs)) for s in starts] if starts else \
            [Generated() for _ in range(n)]
        self.prompt_len = [len(p) for p in prompts]
        self.live = [True] * n
        self.steps = 0
        if n == 0:
            return
        seqs = [p + g.tokens for p, g in zip(prompts, self.out)]
        P = max(len(s) for s in seqs)
        tokens = torch.full((n, P), PAD, dtype=torch.long)
        self.valid = torch.zeros((n, P), dtype=torch.bool)
        for b, s in enumerate(seqs):
            tokens[b, P - len(s):] = torch.tensor(s)
            self.valid[b, P - len(s):] = True
        self.next_pos = torch.tensor([len(s) for s in seqs])
        self.caches = [[None, None] for _ in model.h]
        with torch.no_grad():
            self.logits = model.forward(tokens, self.valid, self.caches)[:, -1]
        for b in range(n):
            self._check_done(b)

    def running(self) -> int:
        return sum(self.live)

    def stop(self, b: int) -> None:
        self.live[b] = False

    def _check_done(self, b: int) -> bool:
        g = self.out[b]
        done = (bool(g.tokens) and g.tokens[-1] == EOS) or len(g.tokens) >= self.limits[b] or \
            self.prompt_len[b] + len(g.tokens) >= self.model.config.context
        if done:
            self.live[b] = False
        return done

    @torch.no_grad()
    def step(self) -> List[int]:
        """Draws one token for every running sequence; returns those that finished."""
        if not any(self.live):
            return []
        logits = self.logits
        t = self.temperature
        logp = (logits / t if t > 0 else logits).log_softmax(dim=-1)
        if t > 0:
            nxt = torch.multinomial(logp.exp(), 1, generator=self.generator).squeeze(1)
        else:
            nxt = logits.argmax(dim=-1)
        lp = logp.gather(1, nxt[:, None]).squeeze(1).tolist()
        picked = nxt.tolist()
        finished = []
        for b, live in enumerate(self.live):
            if not live:
                continue
            self.out[b].tokens.append(picked[b])
            self.out[b].logprobs.append(lp[b])
            if self._check_done(b):
                finished.append(b)
        self.steps += 1
        if any(self.live):
            n = len(self.live)
            self.valid = torch.cat([self.valid, torch.ones((n, 1), dtype=torch.bool)], dim=1)
            positions = self.next_pos.clamp(max=self.model.config.context - 1)[:, None]
            self.next_pos = self.next_pos + 1
            logits = self.model.forward(nxt[:, None], self.valid, self.caches, positions)
            self.logits = logits[:, -1]
        return finished


def state_dict_for_publish(model: Gpt):
    """The weights as sluice publishes them: name -> contiguous CPU float32 tensor (the tied head
    is wte.weight; nothing is duplicated)."""
    return {k: v.detach().contiguous() for k, v in model.state_dict().items()}
