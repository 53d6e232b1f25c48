"""A stand-in rollout service whose groups' scores under tests/app/trainer/yes_reward.py are known in advance."""

from __future__ import annotations

from serve.types import RolloutSample


class YesNoRollout:
    """Answers like `serve.RolloutClient`: in every call, even-numbered prompts get a mixed group ("yes" for the
    first sample, "no" for the others), odd-numbered prompts an all-"no" group. "yes" answers are `long_len` tokens,
    "no" answers 1 token. `mixed=False`: every group all "no" (no group carries a learning signal)."""

    def __init__(self, yes_id: int, no_id: int, n: int, long_len: int, mixed: bool = True) -> None:
        self.yes_id, self.no_id, self.n, self.long_len, self.mixed = yes_id, no_id, n, long_len, mixed
        self.version = 0
        self.train_calls = 0

    def generate(self, prompt_token_ids, *, expect_version, validation=False):
        assert expect_version == self.version
        self.train_calls += not validation
        out = []
        for i in range(len(prompt_token_ids)):
            for j in range(1 if validation else self.n):
                yes = self.mixed and i % 2 == 0 and j == 0
                ids = [self.yes_id] * self.long_len if yes else [self.no_id]
                out.append(
                    RolloutSample(
                        prompt_index=i,
                        sample_index=j,
                        response_token_ids=ids,
                        logprobs=[-1.0] * len(ids),
                        finish_reason="stop",
                        policy_version=self.version,
                    )
                )
        return out

    def update_weights(self, version, payload):
        self.version = version
        return version

    def replica_versions(self):
        return {"replica-0": self.version}

    def take_faults(self):
        return set(), 0
