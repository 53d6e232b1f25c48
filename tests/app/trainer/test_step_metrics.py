"""Steps whose update meets NaN gradients: skipped and counted, no checkpoint of them, and `trainer.max_bad_steps`
in a row stop the run with its last checkpoint intact.

The trainer is the real one (tiny model, one rank, in this process, a recording stand-in for the rollout service);
the NaN comes from a policy loss that returns NaN on chosen steps (`tests/nan_policy_loss.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

import nan_policy_loss
import pytest
import torch
from recording_rollout import RecordingRollout
from support import in_process_run_overrides

from app.batch import TensorBatch
from app.trainer.collectives import RankGroup
from app.trainer.step_metrics import BadStepGuard, BadStepLimitExceeded, token_means


def test_guard_counts_bad_steps_and_stops_at_the_limit_in_a_row():
    guard = BadStepGuard(max_bad_steps=2)
    bad = {"actor/grad_norm_nonfinite": 0.5}  # half the optimizer steps of the update were skipped
    good = {"actor/grad_norm_nonfinite": 0.0, "critic/grad_norm_nonfinite": 0.0}
    assert guard.observe(1, dict(bad)) is True
    metrics = dict(good)
    assert guard.observe(2, metrics) is False and metrics["training/bad_steps"] == 1.0  # a good step resets the run
    assert guard.observe(3, {"critic/grad_norm_nonfinite": 1.0}) is True  # the critic's update counts too
    with pytest.raises(BadStepLimitExceeded, match=r"trainer.max_bad_steps=2: steps 3-4 "):
        guard.observe(4, dict(bad))
    never = BadStepGuard(max_bad_steps=0)
    for step in range(1, 6):
        metrics = dict(bad)
        never.observe(step, metrics)
    assert metrics["training/bad_steps"] == 5.0


class _RankOneHolds:
    """The engine's all-reduce as rank 0 sees it when rank 1 adds `sums` (its token sums, then its token count)."""

    dp_rank, dp_world_size = 0, 2

    def __init__(self, sums: list[float]):
        self.sums = torch.tensor(sums, dtype=torch.float64)

    def all_reduce(self, tensor, op="sum"):
        assert op == "sum"
        return tensor + self.sums


def test_token_means_weigh_every_token_of_the_whole_batch_alike():
    # rank 0: one response of 3 tokens (its padding holds garbage), advantages 1 each, returns 2 each; rank 1: one
    # response of 1 token, advantage -3, return 6. Over the 4 tokens: advantages (3 - 3) / 4 = 0, returns
    # (6 + 6) / 4 = 3; a mean of the ranks' means would read (1 - 3) / 2 = -1 and (2 + 6) / 2 = 4
    batch = TensorBatch(
        {
            "response_mask": torch.tensor([[1, 1, 1, 0]]),
            "advantages": torch.tensor([[1.0, 1.0, 1.0, float("nan")]]),
            "returns": torch.tensor([[2.0, 2.0, 2.0, 9.0]]),
        }
    )
    means = token_means(batch, RankGroup(_RankOneHolds([-3.0, 6.0, 1.0])))
    assert means == {"critic/advantages/mean": 0.0, "critic/returns/mean": 3.0}


def _run(compose, tiny_model_dir, data: Path, out: Path, steps: int, nan_steps: set[int]):
    from app.trainer.setup import build_trainer

    nan_policy_loss.NAN_STEPS, nan_policy_loss.calls = set(nan_steps), 0
    cfg = compose(
        [
            *in_process_run_overrides(tiny_model_dir, data),
            "actor_rollout_ref.actor.policy_loss.loss_mode=nan_policy_loss:loss",
            "trainer.num_workers=1",
            "actor_rollout_ref.actor.use_kl_loss=false",
            f"trainer.total_training_steps={steps}",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.save_freq=1",
            "trainer.max_bad_steps=2",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={out}",
            "reward_model.num_workers=0",
        ]
    )
    return build_trainer(cfg, RecordingRollout(vocab_size=1000, n=2, response_len=8), device="cpu")


def test_a_nan_step_is_skipped_counted_and_not_checkpointed(compose, tiny_model_dir, small_arith_data, tmp_path):
    out = tmp_path / "run"
    _run(compose, tiny_model_dir, small_arith_data, out, steps=3, nan_steps={2}).fit()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["actor/grad_norm_nonfinite"] for s in steps] == [0.0, 1.0, 0.0]
    assert [s["training/bad_steps"] for s in steps] == [0.0, 1.0, 1.0]
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_1", "global_step_3"]


def test_max_bad_steps_in_a_row_stop_the_run_and_keep_the_last_checkpoint(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    out = tmp_path / "run"
    trainer = _run(compose, tiny_model_dir, small_arith_data, out, steps=4, nan_steps={2, 3, 4})
    with pytest.raises(BadStepLimitExceeded, match=r"trainer.max_bad_steps=2: steps 2-3 "):
        trainer.fit()
    assert sorted(p.name for p in out.glob("global_step_*")) == ["global_step_1"]
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    # the kept checkpoint resumes: a new trainer (no NaN now) continues after step 1 and finishes
    _run(compose, tiny_model_dir, small_arith_data, out, steps=2, nan_steps=set()).fit()
    assert (out / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
