"""`async_training`: generation running ahead of the update.

First `RolloutAhead` alone, with a stand-in generate that records the policy version each batch was sampled at; then
the real trainer (tiny model, one rank, in this process) with a recording stand-in for the rollout service.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from recording_rollout import RecordingRollout
from support import in_process_run_overrides

from app.trainer.rollout_ahead import RolloutAhead, staleness_metrics


class Prompts:
    """A loader stand-in: batch k is the int k; its state is how many batches were drawn."""

    def __init__(self) -> None:
        self.drawn = 0

    def draw(self) -> int:
        self.drawn += 1
        return self.drawn

    def state(self) -> dict:
        return {"drawn": self.drawn}


def test_batches_come_in_order_each_sampled_by_the_version_current_when_it_was_submitted():
    prompts, sampled = Prompts(), []

    def generate(batch, version):
        sampled.append((batch, version))
        return batch, version

    ahead = RolloutAhead(1, 3, prompts.draw, prompts.state, generate)
    try:
        assert ahead.next(0) == (1, 0)  # batches 1 and 2 submitted at version 0
        ahead.drain()
        assert ahead.next(1) == (2, 0)  # trained while the policy is at 1: one version stale
        ahead.drain()
        assert ahead.next(2) == (3, 1)  # submitted after the first sync
        with pytest.raises(RuntimeError, match="already been taken"):
            ahead.next(3)  # the run's 3 batches are spent: nothing is drawn past the last step
    finally:
        ahead.close()
    assert sampled == [(1, 0), (2, 0), (3, 1)] and prompts.drawn == 3


def test_the_next_batch_generates_while_the_caller_works_and_drain_waits_for_it():
    prompts, released, started = Prompts(), threading.Event(), threading.Event()

    def generate(batch, version):
        if batch == 2:
            started.set()
            assert released.wait(timeout=30), "the caller never released batch 2"
        return batch

    ahead = RolloutAhead(1, 2, prompts.draw, prompts.state, generate)
    try:
        assert ahead.next(0) == 1  # returned although batch 2 cannot finish yet: it was not waited for
        assert started.wait(timeout=30)  # and it is generating meanwhile, in the background
        released.set()
        ahead.drain()
        assert ahead._queue[0].future.done()
        timings = ahead.take_timings()
        assert timings["timing_s/gen"] >= timings["timing_s/gen_overlap"] >= 0.0
        assert ahead.take_timings()["timing_s/gen"] == 0.0  # reset by each call
    finally:
        ahead.close()


def test_a_checkpoint_keeps_the_position_of_the_oldest_batch_not_yet_trained():
    prompts = Prompts()
    ahead = RolloutAhead(2, 5, prompts.draw, prompts.state, lambda batch, version: batch)
    try:
        assert ahead.next(0) == 1
        ahead.drain()
        # batches 2 and 3 are generated but untrained: a resumed run must draw batch 2 again
        assert prompts.drawn == 3 and ahead.loader_state() == {"drawn": 1}
    finally:
        ahead.close()


def test_a_failed_generation_raises_in_the_caller():
    def generate(batch, version):
        raise ValueError(f"replica lost while sampling batch {batch}")

    prompts = Prompts()
    ahead = RolloutAhead(1, 2, prompts.draw, prompts.state, generate)
    try:
        with pytest.raises(ValueError, match="batch 1"):
            ahead.next(0)
    finally:
        ahead.close()


def test_staleness_is_binned_and_a_batch_past_the_bound_is_refused():
    on = SimpleNamespace(enable=True, max_staleness=1)
    assert staleness_metrics(SimpleNamespace(policy_version=3), 4, on) == {
        "async/staleness/mean": 1.0,
        "async/staleness/0": 0.0,
        "async/staleness/1": 1.0,
    }
    with pytest.raises(RuntimeError, match="2 versions stale"):
        staleness_metrics(SimpleNamespace(policy_version=2), 4, on)
    assert staleness_metrics(SimpleNamespace(policy_version=0), 4, SimpleNamespace(enable=False)) == {}


# ---------------------------------------------------------------------------------------------------- the loop
def _train(compose, tiny_model_dir, data: Path, out: Path, *extra: str) -> tuple[RecordingRollout, list[dict]]:
    from app.trainer.setup import build_trainer

    cfg = compose(
        [
            *in_process_run_overrides(tiny_model_dir, data),
            "actor_rollout_ref.model.lora_rank=4",
            "actor_rollout_ref.model.lora_alpha=8",
            "actor_rollout_ref.rollout.lora_sync=merged",
            "actor_rollout_ref.actor.use_kl_loss=false",
            "trainer.total_training_steps=3",
            "trainer.val_before_train=false",
            "trainer.test_freq=-1",
            "trainer.logger=[jsonl]",
            f"trainer.default_local_dir={out}",
            "reward_model.num_workers=0",
            *extra,
        ]
    )
    rollout = RecordingRollout(vocab_size=1000, n=2, response_len=8, logprob=-1.0)
    build_trainer(cfg, rollout, device="cpu").fit()
    return rollout, [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_one_step_off_policy_trains_on_batches_one_version_old_weighted_by_importance(
    compose, tiny_model_dir, small_arith_data, tmp_path
):
    from app.trainer import checkpoints

    rollout, steps = _train(
        compose,
        tiny_model_dir,
        small_arith_data,
        tmp_path / "run",
        "async_training.enable=true",
        "algorithm.rollout_correction.rollout_is=token",
        "trainer.save_freq=2",
    )
    # the second batch is sampled before the first update lands, the third right after the first sync
    assert rollout.calls == ["generate", "generate", "update_weights", "generate", "update_weights", "update_weights"]
    assert [s["async/staleness/mean"] for s in steps] == [0.0, 1.0, 1.0]
    assert all(s["async/staleness/1"] == (s["async/staleness/mean"] == 1.0) for s in steps)
    assert [s["training/policy_version"] for s in steps] == [1.0, 2.0, 3.0]
    # the sampler reported -1.0 per token; the tiny model gives random tokens about -ln(1000) = -6.9, so the
    # proximal/sampler weights are about exp(-5.9), far below the 2.0 truncation: the weights were computed and used
    assert all(0.0 < s["rollout_corr/rollout_is_mean"] < 0.05 for s in steps)
    assert all(s["rollout_corr/rollout_is_ratio_fraction_high"] == 0.0 for s in steps)
    assert all(s["timing_s/gen_overlap"] >= 0.0 and "timing_s/gen_wait" in s for s in steps)
    # the step-2 checkpoint was written with batch 3 generated but untrained: it keeps batch 3's position
    state = checkpoints.read_state(checkpoints.step_dir(tmp_path / "run", 2))
    assert state["data"]["sampler"]["batch_in_epoch"] == 2


def test_max_staleness_zero_is_the_synchronous_loop(compose, tiny_model_dir, small_arith_data, tmp_path):
    sync_rollout, sync = _train(compose, tiny_model_dir, small_arith_data, tmp_path / "sync")
    async_rollout, zero = _train(
        compose,
        tiny_model_dir,
        small_arith_data,
        tmp_path / "async0",
        "async_training.enable=true",
        "async_training.max_staleness=0",
    )
    assert async_rollout.calls == sync_rollout.calls == ["generate", "update_weights"] * 3
    assert [s["async/staleness/mean"] for s in zero] == [0.0, 0.0, 0.0]
    for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "response_length/mean"):
        assert [s[key] for s in zero] == [s[key] for s in sync], key
