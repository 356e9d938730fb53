"""A stand-in for sluice.ArithmeticTask, for selftest.py on a machine without the sluice package.

Same format, tokens and reward as the C++ task (src/rl/task.*): a prompt is BOS, k terms joined by
'+', then '='; the response is the k-1 running sums joined by ',', then EOS; reward 1 for a well
formed response whose last number is the sum, else 0. k is lognormal (median 3, p99 14, within
[2, 16]). The prompt streams and the held-out split are its own (Python's random and a SHA-256
of the text), not the C++ task's: jobs use sluice.ArithmeticTask, which is that task itself.
"""
from __future__ import annotations

import hashlib
import math
import random
from typing import List, Sequence, Tuple

VOCAB = "_^$0123456789+-*=,: "
BOS, EOS = 1, 2
PLUS, COMMA, EQUALS = VOCAB.index("+"), VOCAB.index(","), VOCAB.index("=")


def encode(text: str) -> List[int]:
    return [VOCAB.index(c) for c in text]


class StandinTask:
    vocab_size = len(VOCAB)

    def __init__(self, config=None):
        c = dict(config or {})
        self.seed = c.get("seed", 1)
        self.min_terms = c.get("min_terms", 2)
        self.max_terms = c.get("max_terms", 16)
        self.max_operand = c.get("max_operand", 9)
        self.heldout_fraction = c.get("heldout_fraction", 0.1)
        self.mu = math.log(c.get("median_terms", 3.0))
        z99 = 2.3263478740408408  # the 99th percentile of the standard normal
        self.sigma = math.log(c.get("p99_terms", 14.0) / c.get("median_terms", 3.0)) / z99

    def _heldout(self, text: str) -> bool:
        h = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return (h >> 11) * 2.0 ** -53 < self.heldout_fraction

    def _draw(self, stream: str, index: int, want_heldout: bool) -> Tuple[str, str, List[int]]:
        for attempt in range(100000):
            rng = random.Random(f"{self.seed}/{stream}/{index}/{attempt}")
            k = self.min_terms
            for _ in range(64):
                k = round(math.exp(self.mu + self.sigma * rng.gauss(0.0, 1.0)))
                if self.min_terms <= k <= self.max_terms:
                    break
            k = min(max(k, self.min_terms), self.max_terms)
            text = "+".join(str(rng.randint(0, self.max_operand)) for _ in range(k)) + "="
            if self._heldout(text) == want_heldout:
                return f"{stream}-{index}", text, [BOS] + encode(text)
        raise RuntimeError(f"no {stream} prompt for index {index}")

    def train_prompt(self, index: int) -> Tuple[str, str, List[int]]:
        return self._draw("train", index, False)

    def heldout_prompt(self, index: int) -> Tuple[str, str, List[int]]:
        return self._draw("heldout", index, True)

    @staticmethod
    def _terms(prompt: Sequence[int]) -> List[int]:
        return [int(t) for t in decode(prompt[1:-1]).split("+")]

    def solution(self, prompt: Sequence[int]) -> List[int]:
        terms, sums = self._terms(prompt), []
        for t in terms[1:]:
            sums.append((sums[-1] if sums else terms[0]) + t)
        return encode(",".join(map(str, sums))) + [EOS]

    def correct(self, prompt: Sequence[int], response: Sequence[int]) -> bool:
        gold = self.solution(prompt)
        if not response or response[-1] != EOS:
            return False
        parts = decode(response[:-1]).split(",")
        want = decode(gold[:-1]).split(",")
        if len(parts) != len(want):
            return False
        for p in parts:
            if not p.isdigit() or len(p) > 4 or (len(p) > 1 and p[0] == "0"):
                return False
        return parts[-1] == want[-1]

    def reward(self, prompt: Sequence[int], response: Sequence[int]) -> float:
        return 1.0 if self.correct(prompt, response) else 0.0

    def decode(self, tokens: Sequence[int]) -> str:
        return decode(tokens)


def decode(tokens: Sequence[int]) -> str:
    return "".join(VOCAB[t] if 0 <= t < len(VOCAB) else "?" for t in tokens)
