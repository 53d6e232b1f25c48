"""The quickstart's curriculum, a sampler in verl's `data.sampler` interface: prompts from the groups the policy
solves about half the time come first.

A GRPO group teaches only where its samples score unlike, so a prompt the policy always solves, or never does, adds
nothing. This sampler keeps, for each group of prompts, the share of its recent samples that scored at least
`data.sampler.right_score` (a count decayed by `data.sampler.decay` at each update, so it follows the policy), and
draws each next prompt with weight p * (1 - p) + `data.sampler.floor`, where p is that share for the prompt's group
(0.5 before the group has samples, so the first draws keep the training set's mix). Groups are the values of
`data.sampler.group_key` (a dotted path into the row, e.g. `extra_info.level` for the built-in arithmetic task's
difficulty levels), or each prompt alone without one. An epoch draws every prompt once.

    python -m app.train ... data.sampler.class_path=pkg://app.data.pass_rate_curriculum \
        data.sampler.class_name=PassRateCurriculum +data.sampler.group_key=extra_info.level

The quickstart counts a right number as right whether it is marked or not (right_score 0.5, the arithmetic reward's
score for a right unmarked number), so a level's share follows its accuracy while the format is still being learned;
with it more seeds gained +0.30 than with the shuffled order (docs/experiments.md, "A curriculum over the arithmetic
levels"). Each draw makes a pass over the training set's prompts. docs/samplers.md: the interface, for a sampler of
your own.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np


class PassRateCurriculum:
    def __init__(self, data_source: Any, data_config: Any) -> None:
        options = data_config.sampler
        self.right_score = float(options.get("right_score", 1.0))
        self.decay = float(options.get("decay", 0.9))
        self.floor = float(options.get("floor", 0.01))
        self.seed = int(data_config.seed)
        key = options.get("group_key")
        labels = [_dotted(data_source[i], key) if key else i for i in range(len(data_source))]
        names, self.group_of = np.unique(np.asarray([str(label) for label in labels]), return_inverse=True)
        self.groups = len(names)
        self.right = np.zeros(self.groups)  # decayed count of right samples per group
        self.seen = np.zeros(self.groups)  # decayed count of samples per group
        self.drawn = np.zeros(len(data_source), dtype=bool)  # this epoch's prompts so far
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.group_of)

    def pass_rates(self) -> np.ndarray:
        """Each group's share of right samples, with one right and one wrong sample as the prior."""
        return (self.right + 1.0) / (self.seen + 2.0)

    def __iter__(self) -> Iterator[int]:
        self.epoch += 1
        self.drawn[:] = False
        while not self.drawn.all():
            # a generator of (seed, epoch, draws so far): the state below is all a resumed run needs
            rng = np.random.default_rng([self.seed, self.epoch, int(self.drawn.sum())])
            left = np.bincount(self.group_of[~self.drawn], minlength=self.groups)  # each group's undrawn prompts
            p = self.pass_rates()
            weights = left * (p * (1.0 - p) + self.floor)  # a group's share: its prompts' weights summed
            group = rng.choice(self.groups, p=weights / weights.sum())
            prompt = rng.choice(np.flatnonzero((self.group_of == group) & ~self.drawn))
            self.drawn[prompt] = True
            yield int(prompt)

    def update(self, batch: Any) -> None:
        """Count the trained samples: each one's prompt (`dataset_index`) and score (the reward on its last token)."""
        groups = self.group_of[np.asarray(batch.non_tensor_batch["dataset_index"], dtype=np.int64)]
        right = batch.batch["token_level_scores"].sum(-1).numpy() >= self.right_score
        self.right *= self.decay
        self.seen *= self.decay
        np.add.at(self.right, groups, right.astype(np.float64))
        np.add.at(self.seen, groups, 1.0)

    def state_dict(self) -> dict[str, Any]:
        return {"right": self.right.copy(), "seen": self.seen.copy(), "drawn": self.drawn.copy(), "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.right, self.seen = state["right"].copy(), state["seen"].copy()
        self.drawn[:] = state["drawn"]  # in place: an epoch's iterator reads this very array
        self.epoch = int(state["epoch"])


def _dotted(row: dict[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        value = value[part]
    return value
