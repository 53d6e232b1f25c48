"""A stand-in for the rollout client in multi-turn tests: `generate` with the client's signature answers turn k of a
conversation with `script[k]`, where k is the number of assistant turns already in the context (so concurrent
trajectories each get their own turn), and records every call."""

from __future__ import annotations

import threading

from serve.types import RolloutSample


def logprobs_for(turn: int, count: int) -> list[float]:
    """Distinct, recognisable log-probs per turn and position, so a misplaced one shows."""
    return [-(turn + 1) - k / 1000 for k in range(count)]


class ScriptedPolicy:
    def __init__(self, tokenizer, script):
        self.tokenizer = tokenizer
        self.script = script
        self.calls = []
        self.lock = threading.Lock()
        self.header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def generate(self, prompt_token_ids, *, expect_version, sampling):
        [context] = prompt_token_ids
        turn = _count(context, self.header) - 1  # the prompt's own header opens turn 0
        ids = self.tokenizer.encode(self.script[turn], add_special_tokens=False) + [self.tokenizer.eos_token_id]
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        with self.lock:
            self.calls.append((list(context), expect_version, sampling))
        return [RolloutSample(0, 0, ids, logprobs_for(turn, len(ids)), finish, expect_version)]


def _count(seq, sub):
    return sum(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))
