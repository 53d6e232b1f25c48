"""data.sampler in the loop: with two ranks both take rank 0's draws, and only rank 0's sampler learns, from both
ranks' samples of the step."""

import numpy as np
import torch
from two_ranks import with_two_engines

from app.batch import TensorBatch
from app.data import PromptDataLoader, PromptRecord
from app.data.custom_sampler import CustomBatchSampler
from app.data.dataset import PromptDataset
from app.trainer.collectives import RankGroup
from app.trainer.curriculum import Curriculum, RankZeroDraws, sampler_batch
from app.trainer.rollout_batch import REWARD_EXTRA, RolloutGroup


def _dataset(n):
    return PromptDataset(
        [
            PromptRecord([i + 1], [{"role": "user", "content": str(i)}], "src", str(i), {"index": 50 + i}, None, "r")
            for i in range(n)
        ],
        files=["f"],
    )


class PerRankOrder:
    """Yields another order on each rank, as a sampler with an unseeded generator would; records its updates."""

    def __init__(self, rank):
        self.rank, self.updates = rank, []

    def __iter__(self):
        return iter(range(8) if self.rank == 0 else range(7, -1, -1))

    def __len__(self):
        return 8

    def update(self, batch):
        self.updates.append(batch)


def _group(rank):
    """Rank 0 holds two samples of 3 response tokens, rank 1 one sample of 2 (narrower, so it is zero-padded)."""
    rows = 2 if rank == 0 else 1
    width = 3 if rank == 0 else 2
    scores = torch.zeros(rows, width)
    scores[:, -1] = torch.tensor([1.0, 0.25][:rows]) if rank == 0 else torch.tensor([0.5])
    batch = TensorBatch(
        {
            "responses": torch.arange(rows * width).view(rows, width) + 10 * rank,
            "response_mask": torch.ones(rows, width, dtype=torch.long),
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
            "advantages": torch.full((rows, width), float(rank + 1)),
        }
    )
    return RolloutGroup(
        batch=batch,
        uid=[f"r{rank}-u{i}" for i in range(rows)],
        dataset_index=[3 * rank + i for i in range(rows)],
        data_source=["src"] * rows,
        ground_truth=["g"] * rows,
        extra_info=[{"index": 100 + rank}] * rows,
        messages=[[]] * rows,
        finish_reason=["stop"] * rows,
        policy_version=4,
        extras={"task_score": [1.0, 0.0][:rows] if rank == 0 else [0.5], REWARD_EXTRA + "acc": [True, False][:rows]}
        if rank == 0
        else {"task_score": [0.5], REWARD_EXTRA + "acc": [True]},
    )


def test_two_ranks_take_rank_0s_draws_and_only_rank_0_learns():
    def rank_run(engine):
        ranks = RankGroup(engine)
        sampler = PerRankOrder(engine.dp_rank)
        loader = PromptDataLoader(
            _dataset(8), batch_size=4, pad_token_id=0, batch_sampler=CustomBatchSampler(sampler, 8, 4, "t.py:P")
        )
        curriculum = Curriculum(loader, ranks)
        batches = [loader.next_batch() for _ in range(3)]
        curriculum.learn(_group(engine.dp_rank), step=7, version=4)
        return [b.index for b in batches], [b.uid[0] for b in batches], sampler.updates, loader.state_dict()

    (indices0, uids0, updates0, state0), (indices1, uids1, updates1, _) = with_two_engines(rank_run)
    # rank 0's order (0..7 in batches of 4), on both ranks; the third batch begins rank 0's second epoch
    assert indices0 == indices1 == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]
    assert uids0 == uids1 == ["e0-b0-0", "e0-b1-0", "e1-b0-0"]
    assert updates1 == [] and len(updates0) == 1
    batch = updates0[0]
    assert len(batch) == 3 and batch.meta_info == {"global_steps": 7, "policy_version": 4}
    assert list(batch.non_tensor_batch["uid"]) == ["r0-u0", "r0-u1", "r1-u0"]  # rank 0's samples, then rank 1's
    assert batch.non_tensor_batch["dataset_index"].tolist() == [0, 1, 3]
    assert batch.non_tensor_batch["index"].tolist() == [100, 100, 101]
    assert batch.non_tensor_batch["task_score"].tolist() == [1.0, 0.0, 0.5]
    assert list(batch.non_tensor_batch["acc"]) == [True, False, True]
    # each sample's score on its last token, wherever its rank padded: rank 1's row is a column narrower
    assert batch.batch["token_level_scores"].sum(-1).tolist() == [1.0, 0.25, 0.5]
    assert batch.batch["responses"][2].tolist() == [10, 11, 0] and batch.batch["response_mask"][2].tolist() == [1, 1, 0]
    assert batch.batch["advantages"][:, 0].tolist() == [1.0, 1.0, 2.0]
    assert state0["sampler"]["epoch"] == 1 and state0["sampler"]["batch_in_epoch"] == 1


def test_one_rank_draws_its_own_and_learns_from_its_group():
    class OneRank:
        dp_rank, dp_world_size = 0, 1

        def all_reduce(self, tensor, op="sum"):
            return tensor

    sampler = PerRankOrder(1)
    loader = PromptDataLoader(
        _dataset(8), batch_size=4, pad_token_id=0, batch_sampler=CustomBatchSampler(sampler, 8, 4, "t.py:P")
    )
    curriculum = Curriculum(loader, RankGroup(OneRank()))
    assert not isinstance(loader.sampler, RankZeroDraws) and curriculum.learns
    assert loader.next_batch().index == [7, 6, 5, 4]
    curriculum.learn(_group(0), step=1, version=0)
    assert sampler.updates[0].non_tensor_batch["dataset_index"].tolist() == [0, 1]


def test_without_update_or_custom_sampler_nothing_learns():
    class Plain:
        def __iter__(self):
            return iter(range(8))

    custom = PromptDataLoader(
        _dataset(8), batch_size=4, pad_token_id=0, batch_sampler=CustomBatchSampler(Plain(), 8, 4, "t.py:Plain")
    )
    shuffled = PromptDataLoader(_dataset(8), batch_size=4, pad_token_id=0)
    for loader in (custom, shuffled):
        assert not Curriculum(loader, RankGroup(_NoCollectives())).learns
    Curriculum(custom, RankGroup(_NoCollectives())).learn(_group(0), step=1, version=0)  # no collective, no call


class _NoCollectives:
    dp_rank, dp_world_size = 0, 2

    def all_reduce(self, tensor, op="sum"):
        raise AssertionError("no collective expected")


def test_sampler_batch_arrays():
    batch = sampler_batch(_group(0), RankGroup(_OneRankEngine()), step=2, version=1)
    assert isinstance(batch.non_tensor_batch["uid"], np.ndarray) and batch.non_tensor_batch["uid"].dtype == object
    assert batch.non_tensor_batch["dataset_index"].dtype.kind == "i"
    assert set(batch.batch) == {"responses", "response_mask", "token_level_scores", "token_level_rewards", "advantages"}


class _OneRankEngine:
    dp_rank, dp_world_size = 0, 1

    def all_reduce(self, tensor, op="sum"):
        return tensor
