"""A stand-in for `serve.RolloutClient` in trainer-loop tests: random response tokens, a fixed log-prob per token,
and a record of the lifecycle calls the loop makes (generate, sleep, wake_up, update_weights)."""

from __future__ import annotations

import torch

from serve.types import RolloutSample


class RecordingRollout:
    """Answers like `serve.RolloutClient` (random tokens) and records the lifecycle calls."""

    def __init__(self, vocab_size: int, n: int, response_len: int, logprob: float = -1.0) -> None:
        self.vocab_size, self.n, self.response_len, self.logprob = vocab_size, n, response_len, logprob
        self.calls: list[str] = []
        self.asleep = False
        self.version = 0
        self.payloads: list = []  # per update: (payload, its tensors read into a dict, whether they came as a stream)

    def generate(self, prompt_token_ids, *, expect_version, validation=False):
        assert not self.asleep, "generate() reached a sleeping engine"
        assert expect_version == self.version, (expect_version, self.version)
        self.calls.append("generate")
        g = torch.Generator().manual_seed(len(self.calls))
        n = 1 if validation else self.n
        return [
            RolloutSample(
                prompt_index=i,
                sample_index=j,
                response_token_ids=torch.randint(10, self.vocab_size, (self.response_len,), generator=g).tolist(),
                logprobs=[self.logprob] * self.response_len,
                finish_reason="length",
                policy_version=self.version,
            )
            for i in range(len(prompt_token_ids))
            for j in range(n)
        ]

    def update_weights(self, version, payload):
        assert not self.asleep, "weights pushed into a sleeping engine"
        self.calls.append("update_weights")
        streamed = not isinstance(payload.tensors, dict)
        self.payloads.append((payload, dict(payload.tensors), streamed))
        self.version = version
        return version

    def replica_versions(self):
        return {"replica-0": self.version}

    def take_faults(self):
        return set(), 0

    def sleep(self):
        self.calls.append("sleep")
        self.asleep = True

    def wake_up(self):
        self.calls.append("wake_up")
        self.asleep = False
